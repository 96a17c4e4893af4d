"""Extreme feature scales, separable classes and too-large steps, against MLlib."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.linalg import Vectors
from pyspark.ml.regression import LinearRegression

from conftest import make_df
from hashed_data import frames, hashed_rows
from gradspark import SGDLinearRegression, SGDLogisticRegression
from gradspark.trainer.divergence import DivergenceWarning

SCALES = np.array([1e-8, 1e-4, 1.0, 1e4, 1e8])


def logistic_objective(X, y, coefficients, intercept, reg, standardization):
    """MLlib's objective: mean log-loss + reg/2 * ||b||^2, where b is scaled by the
    features' standard deviations when standardizing (the penalty's units)."""
    margin = X @ coefficients + intercept
    loss = np.mean(np.logaddexp(0, margin) - y * margin)
    scaled = coefficients * X.std(axis=0, ddof=1) if standardization else coefficients
    return loss + reg / 2 * scaled @ scaled


@pytest.mark.parametrize("standardization", [True, False])
def test_features_from_1e_minus_8_to_1e8_match_mllib(spark, standardization):
    g = np.random.default_rng(3)
    z = g.normal(size=(300, len(SCALES)))
    X = z * SCALES
    y = (z @ [1.0, -1.0, 0.5, 0.8, -0.6] + g.logistic(size=300) > 0).astype(float)
    df = make_df(spark, X, {"label": y})
    params = dict(regParam=0.01, standardization=standardization, tol=1e-12, maxIter=1000)
    ours = SGDLogisticRegression(**params).fit(df)
    ref = LogisticRegression(**params).fit(df)
    b, c = ours.coefficients.toArray(), ours.intercept
    assert np.all(np.isfinite(b)) and np.isfinite(c)
    ours_objective = logistic_objective(X, y, b, c, 0.01, standardization)
    ref_objective = logistic_objective(X, y, ref.coefficients.toArray(), ref.intercept, 0.01,
                                       standardization)
    assert ours_objective <= ref_objective + 1e-7
    if ref_objective > ours_objective + 1e-6:
        # Unstandardized, MLlib's Breeze line search fails on these scales ("Line search
        # zoom failed") and returns all-zero coefficients; ours must then be better than
        # that, which the objective just showed, and better than no model at all.
        assert not standardization and not ref.coefficients.toArray().any()
        p = y.mean()
        assert ours_objective < np.mean(-y * np.log(p) - (1 - y) * np.log(1 - p)) - 0.05
        return
    # Coefficients span 16 orders of magnitude: compare each in its feature's units.
    np.testing.assert_allclose(b * SCALES, ref.coefficients.toArray() * SCALES,
                               rtol=1e-3, atol=1e-4)


def test_separable_classes_do_not_diverge(spark):
    g = np.random.default_rng(8)
    X = g.normal(size=(200, 3))
    y = (X @ [2.0, -1.0, 0.5] > 0).astype(float)  # perfectly separable
    df = make_df(spark, X, {"label": y})
    # Unregularized, the optimum is at infinity: a finite model that separates.
    free = SGDLogisticRegression(regParam=0.0, maxIter=200).fit(df)
    b = free.coefficients.toArray()
    assert np.all(np.isfinite(b)) and np.isfinite(free.intercept)
    assert np.all(((X @ b + free.intercept) > 0) == (y == 1))
    # Regularized, the optimum is finite and unique: MLlib's.
    params = dict(regParam=0.1, tol=1e-12, maxIter=500)
    ours = SGDLogisticRegression(**params).fit(df)
    ref = LogisticRegression(**params).fit(df)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-4)


def test_a_too_large_step_warns_before_it_overflows(spark, regression_data, caplog):
    df, *_ = regression_data
    # stepSize 2.5 on standardized features grows the error ~1.5x per step: finite
    # after 30 steps, but rising. A warning, not a silent model.
    params = dict(optimizer="sgd", stepSize=2.5, maxIter=30, regParam=0.0)
    with caplog.at_level(logging.WARNING, logger="gradspark.trainer"), \
            pytest.warns(DivergenceWarning, match="lower stepSize"):
        model = SGDLinearRegression(**params).fit(df)
    history = model.summary.objectiveHistory
    assert history[-1] > history[0]
    assert model.summary.extra["finalObjective"] > model.summary.extra["initialObjective"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("rose in each of the last 10 steps" in m and "stepSize" in m for m in warnings)
    # A step that suits the problem: the loss falls, and there is no warning.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gradspark.trainer"):
        good = SGDLinearRegression(**{**params, "stepSize": 0.5}).fit(df)
    assert good.summary.objectiveHistory[-1] < good.summary.objectiveHistory[0]
    assert not [r for r in caplog.records if "rose in each" in r.getMessage()]
    # Given the iterations, the good step reaches the normal equations' solution.
    ref = LinearRegression(regParam=0.0, solver="normal").fit(df)
    tuned = SGDLinearRegression(optimizer="sgd", stepSize=0.5, maxIter=500, tol=1e-12).fit(df)
    np.testing.assert_allclose(tuned.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-4)


def test_adam_on_rare_features_standardized_diverges_loudly_raw_does_not(spark):
    """The reported case in small: Adam moves a standardized coordinate by ~stepSize, that
    is a rare feature's raw coefficient by stepSize / std. The fit must not come back
    silently worse than its start."""
    columns, labels = hashed_rows(3000, seed=11, rare=True)
    df = frames(spark, columns, labels)
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.02, maxIter=40,
                  tol=0.0, regParam=1e-4, standardization=False)
    with pytest.warns(DivergenceWarning, match="lower stepSize.*miniBatchFraction"):
        bad = SGDLogisticRegression(parameterSpace="standardized", **params).fit(df)
    extra = bad.summary.extra
    assert extra["diverged"] and extra["finalObjective"] > extra["initialObjective"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        good = SGDLogisticRegression(**params).fit(df)
    extra = good.summary.extra
    assert extra["parameterSpace"] == "raw" and not extra["diverged"]
    assert extra["finalObjective"] < extra["initialObjective"]


def test_divergence_check_covers_async_mode(spark):
    g = np.random.default_rng(4)
    X = g.normal(size=(400, 3))
    y = X @ [1.0, -2.0, 0.5] + g.normal(size=400)
    df = make_df(spark, X, {"label": y})
    with pytest.warns(DivergenceWarning):
        model = SGDLinearRegression(optimizer="sgd", stepSize=5.0, maxIter=4, mode="async",
                                    maxStaleness=0, parameterServerHost="127.0.0.1").fit(df)
    assert model.summary.extra["diverged"]


@pytest.mark.parametrize("solver", ["auto", "l-bfgs"])
@pytest.mark.parametrize("column, scale, named", [
    ("label", 1e160, "label column 'label'"),
    ("features", 1e160, "features column 'features'"),
    ("weight", 1e160, "column 'w'"),
])
def test_values_whose_statistics_overflow_are_refused_by_column(spark, solver, column, scale,
                                                                named):
    """1e160 squared does not fit a double: before, a label that large gave NaN
    coefficients and such features or weights an intercept-only model, silently."""
    from gradspark import InvalidDataError, SGDLinearRegression

    g = np.random.default_rng(2)
    X = g.normal(size=(40, 2))
    y = X @ [1.0, 2.0] + 0.1 * g.normal(size=40)
    w = np.ones(40)
    if column == "label":
        y = y * scale
    elif column == "features":
        X[:, 1] *= scale
    else:
        w = w * scale
    df = spark.createDataFrame([(Vectors.dense(x), float(t), float(v))
                                for x, t, v in zip(X, y, w)], ["features", "label", "w"])
    if column == "weight" and solver == "auto":
        # The normal equations divide every sum by the weight sum: equal weights of 1e160
        # fit as equal weights of 1 do (sum w^2, which overflows, is never formed).
        heavy = SGDLinearRegression(weightCol="w").fit(df)
        plain = SGDLinearRegression().fit(df)
        np.testing.assert_allclose(heavy.coefficients.toArray(), plain.coefficients.toArray(),
                                   rtol=1e-9)
        return
    with pytest.raises(InvalidDataError, match=named + ".*too large"):
        SGDLinearRegression(solver=solver, weightCol="w").fit(df)
