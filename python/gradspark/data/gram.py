"""The weighted Gram matrix of features and label in one pass: what the normal equations
need (MLlib's ``WeightedLeastSquares.Aggregator``), as sums of each partition's rows.

One ``mapInArrow`` job over the input rows, so it runs on classic and Spark Connect
sessions alike; each partition returns one row of sums (O(d^2) values) and the driver
adds them. Values are checked on the way, as the blockifying data pass checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
from pyspark.ml.functions import vector_to_array
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gradspark.data.columnar import features_matrix, require_finite
from gradspark.data.validation import InvalidDataError, check_schema, raising_data_errors

_SUMS = pa.schema([("rows", pa.int64()), ("width", pa.int64()), ("w", pa.float64()),
                   ("a", pa.list_(pa.float64())), ("aa", pa.list_(pa.float64())),
                   ("ab", pa.list_(pa.float64())), ("b", pa.float64()),
                   ("bb", pa.float64())])
_SUMS_DDL = ("rows long, width long, w double, a array<double>, aa array<double>, "
             "ab array<double>, b double, bb double")


@dataclass(frozen=True)
class GramSums:
    """Weighted sums over the rows: ``w``, ``a = sum w x``, ``aa = sum w x x^T``,
    ``ab = sum w y x``, ``b = sum w y``, ``bb = sum w y^2``."""

    rows: int
    weight_sum: float
    a: np.ndarray
    aa: np.ndarray
    ab: np.ndarray
    b: float
    bb: float

    @property
    def num_features(self) -> int:
        return len(self.a)

    def population_std(self) -> np.ndarray:
        """The features' weighted population std, as WeightedLeastSquares takes it."""
        mean = self.a / self.weight_sum
        return np.sqrt(np.maximum(np.diag(self.aa) / self.weight_sum - mean * mean, 0.0))

    def label_population_std(self) -> float:
        mean = self.b / self.weight_sum
        return float(np.sqrt(max(self.bb / self.weight_sum - mean * mean, 0.0)))


def vector_width(dataset: DataFrame, features_col: str) -> int:
    """The size of the vectors in ``features_col``: from its ML attributes when a
    VectorAssembler wrote them, else from the first row (a one-row job)."""
    if features_col not in dataset.columns:
        raise InvalidDataError(f"features column {features_col!r} not found; the DataFrame "
                               f"has columns {sorted(dataset.columns)}")
    attributes = dataset.schema[features_col].metadata.get("ml_attr", {})
    if "num_attrs" in attributes:
        return int(attributes["num_attrs"])
    first = dataset.select(features_col).first()
    if first is None or first[0] is None:
        return 0
    return int(first[0].size)


def gram_sums(dataset: DataFrame, features_col: str, label_col: str,
              weight_col: Optional[str]) -> GramSums:
    """:class:`GramSums` of ``dataset``, or :class:`InvalidDataError` naming the column
    and row of the first bad value (null, NaN/inf, negative weight, vector size)."""
    check_schema(dataset, features_col, label_col, weight_col)
    weight = F.col(weight_col).cast("double") if weight_col else F.lit(1.0)
    frame = dataset.select(vector_to_array(F.col(features_col), "float64").alias("x"),
                           F.col(label_col).cast("double").alias("y"), weight.alias("w"))

    def partial(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows, width = 0, None
        sums = None
        for batch in batches:
            if not batch.num_rows:
                continue
            x = features_matrix(batch.column(0), features_col, width, np.float64)
            width = x.shape[1]
            y = _values(batch.column(1), label_col, "label")
            w = _values(batch.column(2), weight_col or "", "weight")
            require_finite(x, features_col)
            if (w < 0).any():
                raise InvalidDataError(f"weight column {weight_col!r} has negative values "
                                       f"(first: {float(w[w < 0][0])})")
            wx = x * w[:, None]
            part = (w.sum(), wx.sum(axis=0), wx.T @ x, (w * y) @ x, w @ y, w @ (y * y))
            sums = part if sums is None else tuple(s + p for s, p in zip(sums, part))
            rows += batch.num_rows
        if sums is None:
            return
        w_sum, a, aa, ab, b, bb = sums
        yield pa.RecordBatch.from_pylist([dict(
            rows=rows, width=width, w=float(w_sum), a=a.tolist(), aa=aa.ravel().tolist(),
            ab=ab.tolist(), b=float(b), bb=float(bb))], schema=_SUMS)

    with raising_data_errors(features_col):
        partials = frame.mapInArrow(partial, _SUMS_DDL).collect()
    if not partials:
        raise InvalidDataError("the training DataFrame has no rows")
    widths = {p["width"] for p in partials}
    if len(widths) > 1:
        raise InvalidDataError(f"features column {features_col!r} holds vectors of "
                               f"different sizes: {sorted(widths)}")
    d = widths.pop()
    total = GramSums(0, 0.0, np.zeros(d), np.zeros((d, d)), np.zeros(d), 0.0, 0.0)
    for p in partials:
        total = GramSums(total.rows + p["rows"], total.weight_sum + p["w"],
                         total.a + np.asarray(p["a"]),
                         total.aa + np.asarray(p["aa"]).reshape(d, d),
                         total.ab + np.asarray(p["ab"]), total.b + p["b"], total.bb + p["bb"])
    if total.weight_sum <= 0:
        raise InvalidDataError(f"the weights in column {weight_col!r} sum to zero")
    return total


def _values(column: pa.Array, name: str, role: str) -> np.ndarray:
    if column.null_count:
        raise InvalidDataError(f"{role} column {name!r} has {column.null_count} null rows")
    values = column.to_numpy(zero_copy_only=False).astype(np.float64)
    require_finite(values, name)
    return values
