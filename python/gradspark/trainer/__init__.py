"""Trainers: drive an optimizer over a distributed objective."""

from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.sync import SyncConfig, TrainingResult, train_sync

__all__ = ["LinearObjective", "SyncConfig", "TrainingResult", "train_sync"]
