"""Prediction columns for a linear model, computed a batch at a time in ``mapInArrow``.

A row-at-a-time Python UDF pays for pickling every row and building a
``DenseVector`` per output: on 1,000,000 rows it ran 30-100x slower than MLlib's
JVM transform. Here each Arrow batch of the input is read as one (sparse or dense)
matrix straight from the ``VectorUDT`` struct's buffers, the margins are one
matrix product, every output is one numpy expression over the margins, and the
outputs go back as Arrow columns (vectors as ``VectorUDT``'s struct). It runs on
classic, Spark Connect and streaming DataFrames alike.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, StructField, StructType

#: ``{role: (Spark type, fn(margins n x k) -> n values or n x m vectors)}``
OutputFns = Dict[str, Tuple[DataType, Callable[[np.ndarray], np.ndarray]]]

_VECTOR = pa.struct([("type", pa.int8()), ("size", pa.int32()),
                     ("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float64()))])


def batch_matrix(column: pa.Array, num_features: int, name: str):
    """(matrix n x num_features, valid rows) from a ``VectorUDT`` column's Arrow struct:
    dense when every row is dense, else CSR. A null row is an empty row, marked
    invalid; a vector of another size raises ValueError naming the column."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    kinds = column.field("type").fill_null(1).to_numpy(zero_copy_only=False)
    values = column.field("values")
    offsets = values.offsets.to_numpy().astype(np.int64)
    lengths = np.diff(offsets)
    sizes = np.where(kinds == 1, lengths,
                     column.field("size").fill_null(0).to_numpy(zero_copy_only=False))
    bad = valid & (sizes != num_features)
    if bad.any():
        raise ValueError(f"features column {name!r} holds a vector of size "
                         f"{int(sizes[np.argmax(bad)])}; the model was fitted on "
                         f"{num_features} features")
    flat = values.values.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
    flat = flat.astype(np.float64)
    if valid.all() and (kinds == 1).all():
        return flat.reshape(n, num_features), valid
    # Column index of every stored value: its position for dense rows, the stored index
    # for sparse ones (the indices buffer holds exactly the sparse rows' lists, in order).
    position = np.arange(len(flat)) - np.repeat(offsets[:-1] - offsets[0], lengths)
    sparse_value = np.repeat((kinds == 0) & valid, lengths)
    indices = column.field("indices")
    index_offsets = indices.offsets.to_numpy()
    stored = indices.values.to_numpy(zero_copy_only=False)[index_offsets[0]:index_offsets[-1]]
    position[sparse_value] = stored
    if len(position) and (position.min() < 0 or position.max() >= num_features):
        raise ValueError(f"features column {name!r} holds a sparse index outside "
                         f"[0, {num_features})")
    return sp.csr_matrix((flat, position, offsets - offsets[0]),
                         shape=(n, num_features)), valid


def _arrow_output(values: np.ndarray, dtype: DataType, valid: np.ndarray) -> pa.Array:
    mask = ~valid
    if not isinstance(dtype, VectorUDT):
        return pa.array(np.asarray(values, dtype=np.float64), mask=mask)
    matrix = np.asarray(values, dtype=np.float64)
    n, width = matrix.shape
    vectors = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * width),
                                       pa.array(matrix.ravel()))
    return pa.StructArray.from_arrays(
        [pa.array(np.ones(n, dtype=np.int8)), pa.nulls(n, pa.int32()),
         pa.nulls(n, pa.list_(pa.int32())), vectors],
        fields=list(_VECTOR), mask=pa.array(mask))


def append_outputs(dataset: DataFrame, features_col: str, coefficients: np.ndarray,
                   intercepts: np.ndarray, outputs: List[Tuple[str, DataType, Callable]]
                   ) -> DataFrame:
    """``dataset`` with one column per ``(name, Spark type, fn(margins))`` of ``outputs``
    (entries with an empty name skipped, as MLlib does; an existing column of that name
    replaced). ``margins = features @ coefficients + intercepts``, a batch at a time."""
    outputs = [o for o in outputs if o[0]]
    if not outputs:
        return dataset
    names = [name for name, _, _ in outputs]
    dataset = dataset.drop(*[c for c in dataset.columns if c in names])
    schema = StructType(dataset.schema.fields
                        + [StructField(name, dtype, True) for name, dtype, _ in outputs])
    position = dataset.columns.index(features_col)
    num_features = coefficients.shape[0]
    fns = [(dtype, fn) for _, dtype, fn in outputs]
    arrow_fields = [pa.field(name, _VECTOR if isinstance(dtype, VectorUDT) else pa.float64())
                    for name, dtype, _ in outputs]

    def score(batches):
        for batch in batches:
            matrix, valid = batch_matrix(batch.column(position), num_features, features_col)
            margins = np.asarray(matrix @ coefficients) + intercepts
            columns = [_arrow_output(fn(margins), dtype, valid) for dtype, fn in fns]
            yield pa.RecordBatch.from_arrays(
                list(batch.columns) + columns,
                schema=pa.schema(list(batch.schema) + arrow_fields))

    return dataset.mapInArrow(score, schema)
