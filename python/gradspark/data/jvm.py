"""Training blocks built, validated, cached and summarized by the JVM kernels.

One Spark job of Scala code (``scala/src/main/scala/io/gradspark/kernels``)
turns the input rows into cached blocks and their statistics; the blocks
stay in the JVM, where :class:`gradspark.engine.jvm.JvmGradientEngine` sums
gradients over them, and reach Python workers as Arrow batches when a
long-running stage asks for them.
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np
from pyspark import StorageLevel

from gradspark.data.blocks import BINARY, CLASS_INDEX
from gradspark.data.codec import decode_block
from gradspark.data.dataset import cached_bytes, trainable
from gradspark.data.statistics import DataStatistics, Moments
from gradspark.data.validation import check_schema, raising_data_errors
from gradspark.jvm.loader import call_for_doubles, call_with_file, load_kernels
from gradspark.stages.sources import FrameBlocks, TaggedByteBlocks
from gradspark.data.training import TrainingData

logger = logging.getLogger(__name__)

_STATS_HEADER = 8


def _statistics(flat: np.ndarray, d: int) -> Optional[DataStatistics]:
    """The pass's answer as DataStatistics: the flat Statistics layout, or the
    SparseStatistics one (CSR blocks), densified here."""
    if len(flat) == 0:
        return None
    if flat[0] < 0:
        return _sparse_statistics(flat, d)
    h = _STATS_HEADER
    k = int(flat[6])
    return _assemble(flat[:h], flat[h:h + d].copy(), flat[h + d:h + 2 * d].copy(),
                     flat[h + 2 * d:h + 2 * d + k].copy())


def _sparse_statistics(flat: np.ndarray, d: int) -> DataStatistics:
    """SparseStatistics (Statistics.scala): -1, the header and class weights, u, then u
    feature indices, sums of ``w x`` and of ``w x^2``. Densified as Statistics.withSums
    does, operation for operation (so bit-identical to the JVM's dense answer): the
    zeros and u scatters cost a fraction of writing and reading 2 d doubles."""
    h = _STATS_HEADER
    header = flat[1:1 + h]
    k = int(header[6])
    base = 1 + h + k
    u = int(flat[base])
    index = flat[base + 1:base + 1 + u].astype(np.int64)
    s1, s2 = flat[base + 1 + u:base + 1 + 2 * u], flat[base + 1 + 2 * u:base + 1 + 3 * u]
    mean, m2 = np.zeros(d), np.zeros(d)
    total = float(header[1])
    if total > 0:
        column_mean = s1 / total
        column_m2 = s2 - total * column_mean * column_mean
        mean[index] = column_mean
        m2[index] = np.where(column_m2 >= 0.0, column_m2, 0.0)
    return _assemble(header, mean, m2, flat[1 + h:base].copy())


def _assemble(header: np.ndarray, mean: np.ndarray, m2: np.ndarray,
              class_weights: np.ndarray) -> DataStatistics:
    total = float(header[1])
    return DataStatistics(
        count=int(header[0]),
        weight_sum=total,
        weight_sq_sum=float(header[2]),
        features=Moments(total, mean, m2),
        label=Moments(total, np.array([header[4]]), np.array([header[5]])),
        label_max=float(header[3]),
        class_weights=class_weights,
        stored_entries=float(header[7]),
    )


class JvmTrainingData(TrainingData):
    """Training blocks validated, cached and summarized by Scala code, for one fit.

    Same interface and semantics as :class:`gradspark.data.dataset.NumpyTrainingData`:
    one Spark job over the input (blockify + validate, cache ``MEMORY_AND_DISK``,
    tree-aggregated statistics), an optional reliable RDD checkpoint of the
    blocks, :meth:`release` (or the context manager) unpersists everything.
    """

    def __init__(
        self,
        df,
        features_col: str,
        label_col: str,
        weight_col: Optional[str],
        label_domain: str,
        block_size: int,
        aggregation_depth: int,
        checkpoint_dir: Optional[str] = None,
    ) -> None:
        check_schema(df, features_col, label_col, weight_col)
        self.spark = df.sparkSession
        self._python_blocks = None
        self.label_domain = label_domain
        self.aggregation_depth = aggregation_depth
        entry = load_kernels(self.spark)
        sc = self.spark.sparkContext
        if checkpoint_dir and sc.getCheckpointDir() is None:
            sc.setCheckpointDir(checkpoint_dir)
            logger.info("SparkContext checkpoint directory set to %s", checkpoint_dir)
        # No job reads the first row first: the blocks learn the vectors' size, and the
        # statistics pass checks that every partition found the same (BlockifyFunction).
        self.blocks = entry.blockify(
            df._jdf, features_col, label_col, weight_col or "", label_domain,
            int(block_size), bool(checkpoint_dir),
        )
        track_classes = label_domain in (BINARY, CLASS_INDEX)
        try:
            with raising_data_errors(features_col):
                flat = call_for_doubles(self.blocks.statistics, track_classes,
                                         int(aggregation_depth))
        except BaseException:
            self.release()
            raise
        self.num_features = int(self.blocks.numFeatures())
        self.statistics: DataStatistics = trainable(_statistics(flat, self.num_features),
                                                    weight_col, self.release)
        stats = self.statistics
        logger.info(
            "cached %d rows x %d features in %d partitions in the JVM (weight sum %g)",
            stats.count, self.num_features, self.blocks.numPartitions(), stats.weight_sum,
        )

    def compact(self, active: np.ndarray) -> None:
        """Keep only the ``active`` features (see :mod:`gradspark.data.compaction`)."""
        self.blocks = call_with_file(np.asarray(active, dtype=np.int32), self.blocks.compact)
        self.statistics = self.statistics.select(active)
        self.num_features = len(active)

    def localize(self) -> np.ndarray:
        """Renumber every partition's blocks to the features it holds, for the JVM
        engine's steps (``LocalPartition`` in ``LocalFeatures.scala``); the blocks as
        they were are unpersisted (kept as lineage). Returns the features each
        partition holds."""
        held = np.array(list(self.blocks.localize()), dtype=np.int64)
        logger.info("partition-local features: each of %d partitions holds %.0f of %d "
                    "features on average (at most %d)", held.size, held.mean(),
                    self.num_features, held.max(initial=0))
        return held

    def block_frame(self):
        """The cached blocks as a DataFrame of ``(partition, block)``: ``partition`` is the
        blocks' partition index, ``block`` the encoding :func:`decode_block` reads.
        Resident and async workers read it as Arrow batches, once per fit."""
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        frame = DataFrame(self.blocks.binaryFrame(), self.spark)
        return frame.select(F.spark_partition_id().alias("partition"), "block")

    def python_blocks(self):
        """The cached blocks as a pyspark RDD of :class:`Block`, for numpy job-per-step
        passes: decoded once, cached, and unpersisted by :meth:`release`."""
        if self._python_blocks is None:
            from pyspark.sql import DataFrame

            frame = DataFrame(self.blocks.binaryFrame(), self.spark)
            self._python_blocks = frame.rdd.map(lambda row: decode_block(row[0]))
            self._python_blocks.persist(StorageLevel.MEMORY_AND_DISK)
            self._python_blocks.setName("gradspark python copy of the JVM blocks")
        return self._python_blocks

    def block_source(self):
        """Where long-running workers read the blocks: the JVM's encodings as raw bytes,
        or Arrow batches of :meth:`block_frame` for a barrier stage."""
        return TaggedByteBlocks(self.blocks.taggedBinaryRdd, decode_block,
                                self.spark.sparkContext, self.num_partitions,
                                lambda: FrameBlocks(self.block_frame(), decode_block))

    @property
    def num_partitions(self) -> int:
        return int(self.blocks.numPartitions())

    def stored_bytes(self) -> float:
        """Memory + disk size of the cached blocks, as Spark's storage info reports it."""
        return cached_bytes(self.spark.sparkContext, int(self.blocks.cachedRddId()))

    def release(self) -> None:
        if self._python_blocks is not None:
            self._python_blocks.unpersist(blocking=False)
        self.blocks.release()

