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
import scipy.sparse as sp
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gradspark.data.blocks import REAL
from gradspark.data.frames import arrow_blocks
from gradspark.data.validation import (InvalidDataError, check_schema, feature_vector_size,
                                       raising_data_errors)

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
              weight_col: Optional[str], block_size: int = 4096) -> GramSums:
    """:class:`GramSums` of ``dataset``. Rows are read into the same checked blocks as
    the training data pass (:func:`~gradspark.data.frames.arrow_blocks`), so a bad value
    gets the same :class:`InvalidDataError`, naming its column, partition and row."""
    check_schema(dataset, features_col, label_col, weight_col)
    num_features = feature_vector_size(dataset, features_col)
    columns = [F.col(features_col), F.col(label_col).cast("double")]
    if weight_col:
        columns.append(F.col(weight_col).cast("double"))

    def partial(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        rows, sums = 0, None
        for block in arrow_blocks(batches, partition, num_features, block_size, REAL,
                                  features_col, label_col, weight_col):
            x, y, w = block.features, block.labels, block.weights
            wx = x.multiply(w[:, None]).tocsr() if sp.issparse(x) else x * w[:, None]
            aa = wx.T @ x
            part = (w.sum(), np.asarray(wx.sum(axis=0)).ravel(),
                    aa.toarray() if sp.issparse(aa) else aa,
                    np.asarray(x.T @ (w * y)).ravel(), w @ y, w @ (y * y))
            sums = part if sums is None else tuple(s + p for s, p in zip(sums, part))
            rows += len(y)
        if sums is None:
            return
        w_sum, a, aa, ab, b, bb = sums
        yield pa.RecordBatch.from_pylist([dict(
            rows=rows, width=num_features, w=float(w_sum), a=a.tolist(),
            aa=aa.ravel().tolist(), ab=ab.tolist(), b=float(b), bb=float(bb))], schema=_SUMS)

    with raising_data_errors(features_col):
        partials = dataset.select(*columns).mapInArrow(partial, _SUMS_DDL).collect()
    d = num_features
    total = GramSums(0, 0.0, np.zeros(d), np.zeros((d, d)), np.zeros(d), 0.0, 0.0)
    for p in partials:
        total = GramSums(total.rows + p["rows"], total.weight_sum + p["w"],
                         total.a + np.asarray(p["a"]),
                         total.aa + np.asarray(p["aa"]).reshape(d, d),
                         total.ab + np.asarray(p["ab"]), total.b + p["b"], total.bb + p["bb"])
    if total.rows == 0:
        raise InvalidDataError("the training DataFrame is empty")
    for what, values in ((f"weight column {weight_col!r}", [total.weight_sum]),
                         (f"label column {label_col!r}", [total.b, total.bb]),
                         (f"features column {features_col!r}", [total.a, total.aa])):
        if not all(np.isfinite(v).all() for v in values):
            raise InvalidDataError(f"{what} has values too large for double-precision "
                                   "sums (they overflow); rescale it (e.g. divide by a "
                                   "power of 10) and train again")
    if total.weight_sum <= 0:
        raise InvalidDataError(f"the weights in column {weight_col!r} sum to zero; nothing "
                               "to train on")
    return total


