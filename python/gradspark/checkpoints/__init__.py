"""Checkpoints of training state: atomic, checksummed, on any Hadoop (or pyarrow) file system."""

from gradspark.checkpoints.format import (
    CheckpointWriteError,
    CorruptCheckpointError,
    TrainingState,
)
from gradspark.checkpoints.store import ArrowCheckpointStore, CheckpointStore, checkpoint_store
from gradspark.checkpoints.session import (
    TrainingCheckpoints,
    data_fingerprint,
    run_directory,
    training_meta,
)

__all__ = [
    "ArrowCheckpointStore", "CheckpointStore", "CheckpointWriteError", "CorruptCheckpointError",
    "TrainingCheckpoints", "TrainingState",
    "checkpoint_store", "data_fingerprint", "run_directory", "training_meta",
]
