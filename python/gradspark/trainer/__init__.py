"""Trainers: drive an optimizer over a distributed objective (sync steps or a parameter server)."""

from gradspark.trainer.asynchronous import train_async
from gradspark.trainer.config import AsyncConfig, SyncConfig, TrainingResult
from gradspark.trainer.objective import LinearObjective
from gradspark.trainer.sync import train_sync

__all__ = [
    "AsyncConfig", "LinearObjective", "SyncConfig", "TrainingResult", "train_async", "train_sync",
]
