"""DataFrame columns to dense numpy matrices through Arrow, validated on the way.

Torch training and inference read features as Arrow record batches (from
``mapInArrow`` / pandas UDFs), never row by row: the JVM turns a
``VectorUDT`` column into ``array<float>`` (``vector_to_array``), and each
batch becomes a matrix with one ``flatten``. The same pass checks what would
otherwise train a silently wrong model: nulls, vectors of different sizes,
NaN/inf.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, NumericType

from gradspark.data.validation import InvalidDataError

FEATURES = "__gradspark_features"
LABEL = "__gradspark_label"
HELD_OUT = "__gradspark_held_out"
ROW_ORIGIN = "__gradspark_row_origin"


def features_as_array(dataset: DataFrame, features_col: str) -> Column:
    """``array<float>`` column from a vector or numeric array column."""
    if features_col not in dataset.columns:
        raise ValueError(f"features column {features_col!r} not found; the DataFrame has "
                         f"columns {sorted(dataset.columns)}")
    kind = dataset.schema[features_col].dataType
    if isinstance(kind, VectorUDT):
        return vector_to_array(F.col(features_col), dtype="float32")
    if isinstance(kind, ArrayType) and isinstance(kind.elementType, NumericType):
        return F.col(features_col).cast("array<float>")
    raise InvalidDataError(f"features column {features_col!r} has type {kind.simpleString()}; "
                           f"expected a vector or an array of numbers")


def training_columns(dataset: DataFrame, features_col: str, label_col: str,
                     validation_col: str = "") -> DataFrame:
    """Features as a float array, the label as a double and, with ``validation_col``,
    whether each row is held out (a null counts as a training row)."""
    if label_col not in dataset.columns:
        raise ValueError(f"label column {label_col!r} not found; the DataFrame has columns "
                         f"{sorted(dataset.columns)}")
    if not isinstance(dataset.schema[label_col].dataType, NumericType):
        raise InvalidDataError(f"label column {label_col!r} has type "
                               f"{dataset.schema[label_col].dataType.simpleString()}; "
                               f"expected a number")
    columns = [features_as_array(dataset, features_col).alias(FEATURES),
               F.col(label_col).cast("double").alias(LABEL)]
    if validation_col:
        kinds = dict(dataset.dtypes)
        if kinds.get(validation_col) != "boolean":
            raise ValueError(f"validationIndicatorCol {validation_col!r} must be a boolean "
                             f"column; found {kinds.get(validation_col, 'no such column')}")
        columns.append(F.coalesce(F.col(validation_col), F.lit(False)).alias(HELD_OUT))
    return dataset.select(*columns)


def spread_over_ranks(columns: DataFrame, ranks: int) -> DataFrame:
    """``columns`` in ``ranks`` partitions, each one's rows in one order on every run.

    A shuffle's reader takes the map outputs in the order they arrive, which on
    separate executors differs between runs and between the attempts of a retried
    stage: a rank would then batch other rows than the uninterrupted run did, and a
    rank resumed mid-epoch would skip some rows and repeat others. Each row carries
    where it came from (its input partition and place there) through the shuffle,
    and each rank reads its rows sorted by that. (The order is as deterministic as
    the input's: a cached DataFrame or files are; an unsorted shuffle upstream is not.)
    """
    return (columns.withColumn(ROW_ORIGIN, F.monotonically_increasing_id())
            .repartition(ranks).sortWithinPartitions(ROW_ORIGIN))


def features_matrix(column: pa.Array, name: str, num_features: Optional[int] = None) -> np.ndarray:
    """(rows, features) float32 matrix from one Arrow list column; checks nulls and sizes."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        raise InvalidDataError(f"features column {name!r} has {column.null_count} null rows")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if len(lengths) == 0:
        return np.zeros((0, num_features or 0), dtype=np.float32)
    width = int(lengths[0]) if num_features is None else num_features
    if (lengths != width).any():
        bad = int(np.flatnonzero(lengths != width)[0])
        raise InvalidDataError(f"features column {name!r}: vector of size {int(lengths[bad])} "
                               f"where {width} was expected (row {bad} of a batch)")
    values = column.flatten()
    if values.null_count:
        raise InvalidDataError(f"features column {name!r} has null entries inside vectors")
    # A copy: Arrow buffers are read-only, torch wants writable memory.
    return values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, width)


def require_finite(values: np.ndarray, name: str) -> None:
    finite = np.isfinite(values)
    if not finite.all():
        rows = ~finite.reshape(len(values), -1).all(axis=1)
        raise InvalidDataError(f"column {name!r} has NaN or infinite values in "
                               f"{int(rows.sum())} rows (first at row {int(np.argmax(rows))} of "
                               f"this partition)")


def partition_arrays(batches: Iterable[pa.RecordBatch], features_col: str,
                     label_col: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One partition of :func:`training_columns` as (features float32, labels float64,
    held-out mask)."""
    features: List[np.ndarray] = []
    labels: List[np.ndarray] = []
    held: List[np.ndarray] = []
    width: Optional[int] = None
    for batch in batches:
        matrix = features_matrix(batch.column(FEATURES), features_col, width)
        width = matrix.shape[1] if batch.num_rows else width
        label = batch.column(LABEL)
        if label.null_count:
            raise InvalidDataError(f"label column {label_col!r} has {label.null_count} null rows")
        features.append(matrix)
        labels.append(label.to_numpy(zero_copy_only=False).astype(np.float64))
        if HELD_OUT in batch.schema.names:
            held.append(batch.column(HELD_OUT).to_numpy(zero_copy_only=False).astype(bool))
        else:
            held.append(np.zeros(batch.num_rows, dtype=bool))
    X = np.concatenate(features) if features else np.zeros((0, 0), dtype=np.float32)
    y = np.concatenate(labels) if labels else np.zeros(0)
    require_finite(X, features_col)
    require_finite(y, label_col)
    return X, y, (np.concatenate(held) if held else np.zeros(0, dtype=bool))
