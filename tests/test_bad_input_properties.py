"""Property-based bad input (hypothesis): generated DataFrames with one defect each.

For every generated case, ``fit`` either raises :class:`InvalidDataError` naming the
column (and, for a bad value, the partition and row) and leaves nothing cached, or,
for data that is odd but valid (constant columns, empty partitions, one row), returns
a model that is correct against an independent reference: the weighted least-squares
optimum from numpy. Never a hang, never NaN coefficients returned as success.
Both data paths run: Python blockify (``engine="python"``) and the JVM's (``"jvm"``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Callable, List

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.ml.linalg import SparseVector, VectorUDT, Vectors
from pyspark.sql.types import DoubleType, StructField, StructType

from conftest import gradspark_cached_rdds
from gradspark import InvalidDataError, SGDLinearRegression, SGDLinearSVC, SGDLogisticRegression

SCHEMA = StructType([StructField("features", VectorUDT(), True),
                     StructField("label", DoubleType(), True),
                     StructField("weight", DoubleType(), True)])

#: Every example is a real Spark fit (~1 s), so the budget is counted, not timed:
#: examples per defect, and examples of valid data.
PER_DEFECT = 3
VALID_EXAMPLES = 24
FIT_SECONDS = 120.0


def spark_examples(count: int):
    """Hypothesis settings for properties whose every example is a Spark fit."""
    return settings(max_examples=count, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass
class Table:
    """Rows to corrupt, and how to build the estimator for them."""

    X: np.ndarray
    y: np.ndarray
    w: np.ndarray
    sparse: bool

    def rows(self) -> List[list]:
        return [[_vector(x, self.sparse), float(t), float(v)]
                for x, t, v in zip(self.X, self.y, self.w)]


def _vector(x: np.ndarray, sparse: bool):
    if not sparse:
        return Vectors.dense(x)
    idx = np.flatnonzero(x)
    return Vectors.sparse(len(x), idx.tolist(), x[idx].tolist())


def _out_of_range(vector, size: int) -> SparseVector:
    """A sparse vector with index ``size``: the Python constructor refuses it, but
    data from the JVM (files, SQL, other writers) is not built by that constructor."""
    bad = Vectors.sparse(size, [0], [1.0])
    bad.indices = np.array([size], dtype=np.int32)
    return bad


@dataclass(frozen=True)
class Defect:
    name: str
    applies: Callable[[str], bool]  # to which estimator kind
    corrupt: Callable[[list, int, Table], None]  # rows, position, table
    match: str  # regex the error must match
    located: bool = True  # the message names partition and row


def _set(column: int, value) -> Callable[[list, int, Table], None]:
    def corrupt(rows, k, table):
        rows[k][column] = value
    return corrupt


def _feature(value: float) -> Callable[[list, int, Table], None]:
    def corrupt(rows, k, table):
        x = table.X[k].copy()
        x[-1] = value
        rows[k][0] = _vector(x, table.sparse) if not table.sparse else \
            Vectors.sparse(len(x), list(range(len(x))), x.tolist())
    return corrupt


def _every(column: int, value) -> Callable[[list, int, Table], None]:
    def corrupt(rows, k, table):
        for row in rows:
            row[column] = value
    return corrupt


ANY = lambda kind: True  # noqa: E731
CLASSIFIER = lambda kind: kind != "linear"  # noqa: E731
BINARY = lambda kind: kind in ("binomial", "svc")  # noqa: E731
FEATURES_BAD = r"features column 'features' contains NaN or infinite"
DEFECTS = [
    Defect("feature NaN", ANY, _feature(math.nan), FEATURES_BAD),
    Defect("feature +inf", ANY, _feature(math.inf), FEATURES_BAD),
    Defect("feature -inf", ANY, _feature(-math.inf), FEATURES_BAD),
    Defect("label NaN", ANY, _set(1, math.nan), r"label column 'label' is nan"),
    Defect("label inf", ANY, _set(1, math.inf), r"label column 'label' is inf"),
    Defect("weight NaN", ANY, _set(2, math.nan), r"weight column 'weight' must be finite"),
    Defect("weight -inf", ANY, _set(2, -math.inf), r"weight column 'weight' must be finite"),
    Defect("negative weight", ANY, _set(2, -0.5), r"weight column 'weight' .*>= 0, got -0.5"),
    Defect("all-zero weights", ANY, _every(2, 0.0), r"weights in column 'weight' sum to zero",
           located=False),
    Defect("null features", ANY, _set(0, None), r"features column 'features' is null"),
    Defect("null label", ANY, _set(1, None), r"column 'label' is null"),
    Defect("null weight", ANY, _set(2, None), r"column 'weight' is null"),
    Defect("label 2 for a binary model", BINARY, _set(1, 2.0),
           r"label column 'label' must be 0 or 1 .*got 2.0"),
    Defect("negative class index", CLASSIFIER, _set(1, -1.0), r"class index|must be 0 or 1"),
    Defect("non-integral class", CLASSIFIER, _set(1, 0.5), r"class index|must be 0 or 1"),
    Defect("a single class", lambda kind: kind in ("auto", "binomial"), _every(1, 1.0),
           r"label column 'label' holds a single class", located=False),
    Defect("vector one longer", ANY,
           lambda rows, k, t: rows[k].__setitem__(0, Vectors.dense(np.append(t.X[k], 1.0))),
           r"vector of size \d+ .*size \d+"),
    Defect("sparse index out of range", ANY,
           lambda rows, k, t: rows[k].__setitem__(0, _out_of_range(rows[k][0], t.X.shape[1])),
           r"features column 'features' has a sparse vector with index \d+ .*size \d+",
           located=False),  # Spark refuses it before our pass sees a row number
]

KINDS = {
    "auto": lambda **p: SGDLogisticRegression(**p),
    "binomial": lambda **p: SGDLogisticRegression(family="binomial", **p),
    "svc": lambda **p: SGDLinearSVC(**p),
    "linear": lambda **p: SGDLinearRegression(**p),
}


@st.composite
def tables(draw, min_rows: int = 2) -> Table:
    n = draw(st.integers(min_rows, 24))
    d = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    g = np.random.default_rng(seed)
    X = g.normal(size=(n, d)) * 10.0 ** g.integers(-3, 4, size=d)
    X[:, draw(st.integers(0, d - 1))] *= draw(st.sampled_from([1.0, 0.0]))  # a zero column
    y = (np.arange(n) % 2).astype(float)  # both classes whatever n is
    w = g.uniform(0.1, 3.0, size=n)
    return Table(X, y, w, draw(st.booleans()))


def fit_within(estimator, df):
    """Fit in a thread with a deadline: a hang fails the test instead of CI."""
    outcome: dict = {}

    def run():
        try:
            outcome["model"] = estimator.fit(df)
        except BaseException as error:  # noqa: BLE001 - re-raised below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(FIT_SECONDS)
    assert not thread.is_alive(), f"fit still running after {FIT_SECONDS} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["model"]


def frame(spark, rows, partitions: int):
    return spark.createDataFrame(rows, SCHEMA).repartition(partitions)


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.name)
@spark_examples(PER_DEFECT)
@given(table=tables(), kind=st.sampled_from(sorted(KINDS)),
       engine=st.sampled_from(["python", "jvm"]), partitions=st.integers(1, 4),
       position=st.floats(0, 1, exclude_max=True))
def test_one_defect_is_a_clear_error(spark, defect, table, kind, engine, partitions, position):
    if not defect.applies(kind):
        kind = next(k for k in sorted(KINDS) if defect.applies(k))
    rows = table.rows()
    defect.corrupt(rows, int(position * len(rows)), table)
    estimator = KINDS[kind](weightCol="weight", engine=engine, maxIter=5)
    with pytest.raises(InvalidDataError, match=defect.match) as info:
        fit_within(estimator, frame(spark, rows, partitions))
    assert "gradspark-data-error" not in str(info.value)  # the executor-side markers
    if defect.located:
        assert "partition" in str(info.value) and "row" in str(info.value)
    assert gradspark_cached_rdds(spark) == []


def weighted_least_squares_loss(X, y, w) -> float:
    """The optimum of sum w (y - Xb - c)^2 / (2 sum w): numpy's lstsq, independent of us."""
    A = np.hstack([X, np.ones((len(X), 1))]) * np.sqrt(w)[:, None]
    solution, *_ = np.linalg.lstsq(A, y * np.sqrt(w), rcond=None)
    residual = A @ solution - y * np.sqrt(w)
    return float(residual @ residual / (2 * w.sum()))


@spark_examples(VALID_EXAMPLES)
@given(table=tables(min_rows=1), engine=st.sampled_from(["python", "jvm"]),
       partitions=st.integers(1, 6), standardization=st.booleans())
def test_odd_but_valid_data_gives_the_least_squares_optimum(spark, table, engine, partitions,
                                                             standardization):
    # Constant and all-zero columns, one row, more partitions than rows (empty ones),
    # features from 1e-3 to 1e3: a model, and the best one.
    table.y = table.X @ np.linspace(1, 2, table.X.shape[1]) + np.sin(np.arange(len(table.y)))
    model = fit_within(SGDLinearRegression(weightCol="weight", engine=engine, tol=1e-12,
                                           maxIter=500, standardization=standardization),
                       frame(spark, table.rows(), partitions))
    coefficients = np.asarray(model.coefficients.toArray())
    assert np.all(np.isfinite(coefficients)) and math.isfinite(model.intercept)
    residual = table.X @ coefficients + model.intercept - table.y
    ours = float(table.w @ residual**2 / (2 * table.w.sum()))
    best = weighted_least_squares_loss(table.X, table.y, table.w)
    scale = float(table.w @ (table.y - np.average(table.y, weights=table.w))**2 /
                  (2 * table.w.sum()))
    assert ours <= best + 1e-6 * max(scale, 1e-12) + 1e-12
    assert gradspark_cached_rdds(spark) == []


def test_the_empty_dataframe(spark):
    for engine in ("python", "jvm"):
        with pytest.raises(InvalidDataError, match="empty"):
            fit_within(SGDLogisticRegression(engine=engine), frame(spark, [], 3))
