"""What every kind of training data offers a fit: one interface for classic, JVM and Connect data.

A fit makes one data pass (:mod:`gradspark.fit.plan` chooses where): the rows
become validated blocks, cached, with their statistics. The three kinds differ
only in where the blocks live -- Python workers' pickles
(:class:`~gradspark.data.dataset.NumpyTrainingData`), the JVM
(:class:`~gradspark.data.jvm.JvmTrainingData`) or a cached DataFrame of encoded
blocks on a Spark Connect session (:class:`~gradspark.data.frames.FrameTrainingData`)
-- and every engine and trainer reads them through this interface.
"""

from __future__ import annotations

import abc

import numpy as np

from gradspark.data.statistics import DataStatistics


class TrainingData(abc.ABC):
    """Cached, validated training blocks and their statistics, for one fit.

    Built by one Spark job over the input; :meth:`release` (or leaving the
    ``with`` block) unpersists everything the fit cached.
    """

    num_features: int
    statistics: DataStatistics

    @abc.abstractmethod
    def compact(self, active: np.ndarray) -> None:
        """Keep only the ``active`` features (see :mod:`gradspark.data.compaction`)."""

    @abc.abstractmethod
    def block_source(self):
        """Where long-running workers read the blocks (:mod:`gradspark.stages.sources`)."""

    @property
    @abc.abstractmethod
    def num_partitions(self) -> int:
        """Partitions of the cached blocks."""

    @abc.abstractmethod
    def stored_bytes(self) -> float:
        """Memory + disk size of the cached blocks, as Spark's storage info reports it."""

    @abc.abstractmethod
    def release(self) -> None:
        """Unpersist (and delete the checkpoints of) everything this data cached."""

    def __enter__(self) -> "TrainingData":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
