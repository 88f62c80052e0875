"""`python -m pipeline epsilon MECHANISM ...`: the privacy accountants as a calculator (placeholder, being written)."""
from __future__ import annotations

import argparse


def add_parser(commands) -> None:
    commands.add_parser("epsilon", help="compute (ε, δ) of a mechanism with the accountants")


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError
