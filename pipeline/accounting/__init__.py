"""Privacy events and accountants (paper mode; shared/DESIGN.md §2, `accounting/`).

The names and submodules below load on first use (PEP 562), so that importing one
accountant (e.g. `pipeline.accounting.shuffle_gaussian`), or a protocol in a shard
actor, which never accounts, does not import dp_accounting (a second of start-up).
"""
from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ below
    from pipeline.accounting import events, mechanisms
    from pipeline.accounting.events import PvecDpEvent
    from pipeline.accounting.ledger import COMPOSITIONS, FULLY_INTERACTIVE, SEQUENTIAL, LedgerError, PrivacyLedger

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submodules=["events", "mechanisms"], submod_attrs={
    "events": ["PvecDpEvent"],
    "ledger": ["COMPOSITIONS", "FULLY_INTERACTIVE", "LedgerError", "PrivacyLedger", "SEQUENTIAL"],
})

# The accountants' version, recorded with every run (runs column `accounting_version`), so
# that results.load can flag a run whose ledger an older, since corrected, accountant wrote.
#   1  (unrecorded) up to issue 41: record-level tight calls under k-of-n client sampling took
#      WBK19 over the clients of a one-record curve, which under-reports (up to 22.8× in RDP).
#   2  issue 41: that route withdrawn; every route checked against exact worst cases; a
#      shuffled call's ε at most its pure Σε0.
ACCOUNTING_VERSION = 2
# The runs whose ledgers version 1 may have under-reported: tight accounting at record level.
UNPROVEN_BEFORE = {2: "record-level tight accounting (privacy.unit record, privacy.accounting tight) under "
                      "client sampling took a route that under-reports (issue 41): re-run to get a proven ε"}
