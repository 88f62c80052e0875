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
