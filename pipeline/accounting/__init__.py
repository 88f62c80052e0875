"""Privacy events and accountants (paper mode; shared/DESIGN.md §2, `accounting/`)."""
from pipeline.accounting.events import PvecDpEvent
from pipeline.accounting.ledger import (
    COMPOSITIONS,
    FULLY_INTERACTIVE,
    SEQUENTIAL,
    LedgerError,
    PrivacyLedger,
)

__all__ = ["COMPOSITIONS", "FULLY_INTERACTIVE", "SEQUENTIAL", "LedgerError", "PrivacyLedger", "PvecDpEvent"]
