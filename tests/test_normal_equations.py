"""solver='normal' (and MLlib's default 'auto' below 4,096 features): MLlib's
WeightedLeastSquares, checked against MLlib's LinearRegression on the same rows, and the
inference statistics against numpy's closed-form OLS."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors
from pyspark.ml.regression import LinearRegression
from scipy import stats

from gradspark import SGDLinearRegression
from gradspark.data.validation import InvalidDataError

INFERENCE = ("coefficientStandardErrors", "tValues", "pValues")


@pytest.fixture(scope="module")
def ols_data(spark):
    g = np.random.default_rng(21)
    X = g.normal(size=(300, 4)) * [1.0, 5.0, 0.2, 2.0] + [0.0, 3.0, -1.0, 0.5]
    y = X @ [1.5, -0.3, 2.0, 0.0] + 4.0 + g.normal(scale=1.5, size=300)
    w = g.uniform(0.2, 3.0, size=300)
    frame = spark.createDataFrame([(Vectors.dense(x), float(t), float(v))
                                   for x, t, v in zip(X, y, w)], ["features", "label", "w"])
    return frame.repartition(3).cache(), X, y, w


@pytest.mark.parametrize("params", [
    {},
    dict(regParam=0.3),
    dict(regParam=0.3, standardization=False),
    dict(regParam=0.3, weightCol="w"),
    dict(fitIntercept=False, weightCol="w"),
    dict(regParam=0.2, elasticNetParam=0.5),
    dict(regParam=0.2, elasticNetParam=1.0, standardization=False, weightCol="w"),
], ids=["ols", "ridge", "ridge-raw", "ridge-weighted", "no-intercept", "enet", "lasso-raw"])
def test_default_solver_equals_mllibs_default(spark, ols_data, params):
    """MLlib's default solver ('auto' -> normal equations here) and ours give the same
    coefficients (1e-6 relative; OWL-QN's tol bounds MLlib's side with L1) and the same
    inference statistics (1e-6) where MLlib has them."""
    df = ols_data[0]
    mllib = LinearRegression(**params).fit(df)
    ours = SGDLinearRegression(**params).fit(df)
    l1 = params.get("elasticNetParam", 0.0) > 0
    rtol = 1e-5 if l1 else 1e-6
    np.testing.assert_allclose(ours.coefficients.toArray(), mllib.coefficients.toArray(),
                               rtol=rtol, atol=1e-8)
    assert ours.intercept == pytest.approx(mllib.intercept, rel=rtol, abs=1e-8)
    theirs, summary = mllib.summary, ours.summary
    assert summary.totalIterations >= 0 and summary.objectiveHistory
    np.testing.assert_allclose(summary.devianceResiduals, theirs.devianceResiduals, rtol=rtol)
    if l1:
        for name in INFERENCE:
            with pytest.raises(NotImplementedError, match="No Std. Error"):
                getattr(summary, name)
        assert theirs.objectiveHistory != [0.0]  # MLlib ran its iterative solver too
        return
    assert summary.objectiveHistory == theirs.objectiveHistory == [0.0]
    assert summary.totalIterations == theirs.totalIterations == 0
    for name in INFERENCE:
        np.testing.assert_allclose(getattr(summary, name), getattr(theirs, name),
                                   rtol=1e-6, atol=1e-12, err_msg=name)
    with pytest.raises(NotImplementedError, match="No Std. Error"):
        ours.evaluate(df).coefficientStandardErrors  # as MLlib's evaluate(): training only


def test_inference_statistics_are_closed_form_weighted_ols(ols_data):
    """Independent of MLlib: (X'WX)^-1 sigma^2 from numpy, Student's t from scipy."""
    df, X, y, w = ols_data
    summary = SGDLinearRegression(weightCol="w").fit(df).summary
    A = np.c_[X, np.ones(len(X))]
    beta = np.linalg.solve(A.T @ (A * w[:, None]), A.T @ (w * y))
    dof = len(y) - A.shape[1]
    sigma2 = np.sum(w * (y - A @ beta) ** 2) / dof
    errors = np.sqrt(np.diag(np.linalg.inv(A.T @ (A * w[:, None]))) * sigma2)
    np.testing.assert_allclose(summary.coefficientStandardErrors, errors, rtol=1e-9)
    np.testing.assert_allclose(summary.tValues, beta / errors, rtol=1e-8)
    np.testing.assert_allclose(summary.pValues, 2 * stats.t.sf(np.abs(beta / errors), dof),
                               rtol=1e-6, atol=1e-14)
    residuals = (y - A @ beta) * np.sqrt(w)
    np.testing.assert_allclose(summary.devianceResiduals, [residuals.min(), residuals.max()],
                               rtol=1e-9)


def test_solver_choice_follows_mllib_and_our_iterative_params(spark, ols_data):
    df = ols_data[0]
    assert SGDLinearRegression().fit(df).summary.optimizer == "normal"
    assert SGDLinearRegression(solver="l-bfgs").fit(df).summary.optimizer == "lbfgs"
    assert SGDLinearRegression(loss="huber").fit(df).summary.optimizer == "lbfgs"
    first_order = SGDLinearRegression(optimizer="adam", maxIter=5).fit(df)
    assert first_order.summary.optimizer == "adam"
    with pytest.raises(ValueError, match="huber loss only supports"):
        SGDLinearRegression(solver="normal", loss="huber").fit(df)
    with pytest.raises(ValueError, match="optimizer='adam'"):
        SGDLinearRegression(solver="normal", optimizer="adam").fit(df)
    with pytest.raises(ValueError, match="solver must be one of"):
        SGDLinearRegression(solver="qr").fit(df)


def test_normal_equations_refuse_bad_rows_by_column(spark):
    rows = [(Vectors.dense([1.0, 2.0]), 1.0, 1.0), (Vectors.dense([0.5, float("nan")]), 2.0, 1.0),
            (Vectors.dense([3.0, 1.0]), 0.0, 1.0)]
    df = spark.createDataFrame(rows, ["features", "label", "w"])
    with pytest.raises(InvalidDataError, match="'features'"):
        SGDLinearRegression(solver="normal").fit(df)
    negative = spark.createDataFrame([(Vectors.dense([1.0]), 1.0, -1.0)], ["features", "label",
                                                                           "w"])
    with pytest.raises(InvalidDataError, match=">= 0, got -1.0 at partition"):
        SGDLinearRegression(solver="normal", weightCol="w").fit(negative)
