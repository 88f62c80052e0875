"""Result sinks: MLflow and Parquet (the only layer importing mlflow or writing Parquet).

The names below load on first use (PEP 562): mlflow alone takes seconds to import,
and `ParquetStore` does not need it.
"""
from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ below
    from pipeline.tracking.mlflow_tracker import MlflowTracker, experiment_address, ui_command
    from pipeline.tracking.parquet_store import FAILED, FINISHED, ParquetStore, migrate

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "mlflow_tracker": ["MlflowTracker", "experiment_address", "ui_command"],
    "parquet_store": ["FAILED", "FINISHED", "ParquetStore", "migrate"],
})
