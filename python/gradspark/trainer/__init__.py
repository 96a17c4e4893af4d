"""Trainers: drive an optimizer over a distributed objective (sync steps or a parameter server)."""

from gradspark.trainer.asynchronous import AsyncConfig, train_async
from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.sync import SyncConfig, TrainingResult, train_sync

__all__ = [
    "AsyncConfig", "LinearObjective", "SyncConfig", "TrainingResult", "train_async", "train_sync",
]
