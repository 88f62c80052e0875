"""Shuffle protocols: plan parameters, encode user blocks, merge, decode.

No Ray and no I/O here (shared/DESIGN.md §2, `protocols/`).
"""
from __future__ import annotations

import attr

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
    decode = staticmethod(cjmp.decode)

    def __init__(self, accounting: str = "paper"):
        self.accounting = accounting

    @staticmethod
    def finish(params: cjmp.PvecParams, total: cjmp.PartialCounts, rng=None) -> cjmp.ShuffledCounts:
        """The analyzer's statistic (no central noise: `rng` is unused)."""
        return cjmp.finish(params, total)

    @staticmethod
    def released_count(params: cjmp.PvecParams, statistic) -> int:
        """What the estimated sum is divided by: the call's users."""
        return params.users

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
        return cjmp.plan(self.accounting, round_plan.users, dim, round_plan.epsilon, round_plan.delta,
                         round_plan.norm_bound, round_plan.folds)

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
