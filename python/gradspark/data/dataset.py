"""From a DataFrame to cached, validated blocks plus their statistics."""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gradspark.data.blocks import CLASS_INDEX, BINARY, blockify_partition, compact_block
from gradspark.data.statistics import DataStatistics, block_statistics, merge_statistics
from gradspark.data.validation import (InvalidDataError, check_schema, feature_vector_size,
                                       raising_data_errors)
from gradspark.stages.sources import RddBlocks
from gradspark.data.training import TrainingData

logger = logging.getLogger(__name__)


class NumpyTrainingData(TrainingData):
    """Training blocks cached for one fit, and what one pass learned about them.

    With ``checkpoint_dir``, the blocks are also written as a reliable RDD
    checkpoint (right after that pass, from the cache): the lineage is cut, so
    blocks lost with an executor are re-read exactly as they were, rather than
    recomputed from an input whose row order may not be reproducible (any
    shuffle upstream). The checkpoint files are deleted on :meth:`release`.

    Building it runs exactly one Spark job over the input: rows are validated
    and blockified, the blocks are cached (``MEMORY_AND_DISK``, so data larger
    than storage memory spills instead of failing), and column statistics are
    tree-aggregated in the same pass. Call :meth:`release` (or use it as a
    context manager) to unpersist the blocks.
    """

    def __init__(
        self,
        df: DataFrame,
        features_col: str,
        label_col: str,
        weight_col: Optional[str],
        label_domain: str,
        block_size: int,
        aggregation_depth: int,
        checkpoint_dir: Optional[str] = None,
    ) -> None:
        check_schema(df, features_col, label_col, weight_col)
        self.num_features = feature_vector_size(df, features_col)
        self._uncompacted: Optional[RDD] = None  # the blocks before compact(), if called
        self._feature_map = None
        columns = [F.col(features_col), F.col(label_col).cast("double")]
        if weight_col:
            columns.append(F.col(weight_col).cast("double"))
        rows = df.select(*columns).rdd

        num_features = self.num_features

        def to_blocks(partition, iterator):
            return blockify_partition(
                partition, iterator, num_features, block_size, label_domain,
                features_col, label_col, weight_col,
            )

        self.blocks: RDD = rows.mapPartitionsWithIndex(to_blocks)
        self.blocks.persist(StorageLevel.MEMORY_AND_DISK)
        self.blocks.setName(f"gradspark training blocks ({features_col}, {label_col})")
        if checkpoint_dir:
            sc = self.blocks.context
            if sc.getCheckpointDir() is None:
                sc.setCheckpointDir(checkpoint_dir)
                logger.info("SparkContext checkpoint directory set to %s", checkpoint_dir)
            self.blocks.checkpoint()

        track_classes = label_domain in (BINARY, CLASS_INDEX)
        try:
            with raising_data_errors(features_col):
                stats = self.blocks.map(
                    lambda block: block_statistics(block, track_classes)
                ).treeAggregate(None, merge_statistics, merge_statistics, aggregation_depth)
        except BaseException:
            self.release()
            raise
        self.statistics: DataStatistics = trainable(stats, weight_col, self.release)
        logger.info(
            "cached %d rows x %d features in %d partitions (weight sum %g)",
            stats.count, self.num_features, self.blocks.getNumPartitions(), stats.weight_sum,
        )

    # The interface JvmTrainingData shares: what the estimators and engines read.
    def compact(self, active: np.ndarray) -> None:
        """Keep only the ``active`` features, renumbered (see :mod:`gradspark.data.compaction`):
        the compacted blocks are cached and computed now, these unpersisted."""
        sc = self.blocks.context
        self._feature_map = sc.broadcast(np.asarray(active, dtype=np.int64))
        feature_map = self._feature_map
        compacted = self.blocks.map(lambda block: compact_block(block, feature_map.value))
        compacted.persist(StorageLevel.MEMORY_AND_DISK)
        compacted.setName(f"{self.blocks.name()} ({len(active)} of {self.num_features} features)")
        compacted.foreach(lambda _: None)
        self.blocks.unpersist(blocking=False)
        self._uncompacted, self.blocks = self.blocks, compacted
        self.statistics = self.statistics.select(active)
        self.num_features = len(active)

    def python_blocks(self) -> RDD:
        return self.blocks

    def block_source(self):
        return RddBlocks(self.blocks)

    @property
    def num_partitions(self) -> int:
        return self.blocks.getNumPartitions()

    def stored_bytes(self) -> float:
        """Memory + disk size of the cached blocks, as Spark's storage info reports it."""
        return cached_bytes(self.blocks.context, self.blocks.id())

    def release(self) -> None:
        for blocks in (self.blocks, self._uncompacted):
            if blocks is None:
                continue
            blocks.unpersist(blocking=False)
            checkpoint_file = blocks.getCheckpointFile()
            if checkpoint_file:
                jvm = blocks.context._jvm
                path = jvm.org.apache.hadoop.fs.Path(checkpoint_file)
                path.getFileSystem(blocks.context._jsc.hadoopConfiguration()).delete(path, True)
        if self._feature_map is not None:
            self._feature_map.destroy()
            self._feature_map = None



def trainable(stats: Optional[DataStatistics], weight_col: Optional[str],
              release) -> DataStatistics:
    """The pass's statistics, or (after ``release()``) the error saying why nothing can be
    trained: no rows, or weights that sum to zero."""
    if stats is None or stats.count == 0:
        release()
        raise InvalidDataError("the training DataFrame is empty")
    if stats.weight_sum <= 0:
        release()
        raise InvalidDataError(
            f"the weights in column {weight_col!r} sum to zero; nothing to train on"
        )
    return stats


def cached_bytes(sc, rdd_id: int) -> float:
    """Memory + disk size of a cached RDD, from Spark's storage info (no extra job)."""
    for info in sc._jsc.sc().getRDDStorageInfo():
        if info.id() == rdd_id:
            return float(info.memSize() + info.diskSize())
    return 0.0
