"""Training blocks as a cached DataFrame: the data path of a Spark Connect session.

:class:`~gradspark.data.dataset.NumpyTrainingData` caches an RDD of blocks; a
Connect client has no RDDs, so here one ``mapInArrow`` pass over the input
validates and blockifies each partition into the blocks the RDD path
builds, with the same messages, straight from the Arrow buffers
(:func:`arrow_blocks`), encodes the blocks (:mod:`gradspark.data.codec`) and adds one row per
partition with that partition's column statistics. The result is persisted
(``MEMORY_AND_DISK``); the statistics are read from it, which fills the
cache, so building it still runs one job over the input.

Every consumer reads the blocks as Arrow batches of the frame: the
job-per-step engine (:mod:`gradspark.engine.frame_jobs`) and the long-running
stages (:class:`~gradspark.stages.sources.FrameBlocks`). It works on a classic
session too (the tests compare the two there).
"""

from __future__ import annotations

import logging
import pickle
from typing import Iterator, List, Optional

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from pyspark import StorageLevel
from pyspark.ml.linalg import DenseVector, SparseVector
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gradspark.connect import context_of
from gradspark.data.blocks import (BINARY, CLASS_INDEX, SPARSE_DENSITY, Block, make_block,
                                   checked_block, compact_block, vector_error)
from gradspark.data.codec import decode_block, encode_block
from gradspark.data.dataset import trainable
from gradspark.data.statistics import DataStatistics, block_statistics, merge_statistics
from gradspark.data.validation import (InvalidDataError, check_schema, feature_vector_size,
                                       raising_data_errors,
                                       row_position)
from gradspark.data.training import TrainingData

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


def arrow_blocks(batches: Iterator[pa.RecordBatch], partition: int, num_features: int,
                 block_size: int, label_domain: str, feature_col: str, label_col: str,
                 weight_col: Optional[str]) -> Iterator[Block]:
    """:func:`~gradspark.data.blocks.blockify_partition` over Arrow batches of
    ``(features, label[, weight])``: the same blocks and the same checks, built
    from the Arrow buffers without a Python object per row."""
    names = (label_domain, feature_col, label_col, weight_col)
    pending: List[pa.RecordBatch] = []
    rows = start = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        while rows >= block_size:
            table = pa.Table.from_batches(pending)
            yield arrow_block(table.slice(0, block_size), partition, start, num_features, *names)
            rest = table.slice(block_size)
            pending, rows = rest.to_batches(), rest.num_rows
            start += block_size
    if rows:
        yield arrow_block(pa.Table.from_batches(pending), partition, start, num_features, *names)


def arrow_block(table: pa.Table, partition: int, start: int, num_features: int,
                label_domain: str, feature_col: str, label_col: str,
                weight_col: Optional[str]) -> Block:
    """One block from ``table``'s rows (see :func:`arrow_blocks`)."""
    features = table.column(0).combine_chunks()
    n = len(features)
    kinds = features.field("type").fill_null(1).to_numpy(zero_copy_only=False)
    values = features.field("values")
    value_offsets = values.offsets.to_numpy()
    sizes = np.where(kinds == 1, np.diff(value_offsets),
                     features.field("size").fill_null(-1).to_numpy(zero_copy_only=False))
    valid = features.is_valid().to_numpy(zero_copy_only=False)
    bad = ~valid | (sizes != num_features)
    if bad.any():
        k = int(np.argmax(bad))
        raise vector_error(feature_col, int(sizes[k]) if valid[k] else None, num_features,
                           row_position(partition, start + k))
    columns = [(label_col, table.column(1))] + ([(weight_col, table.column(2))]
                                                if weight_col else [])
    for name, column in columns:
        if column.null_count:
            k = int(np.argmax(~column.is_valid().to_numpy(zero_copy_only=False)))
            raise InvalidDataError(f"column {name!r} is null at "
                                   f"{row_position(partition, start + k)}")
    y = table.column(1).to_numpy().astype(np.float64)
    w = table.column(2).to_numpy().astype(np.float64) if weight_col else np.ones(n)
    flat_values = values.values.to_numpy(zero_copy_only=False)[value_offsets[0]:value_offsets[-1]]
    if (kinds == 1).all():
        matrix = flat_values.astype(np.float64).reshape(n, num_features)
    else:
        matrix = _sparse_matrix(features, flat_values, value_offsets, kinds, num_features)
        if matrix is None:  # dense and sparse rows mixed, or indices Spark would refuse
            return make_block(list(zip(arrow_vectors(features), y, w)), partition, start,
                               num_features, label_domain, feature_col, label_col, weight_col)
    return checked_block(matrix, y, w, partition, start, label_domain, feature_col, label_col,
                         weight_col, lambda k: arrow_vectors(features.slice(k, 1))[0])


def _sparse_matrix(features: pa.StructArray, flat_values: np.ndarray,
                   value_offsets: np.ndarray, kinds: np.ndarray, num_features: int):
    """CSR of all-sparse rows, as ``_stack`` builds it; None when a row is dense, or its
    indices are not strictly increasing in ``[0, size)`` (the per-row path raises then)."""
    if (kinds == 1).any():
        return None
    indices = features.field("indices")
    offsets = indices.offsets.to_numpy()
    if not np.array_equal(offsets - offsets[0], value_offsets - value_offsets[0]):
        return None
    flat = indices.values.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
    indptr = (offsets - offsets[0]).astype(np.int64)
    steps = np.diff(flat)
    starts = indptr[1:-1]
    steps[starts[(starts > 0) & (starts < len(flat))] - 1] = 1  # across rows: no order
    if len(flat) and (flat.min() < 0 or flat.max() >= num_features or (steps <= 0).any()):
        return None
    n = len(offsets) - 1
    csr = sp.csr_matrix((flat_values.astype(np.float64), flat, indptr), shape=(n, num_features))
    if csr.nnz >= SPARSE_DENSITY * n * num_features:
        return csr.toarray()
    return csr


class FrameTrainingData(TrainingData):
    """Validated blocks cached as a DataFrame of ``(partition, block, stats)`` rows.

    The same interface as :class:`~gradspark.data.dataset.NumpyTrainingData` for the
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
        self.num_features = feature_vector_size(df, features_col)
        num_features = self.num_features
        track_classes = label_domain in (BINARY, CLASS_INDEX)
        columns = [F.col(features_col), F.col(label_col).cast("double")]
        if weight_col:
            columns.append(F.col(weight_col).cast("double"))

        def blockify(batches):
            from pyspark import TaskContext

            partition = TaskContext.get().partitionId()
            stats, stored = None, 0
            for block in arrow_blocks(batches, partition, num_features, block_size,
                                      label_domain, features_col, label_col, weight_col):
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
        from gradspark.stages.sources import FrameBlocks

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

