"""Result sinks: MLflow and Parquet (the only layer importing mlflow or writing Parquet)."""
from pipeline.tracking.mlflow_tracker import MlflowTracker, ui_command
from pipeline.tracking.parquet_store import FAILED, FINISHED, ParquetStore

__all__ = ["FAILED", "FINISHED", "MlflowTracker", "ParquetStore", "ui_command"]
