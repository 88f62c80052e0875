"""SCO algorithms as pure functions over explicit state (shared/DESIGN.md §2)."""
from __future__ import annotations

from pipeline.optimizers.base import DATA, GRADIENTS, Optimizer, RoundGroup, RoundPlan, Schedule
from pipeline.optimizers.full_gd import FullGD, FullGDSmoothed
from pipeline.optimizers.mean_estimation import MeanEstimation
from pipeline.optimizers.frank_wolfe import FrankWolfeL1
from pipeline.optimizers.mirror_descent import MirrorDescentL1
from pipeline.optimizers.pan_agd import PanAGD
from pipeline.optimizers.phased import FullPhased, SeqPhased
from pipeline.optimizers.pnsgd import PNSGD
from pipeline.optimizers.sampled_sgd import SGD, CldpSGD, DpSGD, DssSGD
from pipeline.optimizers.seq_agd import PARAMETER_MODES, SeqAGD, SeqAGDSmoothed
from pipeline.optimizers.seq_sgd import SeqSGD

OPTIMIZERS = {cls.name: cls for cls in (MeanEstimation, SeqSGD, SeqAGD, SeqAGDSmoothed, SeqPhased, FullGD, FullGDSmoothed,
                                        FullPhased, PanAGD, SGD, DpSGD, CldpSGD, DssSGD, PNSGD, MirrorDescentL1, FrankWolfeL1)}

__all__ = ["FrankWolfeL1", "FullPhased", "PanAGD", "MirrorDescentL1", "PNSGD", "SGD", "CldpSGD", "DpSGD", "DssSGD", "DATA", "GRADIENTS", "OPTIMIZERS", "PARAMETER_MODES", "FullGD", "FullGDSmoothed", "MeanEstimation", "Optimizer",
           "RoundGroup", "RoundPlan", "Schedule", "SeqAGD", "SeqAGDSmoothed", "SeqPhased", "SeqSGD"]
