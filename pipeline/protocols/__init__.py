"""Shuffle protocols: plan parameters, encode user blocks, merge, decode.

The contract every protocol implements is pipeline.protocols.base.Protocol.
No Ray and no I/O here (shared/DESIGN.md §2, `protocols/`).
"""
from __future__ import annotations

from pipeline.protocols import cjmp, multi_message, sums
from pipeline.protocols.base import Protocol
from pipeline.protocols.cjmp import CjmpVec

PROTOCOLS: dict[str, type[Protocol]] = {
    protocol.name: protocol for protocol in (CjmpVec, *multi_message.GIRGIS_PROTOCOLS, *sums.SUM_PROTOCOLS)}
# The protocol a privacy model runs when the config names the model only.
DEFAULT_PROTOCOL = {"shuffle": CjmpVec.name, "central": sums.CentralGaussian.name, "local": sums.LocalL2.name,
                    "none": sums.ExactSum.name}


def build_protocol(name: str, accounting: str = "paper", **options) -> Protocol:
    """The built-in protocol registered under `name`, planning for `accounting`."""
    return PROTOCOLS[name](accounting, **options)


__all__ = ["DEFAULT_PROTOCOL", "PROTOCOLS", "CjmpVec", "Protocol", "build_protocol", "cjmp", "sums"]
