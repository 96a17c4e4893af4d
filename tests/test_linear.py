"""SGDLinearRegression against MLlib's LinearRegression and numpy least squares."""

import numpy as np
import pytest
from pyspark.ml.regression import LinearRegression

from gradspark import SGDLinearRegression

TIGHT = dict(tol=1e-12, maxIter=1000)


def test_ols_matches_numpy_lstsq(regression_data):
    df, X, y, weight = regression_data
    model = SGDLinearRegression(**TIGHT).fit(df)
    A = np.column_stack([X, np.ones(len(y))])
    solution, *_ = np.linalg.lstsq(A, y, rcond=None)
    np.testing.assert_allclose(model.coefficients.toArray(), solution[:-1], rtol=1e-6)
    assert model.intercept == pytest.approx(solution[-1], rel=1e-6)


@pytest.mark.parametrize("solver", ["l-bfgs", "normal"])
def test_weighted_ridge_matches_closed_form(regression_data, solver):
    """MLlib's ridge with standardization=False: mean weighted squared error / 2 +
    regParam / (2 std(y)) * ||beta||^2 (the label-standardized objective), closed form.
    std(y) is the weighted unbiased std on MLlib's L-BFGS path and the population std
    on its normal-equation path (WeightedLeastSquares); each solver here follows its own."""
    df, X, y, w = regression_data
    lam = 0.3
    model = SGDLinearRegression(regParam=lam, standardization=False, weightCol="weight",
                                solver=solver, **TIGHT).fit(df)
    W = w.sum()
    mu_x, mu_y = w @ X / W, w @ y / W
    Xc, yc = X - mu_x, y - mu_y
    y_std = np.sqrt(w @ yc**2 / ((W - (w @ w) / W) if solver == "l-bfgs" else W))
    # (Xc^T diag(w) Xc / W + lam / y_std * I) beta = Xc^T diag(w) yc / W
    beta = np.linalg.solve(Xc.T @ (w[:, None] * Xc) / W + lam / y_std * np.eye(4),
                           Xc.T @ (w * yc) / W)
    np.testing.assert_allclose(model.coefficients.toArray(), beta, rtol=1e-6)
    assert model.intercept == pytest.approx(mu_y - mu_x @ beta, rel=1e-6)


@pytest.mark.parametrize("params", [
    {"regParam": 0.2},
    {"regParam": 0.2, "elasticNetParam": 0.5, "weightCol": "weight"},
    {"regParam": 0.1, "elasticNetParam": 1.0},
    {"regParam": 0.1, "fitIntercept": False},
    {"regParam": 0.1, "standardization": False, "elasticNetParam": 0.3},
], ids=str)
def test_squared_error_matches_mllib(regression_data, params):
    # MLlib's "normal" solver (WeightedLeastSquares) standardizes with the biased
    # (population) std, its L-BFGS path with the unbiased one; with regularization
    # the two MLlib solvers differ by ~1e-4 relative. Each of ours follows MLlib's
    # namesake: here the L-BFGS paths (the normal one: tests/test_normal_equations.py).
    df = regression_data[0]
    ours = SGDLinearRegression(solver="l-bfgs", **TIGHT, **params).fit(df)
    ref = LinearRegression(solver="l-bfgs", **TIGHT, **params).fit(df)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-4, atol=1e-5)
    assert ours.intercept == pytest.approx(ref.intercept, rel=1e-4, abs=1e-5)


def test_unregularized_matches_mllib_normal_solver(regression_data):
    df = regression_data[0]
    ours = SGDLinearRegression(weightCol="weight", **TIGHT).fit(df)
    ref = LinearRegression(solver="normal", weightCol="weight").fit(df)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-6)
    assert ours.intercept == pytest.approx(ref.intercept, rel=1e-6)


@pytest.mark.parametrize("params", [{}, {"regParam": 0.1, "weightCol": "weight"},
                                    {"regParam": 0.05, "fitIntercept": False}], ids=str)
def test_huber_matches_mllib(regression_data, params):
    df = regression_data[0]
    ours = SGDLinearRegression(loss="huber", labelCol="noisy", **TIGHT, **params).fit(df)
    ref = LinearRegression(loss="huber", labelCol="noisy", **TIGHT, **params).fit(df)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-4, atol=1e-4)
    assert ours.intercept == pytest.approx(ref.intercept, rel=1e-4, abs=1e-4)
    assert ours.scale == pytest.approx(ref.scale, rel=1e-4)


def test_huber_resists_outliers(regression_data):
    df, X, y, _ = regression_data
    huber = SGDLinearRegression(loss="huber", labelCol="noisy", **TIGHT).fit(df)
    squared = SGDLinearRegression(labelCol="noisy", **TIGHT).fit(df)
    truth = np.array([2.0, -0.4, 3.0, 0.7])
    assert (np.abs(huber.coefficients.toArray() - truth).max()
            < np.abs(squared.coefficients.toArray() - truth).max())


def test_constant_label_gives_mean_intercept(spark):
    from conftest import make_df

    X = np.random.default_rng(1).normal(size=(50, 3))
    df = make_df(spark, X, {"label": np.full(50, 4.5)})
    model = SGDLinearRegression(regParam=0.1).fit(df)
    np.testing.assert_allclose(model.coefficients.toArray(), 0.0, atol=1e-12)
    assert model.intercept == pytest.approx(4.5)


def test_prediction_column_matches_mllib(regression_data):
    df = regression_data[0]
    ours = SGDLinearRegression(regParam=0.1, predictionCol="yhat", solver="l-bfgs",
                               **TIGHT).fit(df)
    ref = LinearRegression(regParam=0.1, predictionCol="yhat", solver="l-bfgs", **TIGHT).fit(df)
    a = [r.yhat for r in ours.transform(df).select("yhat").collect()]
    b = [r.yhat for r in ref.transform(df).select("yhat").collect()]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("standardization", [True, False])
def test_svrg_reaches_mllibs_weighted_elastic_net(regression_data, standardization):
    """Mini-batch SVRG (the squared loss's curvature bound, proximal L1 steps) converges
    at a constant step to MLlib's L-BFGS solution (its label scaling; MLlib's normal
    solver scales by the population std and lands ~1e-4 away)."""
    df, *_ = regression_data
    params = dict(regParam=0.1, elasticNetParam=0.3, weightCol="weight",
                  standardization=standardization)
    expected = LinearRegression(solver="l-bfgs", **TIGHT, **params).fit(df)
    model = SGDLinearRegression(optimizer="svrg", miniBatchFraction=0.1, stepSize=0.1,
                                maxIter=600, tol=0.0, **params).fit(df)
    np.testing.assert_allclose(model.coefficients.toArray(),
                               expected.coefficients.toArray(), rtol=1e-5, atol=1e-6)
    assert model.intercept == pytest.approx(expected.intercept, rel=1e-5, abs=1e-6)
