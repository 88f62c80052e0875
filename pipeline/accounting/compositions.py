"""How a schedule's rounds compose, and the accounting modes: names only, so that
optimizers (which declare their composition) load in shard actors without the
accountants (pipeline.accounting.ledger applies the rules)."""

SEQUENTIAL = "sequential"  # disjoint batches: parallel composition (seed 000, proof of Theorem 4.1)
FULLY_INTERACTIVE = "fully_interactive"  # every user in every round: the rounds compose
FINAL_ITERATE = "final_iterate"  # only the last iterate is released (PNSGD, seed 002)
PHASED = "phased"  # disjoint groups, each fully interactive (seed 000, Lemma B.7)
COMPOSITIONS = (SEQUENTIAL, FULLY_INTERACTIVE, FINAL_ITERATE, PHASED)
PAPER, TIGHT = "paper", "tight"
ACCOUNTING_MODES = (PAPER, TIGHT)
