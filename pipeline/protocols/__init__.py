"""Shuffle protocols: plan parameters, encode user blocks, merge, decode.

No Ray and no I/O here (shared/DESIGN.md §2, `protocols/`).
"""
from __future__ import annotations

import attr

from pipeline.accounting.events import PvecDpEvent
from pipeline.protocols import cjmp


class CjmpVec:
    """P_vec of seed 000 (Algorithm 2, Theorem 3.2) as the engine drives it.

    Args:
      accounting: "paper" plans by Theorem 3.2; "tight" calibrates the noise
        with the proven bound of pipeline.accounting.pvec_tight.
    """

    name = "cjmp_vec"
    encode_block = staticmethod(cjmp.encode_block)
    merge = staticmethod(cjmp.merge)
    finish = staticmethod(cjmp.finish)
    encode_messages = staticmethod(cjmp.encode_messages)
    count_messages = staticmethod(cjmp.count_messages)
    decode = staticmethod(cjmp.decode)

    def __init__(self, accounting: str = "paper"):
        self.accounting = accounting

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


PROTOCOLS = {CjmpVec.name: CjmpVec}

__all__ = ["PROTOCOLS", "CjmpVec", "cjmp"]
