"""Training blocks as a cached DataFrame: the data path of a Spark Connect session.

:class:`~gradspark.data.dataset.TrainingData` caches an RDD of blocks; a
Connect client has no RDDs, so here one ``mapInArrow`` pass over the input
validates and blockifies each partition exactly as the RDD path does
(:func:`~gradspark.data.blocks.blockify_partition`, the same messages),
encodes the blocks (:mod:`gradspark.data.codec`) and adds one row per
partition with that partition's column statistics. The result is persisted
(``MEMORY_AND_DISK``); the statistics are read from it, which fills the
cache, so building it still runs one job over the input.

Every consumer reads the blocks as Arrow batches of the frame: the
job-per-step engine (:mod:`gradspark.engine.frames`) and the long-running
stages (:class:`~gradspark.ps.tasks.FrameBlocks`). It works on a classic
session too (the tests compare the two there).
"""

from __future__ import annotations

import logging
import pickle
from typing import Iterator, List, Optional

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.ml.linalg import DenseVector, SparseVector
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gradspark.connect import context_of
from gradspark.data.blocks import BINARY, CLASS_INDEX, blockify_partition, compact_block
from gradspark.data.codec import decode_block, encode_block
from gradspark.data.dataset import _num_features, trainable
from gradspark.data.statistics import DataStatistics, block_statistics, merge_statistics
from gradspark.data.validation import check_schema, raising_data_errors

logger = logging.getLogger(__name__)

SCHEMA = "partition int, block binary, stats binary"
_ARROW_SCHEMA = pa.schema([("partition", pa.int32()), ("block", pa.binary()),
                          ("stats", pa.binary())])


def arrow_vectors(column: pa.StructArray) -> List[Optional[object]]:
    """pyspark Vectors (None for nulls) from the Arrow form of a ``VectorUDT`` column:
    ``struct<type int8, size int32, indices list<int32>, values list<double>>``,
    type 0 sparse, 1 dense."""
    kinds = column.field("type").to_numpy(zero_copy_only=False)
    sizes = column.field("size").fill_null(0).to_numpy(zero_copy_only=False)
    indices, values = column.field("indices"), column.field("values")
    index_offsets = indices.offsets.to_numpy()
    value_offsets = values.offsets.to_numpy()
    flat_indices = indices.values.to_numpy(zero_copy_only=False)
    flat_values = values.values.to_numpy(zero_copy_only=False)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    vectors: List[Optional[object]] = []
    for k in range(len(column)):
        if not valid[k]:
            vectors.append(None)
            continue
        v = flat_values[value_offsets[k]:value_offsets[k + 1]]
        if kinds[k] == 1:
            vectors.append(DenseVector(v))
        else:
            vectors.append(SparseVector(int(sizes[k]),
                                        flat_indices[index_offsets[k]:index_offsets[k + 1]], v))
    return vectors


def arrow_rows(batches: Iterator[pa.RecordBatch], weighted: bool) -> Iterator[tuple]:
    """``(features, label, weight)`` rows, as the RDD path's ``Row`` s, from Arrow batches."""
    for batch in batches:
        vectors = arrow_vectors(batch.column(0))
        labels = batch.column(1).to_pylist()
        weights = batch.column(2).to_pylist() if weighted else [None] * len(labels)
        yield from zip(vectors, labels, weights)


class FrameTrainingData:
    """Validated blocks cached as a DataFrame of ``(partition, block, stats)`` rows.

    The same interface as :class:`~gradspark.data.dataset.TrainingData` for the
    estimators; the engines reach the blocks through :meth:`block_source`.
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
        if checkpoint_dir:
            raise ValueError("checkpointData=True needs RDD checkpoints, which a Spark Connect "
                             "session does not have; checkpoint the input DataFrame instead "
                             "(DataFrame.checkpoint / localCheckpoint)")
        self.spark = df.sparkSession
        self.context = context_of(self.spark)
        self.num_features = _num_features(df, features_col)
        num_features = self.num_features
        track_classes = label_domain in (BINARY, CLASS_INDEX)
        columns = [F.col(features_col), F.col(label_col).cast("double")]
        if weight_col:
            columns.append(F.col(weight_col).cast("double"))

        def blockify(batches):
            from pyspark import TaskContext

            partition = TaskContext.get().partitionId()
            stats, stored = None, 0
            for block in blockify_partition(
                    partition, arrow_rows(batches, weight_col is not None), num_features,
                    block_size, label_domain, features_col, label_col, weight_col):
                stats = merge_statistics(stats, block_statistics(block, track_classes))
                data = encode_block(block)
                stored += len(data)
                yield pa.RecordBatch.from_pylist(
                    [{"partition": partition, "block": data, "stats": None}], _ARROW_SCHEMA)
            yield pa.RecordBatch.from_pylist(
                [{"partition": partition, "block": None, "stats": pickle.dumps((stats, stored))}],
                _ARROW_SCHEMA)

        self._frame: Optional[DataFrame] = None
        self._cache(df.select(*columns).mapInArrow(blockify, SCHEMA))
        try:
            with raising_data_errors(features_col):
                rows = self._frame.where(F.col("block").isNull()).select(
                    "partition", "stats").collect()
        except BaseException:
            self.release()
            raise
        stats: Optional[DataStatistics] = None
        self._stored_bytes = 0
        for row in sorted(rows, key=lambda row: row[0]):
            partition_stats, stored = pickle.loads(row[1])
            stats = merge_statistics(stats, partition_stats)
            self._stored_bytes += stored
        self._partitions = len(rows)
        self.statistics: DataStatistics = trainable(stats, weight_col, self.release)
        logger.info("cached %d rows x %d features in %d partitions as a block frame "
                    "(weight sum %g)", stats.count, self.num_features, self._partitions,
                    stats.weight_sum)

    def _cache(self, frame: DataFrame) -> None:
        self._frame = frame.persist(StorageLevel.MEMORY_AND_DISK)

    def blocks_frame(self) -> DataFrame:
        """``(partition, block)`` rows, one per block."""
        return self._frame.where(F.col("block").isNotNull()).select("partition", "block")

    def compact(self, active: np.ndarray) -> None:
        """Keep only the ``active`` features, renumbered: a new cached frame, computed now."""
        keep = np.asarray(active, dtype=np.int64)

        def compacted(batches):
            for batch in batches:
                blocks = [None if data is None else
                          encode_block(compact_block(decode_block(data), keep))
                          for data in batch.column(1).to_pylist()]
                yield pa.RecordBatch.from_arrays(
                    [batch.column(0), pa.array(blocks, pa.binary()), batch.column(2)],
                    schema=_ARROW_SCHEMA)

        previous = self._frame
        self._cache(previous.mapInArrow(compacted, SCHEMA))
        # Reading every block fills the cache now, and measures it.
        self._stored_bytes = self._frame.select(F.sum(F.length("block"))).first()[0] or 0
        previous.unpersist()
        self.statistics = self.statistics.select(active)
        self.num_features = len(active)

    def block_source(self):
        from gradspark.ps.tasks import FrameBlocks

        return FrameBlocks(self.blocks_frame(), decode_block, self.context, self._partitions)

    @property
    def num_partitions(self) -> int:
        return self._partitions

    def stored_bytes(self) -> float:
        """Bytes of encoded blocks (what a resident worker would hold, all workers together)."""
        return float(self._stored_bytes)

    def release(self) -> None:
        if self._frame is not None:
            self._frame.unpersist()
            self._frame = None

    def __enter__(self) -> "FrameTrainingData":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
