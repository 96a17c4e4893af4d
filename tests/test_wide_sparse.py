"""Wide, mostly-empty feature spaces (hashed categorical data): compaction to the features
that occur, and the parameter space of first-order optimizers (its divergence case is in
test_numerical_robustness.py)."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.linalg import Vectors

from conftest import gradspark_cached_rdds
from hashed_data import WIDE, frames, hashed_rows
from gradspark import SGDLogisticRegression
from gradspark.data.compaction import MIN_DEAD_FEATURES

@pytest.fixture(scope="module")
def hashed(spark):
    columns, labels = hashed_rows(800, seed=3)
    occurring = np.unique(np.concatenate(columns))
    wide = frames(spark, columns, labels)
    narrow = frames(spark, columns, labels, narrow_to=occurring)
    return wide, narrow, occurring


@pytest.mark.parametrize("engine,strategy", [
    ("auto", "jobPerStep"),      # JVM blocks compacted in Scala, JVM kernels
    ("python", "jobPerStep"),    # Python blocks compacted in Python workers
    ("auto", "resident"),        # JVM blocks compacted, then loaded by resident workers
])
def test_compacted_fit_equals_the_fit_on_the_occurring_features(spark, hashed, engine,
                                                                 strategy):
    wide, narrow, occurring = hashed
    assert WIDE - len(occurring) >= MIN_DEAD_FEATURES
    params = dict(regParam=0.01, maxIter=50, tol=1e-10, engine=engine,
                  executionStrategy=strategy)
    compacted = SGDLogisticRegression(**params).fit(wide)
    reference = SGDLogisticRegression(**params).fit(narrow)
    assert compacted.summary.extra["trainedFeatures"] == len(occurring)
    assert reference.summary.extra["trainedFeatures"] == len(occurring)
    coefficients = compacted.coefficients.toArray()
    assert len(coefficients) == WIDE and compacted.numFeatures == WIDE
    assert np.all(np.delete(coefficients, occurring) == 0.0)
    np.testing.assert_allclose(coefficients[occurring], reference.coefficients.toArray(),
                               rtol=1e-9, atol=1e-12)
    assert compacted.intercept == pytest.approx(reference.intercept, rel=1e-9, abs=1e-12)
    assert gradspark_cached_rdds(spark) == []


def test_wide_sparse_fit_matches_mllib(hashed):
    wide, _, _ = hashed
    params = dict(regParam=1e-3, standardization=False, maxIter=200, tol=1e-10)
    ours = SGDLogisticRegression(**params).fit(wide)
    ref = LogisticRegression(**params).fit(wide)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-3, atol=1e-4)
    assert ours.intercept == pytest.approx(ref.intercept, rel=1e-3, abs=1e-4)
    # the model predicts from the full-width vectors
    row = ours.transform(wide).first()
    expected = ours.coefficients.dot(row.features) + ours.intercept
    assert row.rawPrediction[1] == pytest.approx(expected, rel=1e-12)


def test_parameter_spaces_reach_the_same_objective(hashed):
    """The space changes the path, not the problem: at convergence both spaces give MLlib's
    objective (evaluated independently in numpy from the returned model)."""
    wide, _, occurring = hashed
    rows = wide.collect()
    X = np.zeros((len(rows), WIDE))
    for i, r in enumerate(rows):
        X[i, r.features.indices] = 1.0
    y = np.array([r.label for r in rows])

    def objective(model, reg):
        margin = X @ model.coefficients.toArray() + model.intercept
        loss = np.mean(np.logaddexp(0, margin) - y * margin)
        std = X[:, occurring].std(axis=0, ddof=1)
        scaled = model.coefficients.toArray()[occurring] * std
        return loss + reg / 2 * scaled @ scaled

    values = {}
    for space in ("standardized", "raw"):
        model = SGDLogisticRegression(optimizer="sgd", stepSize=1.0, maxIter=3000, tol=1e-12,
                                      regParam=0.01, parameterSpace=space).fit(wide)
        assert model.summary.extra["parameterSpace"] == space
        assert model.summary.extra["finalObjective"] == pytest.approx(
            objective(model, 0.01), rel=1e-9)
        values[space] = objective(model, 0.01)
    lbfgs = SGDLogisticRegression(regParam=0.01, tol=1e-12, maxIter=500).fit(wide)
    for value in values.values():
        assert value == pytest.approx(objective(lbfgs, 0.01), rel=1e-5)


def test_auto_space_is_raw_for_first_order_on_sparse_data_only(spark, hashed):
    wide, _, _ = hashed
    dense = spark.createDataFrame(
        [(Vectors.dense(np.random.default_rng(i).normal(size=3)), float(i % 2))
         for i in range(60)], ["features", "label"])
    cases = [(wide, "adam", "raw"), (wide, "lbfgs", "standardized"),
             (dense, "adam", "standardized")]
    for frame, optimizer, expected in cases:
        model = SGDLogisticRegression(optimizer=optimizer, maxIter=3).fit(frame)
        assert model.summary.extra["parameterSpace"] == expected, (optimizer, expected)
