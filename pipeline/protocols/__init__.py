"""Shuffle protocols: plan parameters, encode user blocks, merge, decode.

No Ray and no I/O here (shared/DESIGN.md §2, `protocols/`).
"""
from __future__ import annotations

import dataclasses

import attr
import numpy as np

from pipeline.accounting.events import PvecDpEvent
from pipeline.protocols import cjmp, multi_message, sums


class CjmpVec:
    """P_vec of seed 000 (Algorithm 2, Theorem 3.2) as the engine drives it.

    Args:
      accounting: "paper" plans by Theorem 3.2; "tight" calibrates the noise
        with the proven bound of pipeline.accounting.pvec_tight.
    """

    name = "cjmp_vec"
    model = "shuffle"
    supports_literal = True
    encode_block = staticmethod(cjmp.encode_block)
    merge = staticmethod(cjmp.merge)
    encode_messages = staticmethod(cjmp.encode_messages)
    count_messages = staticmethod(cjmp.count_messages)

    def __init__(self, accounting: str = "paper"):
        self.accounting = accounting

    @staticmethod
    def finish(params: cjmp.PvecParams, total: cjmp.PartialCounts, rng=None) -> cjmp.ShuffledCounts:
        """The analyzer's statistic (no central noise: `rng` is unused)."""
        return cjmp.finish(params, total)

    @staticmethod
    def released_count(params: cjmp.PvecParams, statistic) -> int:
        """What the estimated sum is divided by: the users whose messages arrived."""
        return statistic.users

    @staticmethod
    def decode(params: cjmp.PvecParams, counts: cjmp.ShuffledCounts) -> np.ndarray:
        """Analyzer A_vec; with dropouts it decodes the users whose messages arrived (their count is public)."""
        if params.honest_users is not None:
            params = dataclasses.replace(params, users=counts.users)
        return cjmp.decode(params, counts)

    def mean_mse(self, users: int, dim: int, epsilon: float, delta: float, norm_bound: float, folds: int = 1) -> float:
        """E‖estimate of the mean − mean‖² of one call (calibrated parameters)."""
        return cjmp.mean_mse(self.accounting, users, dim, epsilon, delta, norm_bound, folds)

    def plan(self, round_plan, dim: int) -> cjmp.PvecParams:
        """The parameters of one round's call.

        Args:
          round_plan: the round (users, ε, δ, Δ₂, folds; see optimizers.base.RoundPlan).
          dim: d.

        Returns:
          The parameters.
        """
        if round_plan.honest_fraction < 1.0:
            return self._robust_plan(round_plan, dim)
        return cjmp.plan(self.accounting, round_plan.users, dim, round_plan.epsilon, round_plan.delta,
                         round_plan.norm_bound, round_plan.folds)

    def _robust_plan(self, round_plan, dim: int) -> cjmp.PvecParams:
        """Robust mode (seed 000 Appendix A.3): the round's population is planned for, its
        sample of honest users sends. Paper: Theorem 3.2 at γε, which Corollary A.9 makes
        (ε, δ) with a γ fraction honest. Tight: the noise calibrated for the honest users
        alone, each of the population sending that many noise bits."""
        population, honest = round_plan.population, round_plan.users
        if self.accounting == "paper":
            fraction = honest / population
            params = cjmp.plan("paper", population, dim, round_plan.epsilon * fraction, round_plan.delta,
                               round_plan.norm_bound, round_plan.folds)
        else:
            params = dataclasses.replace(cjmp.plan("tight", honest, dim, round_plan.epsilon, round_plan.delta,
                                                   round_plan.norm_bound, round_plan.folds), users=population)
        return dataclasses.replace(params, honest_users=honest)

    @staticmethod
    def event(params: cjmp.PvecParams, block_size: int) -> PvecDpEvent:
        """The privacy event of one call.

        Args:
          params: the call's parameters.
          block_size: users per engine block (decides the noise sampler).

        Returns:
          The event.
        """
        copied = {field.name: getattr(params, field.name)
                  for field in attr.fields(PvecDpEvent) if field.name != "noise_sampler"}
        return PvecDpEvent(**copied, noise_sampler=params.noise_sampler(block_size))


PROTOCOLS = {protocol.name: protocol
             for protocol in (CjmpVec, *multi_message.GIRGIS_PROTOCOLS, *sums.SUM_PROTOCOLS)}


def build_protocol(name: str, accounting: str = "paper", **options):
    """The protocol registered under `name`, planning for `accounting`."""
    return PROTOCOLS[name](accounting, **options)


__all__ = ["PROTOCOLS", "CjmpVec", "build_protocol", "cjmp", "sums"]
