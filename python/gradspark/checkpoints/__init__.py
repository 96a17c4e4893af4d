"""Checkpoints of training state: atomic, checksummed, on any Hadoop file system."""

from gradspark.checkpoints.format import CorruptCheckpointError, TrainingState
from gradspark.checkpoints.store import CheckpointStore
from gradspark.checkpoints.session import TrainingCheckpoints, data_fingerprint

__all__ = [
    "CheckpointStore", "CorruptCheckpointError", "TrainingCheckpoints", "TrainingState",
    "data_fingerprint",
]
