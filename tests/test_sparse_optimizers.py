"""Mini-batch optimizers on sparse click-through data: lazy updates, per-optimizer default
step sizes and tail averaging, checked against L-BFGS's optimum (the objective evaluated
in numpy from each returned model) and against averages computed here."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from pyspark.ml.linalg import Vectors

from gradspark import SGDLinearRegression, SGDLinearSVC, SGDLogisticRegression
from gradspark.fit.plan import averaging_start
from gradspark.optim import DEFAULT_STEP_SIZES
from gradspark.optim.variance_reduction import updates_within
from gradspark.testing.ctr_data import ctr_arrays, sparse_rows

ROWS, BITS, REG = 12_000, 12, 1e-2
PASSES, FRACTION = 5, 0.05


@pytest.fixture(scope="module")
def ctr_sets(spark):
    """Per generator: the cached DataFrame, its CSR matrix and labels."""
    sets = {}
    for generator in ("ctr", "tail"):
        indices, values, indptr, labels = ctr_arrays(generator, ROWS, 1 << BITS, seed=7)
        matrix = sp.csr_matrix((values, indices, indptr), shape=(ROWS, 1 << BITS))
        rows = sparse_rows(generator, 0, ROWS, 1 << BITS, seed=7)
        df = spark.createDataFrame(rows, ["label", "features"]).repartition(2).cache()
        df.count()
        sets[generator] = (df, matrix, labels)
    yield sets
    for df, _, _ in sets.values():
        df.unpersist()


def objective(matrix, labels, model, reg=REG):
    """MLlib's objective (standardization=False) of a model, in numpy."""
    w = model.coefficients.toArray()
    margin = matrix @ w + model.intercept
    return float(np.mean(np.logaddexp(0, margin) - labels * margin) + reg / 2 * w @ w)


@pytest.mark.parametrize("generator", ["ctr", "tail"])
def test_default_step_sizes_reach_lbfgs_in_five_passes(ctr_sets, generator):
    """No stepSize given: each optimizer's default ends within 2% of the L-BFGS objective
    after 5 passes of 5% mini-batches, on the generator the defaults were chosen on and
    on the other one (docs/wide_sparse.md has the full-size figures)."""
    df, matrix, labels = ctr_sets[generator]
    common = dict(regParam=REG, standardization=False)
    optimum = objective(matrix, labels,
                        SGDLogisticRegression(maxIter=300, tol=1e-12, **common).fit(df))
    start = objective(matrix, labels, SGDLogisticRegression(maxIter=0, **common).fit(df))
    for name in ("adam", "adagrad", "ftrl"):
        model = SGDLogisticRegression(optimizer=name, miniBatchFraction=FRACTION,
                                      maxIter=round(PASSES / FRACTION), tol=0.0,
                                      **common).fit(df)
        reached = objective(matrix, labels, model)
        assert reached < start
        assert reached / optimum - 1 < 0.02, (name, reached, optimum)
        averaged = model.summary.extra.get("averagedSteps")
        assert averaged == (None if name == "ftrl" else round(PASSES / FRACTION) - 20)


def test_tail_average_is_the_mean_of_the_iterates(ctr_sets):
    """The tail model equals the mean, computed here, of the models that stop after each
    averaged step (mini-batches depend on the seed and the step only)."""
    df = ctr_sets["ctr"][0]
    params = dict(optimizer="adam", miniBatchFraction=0.5, tol=0.0, regParam=REG,
                  standardization=False)
    tail = SGDLogisticRegression(maxIter=6, **params).fit(df)
    assert tail.summary.extra["averagedSteps"] == 4  # after step min(1 / 0.5, 6 // 2) = 2
    iterates = [SGDLogisticRegression(maxIter=k, iterateAveraging="none", **params).fit(df)
                for k in (3, 4, 5, 6)]
    np.testing.assert_allclose(tail.coefficients.toArray(),
                               np.mean([m.coefficients.toArray() for m in iterates], axis=0),
                               rtol=1e-10, atol=1e-14)
    assert tail.intercept == pytest.approx(np.mean([m.intercept for m in iterates]),
                                           rel=1e-10)
    assert not np.array_equal(tail.coefficients.toArray(), iterates[-1].coefficients.toArray())


def test_lazy_updates_are_the_dense_ones_on_dense_data(spark):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 5))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0, 1.5]) + rng.normal(size=400) > 0).astype(float)
    df = spark.createDataFrame([(float(t), Vectors.dense(x)) for x, t in zip(X, y)],
                               ["label", "features"])
    params = dict(optimizer="adam", miniBatchFraction=0.3, maxIter=30, tol=0.0,
                  regParam=0.05)
    lazy = SGDLogisticRegression(**params).fit(df)
    dense = SGDLogisticRegression(lazyUpdates=False, **params).fit(df)
    assert np.array_equal(lazy.coefficients.toArray(), dense.coefficients.toArray())
    assert lazy.intercept == dense.intercept


def test_lazy_updates_change_the_path_on_sparse_data(ctr_sets):
    df = ctr_sets["ctr"][0]
    params = dict(optimizer="adam", miniBatchFraction=0.02, maxIter=20, tol=0.0,
                  regParam=REG, standardization=False)
    lazy = SGDLogisticRegression(**params).fit(df).coefficients.toArray()
    dense = SGDLogisticRegression(lazyUpdates=False, **params).fit(df).coefficients.toArray()
    assert not np.allclose(lazy, dense)


def test_an_unset_step_size_is_the_optimizers_default(ctr_sets, tmp_path):
    df = ctr_sets["tail"][0]
    for name, step in DEFAULT_STEP_SIZES.items():
        estimator = SGDLogisticRegression(optimizer=name)
        assert not estimator.isSet(estimator.stepSize)
        assert estimator.getStepSize() == step
    assert SGDLogisticRegression(optimizer="adam", stepSize=0.5).getStepSize() == 0.5
    params = dict(optimizer="adam", miniBatchFraction=0.2, maxIter=10, tol=0.0)
    unset = SGDLogisticRegression(**params).fit(df)
    explicit = SGDLogisticRegression(stepSize=DEFAULT_STEP_SIZES["adam"], **params).fit(df)
    assert np.array_equal(unset.coefficients.toArray(), explicit.coefficients.toArray())
    assert unset.summary.extra["stepSize"] == DEFAULT_STEP_SIZES["adam"]
    SGDLogisticRegression(**params).save(str(tmp_path / "estimator"))
    loaded = SGDLogisticRegression.load(str(tmp_path / "estimator"))
    assert not loaded.isSet(loaded.stepSize) and loaded.getStepSize() == 0.01
    assert loaded.setOptimizer("ftrl").getStepSize() == DEFAULT_STEP_SIZES["ftrl"]


@pytest.mark.parametrize("params,expected", [
    (dict(optimizer="adam", miniBatchFraction=0.01, maxIter=500), 100),
    (dict(optimizer="adam", miniBatchFraction=0.01, maxIter=60), 30),  # shorter than 2 passes
    (dict(optimizer="sgd", miniBatchFraction=0.1, maxIter=50), 10),
    (dict(optimizer="adam", miniBatchFraction=1.0, maxIter=50), None),  # full batch
    (dict(optimizer="ftrl", miniBatchFraction=0.1, maxIter=50), None),  # a dual average
    (dict(optimizer="adam", miniBatchFraction=0.1, regParam=0.1, elasticNetParam=0.5),
     None),  # L1: averaging would fill in its zeros
    (dict(optimizer="adam", miniBatchFraction=0.1, mode="async"), None),
    (dict(optimizer="adam", miniBatchFraction=0.1, validationIndicatorCol="v"), None),
    (dict(optimizer="ftrl", miniBatchFraction=0.1, maxIter=50, iterateAveraging="tail"), 10),
    (dict(optimizer="adam", miniBatchFraction=0.1, iterateAveraging="none"), None),
])
def test_where_averaging_applies(params, expected):
    assert averaging_start(SGDLogisticRegression(**params)) == expected


@pytest.mark.parametrize("params,message", [
    (dict(optimizer="lbfgs"), "optimizer='lbfgs' has none"),
    (dict(optimizer="adam", mode="async"), "needs sync mode"),
    (dict(optimizer="adam", localSteps=4), "needs sync mode"),
    (dict(optimizer="adam", validationIndicatorCol="v"), "validationIndicatorCol"),
])
def test_explicit_tail_averaging_is_refused_where_it_cannot_run(ctr_sets, params, message):
    with pytest.raises(ValueError, match=message):
        SGDLogisticRegression(iterateAveraging="tail", miniBatchFraction=0.5,
                              **params).fit(ctr_sets["ctr"][0])


def test_full_batch_svrg_is_curvature_scaled_gradient_descent(ctr_sets):
    """With every row in every batch the correction cancels: the path is gradient descent
    with steps ``lr / (0.25 * mean x_j^2 + l2)`` (0.25 for the intercept), computed here in
    numpy from the rows (the mean square from the unbiased variance, as MLlib's
    summarizer gives it)."""
    df, matrix, labels = ctr_sets["ctr"]
    n, lr, steps = matrix.shape[0], 0.2, 6
    mean = np.asarray(matrix.mean(axis=0)).ravel()
    square = np.asarray(matrix.multiply(matrix).mean(axis=0)).ravel()
    variance = (square - mean**2) * n / (n - 1)
    h = np.r_[0.25 * (variance + mean**2) + REG, 0.25]
    theta = np.r_[np.zeros(matrix.shape[1]), np.log(labels.mean() / (1 - labels.mean()))]
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(matrix @ theta[:-1] + theta[-1])))
        grad = np.r_[matrix.T @ (p - labels) / n + REG * theta[:-1], np.mean(p - labels)]
        theta = theta - lr / h * grad
    model = SGDLogisticRegression(optimizer="svrg", stepSize=lr, maxIter=steps, tol=0.0,
                                  regParam=REG, standardization=False).fit(df)
    np.testing.assert_allclose(model.coefficients.toArray(), theta[:-1], rtol=1e-9,
                               atol=1e-13)
    assert model.intercept == pytest.approx(theta[-1], rel=1e-9)


@pytest.mark.parametrize("generator", ["ctr", "tail"])
def test_svrg_keeps_converging_to_the_optimum_at_a_constant_step(ctr_sets, generator):
    """Its batch noise vanishes near the optimum: at its default step, 20 passes of 5%
    batches end within 0.1% of L-BFGS's objective, and 40 closer still."""
    df, matrix, labels = ctr_sets[generator]
    common = dict(regParam=REG, standardization=False)
    optimum = objective(matrix, labels,
                        SGDLogisticRegression(maxIter=300, tol=1e-12, **common).fit(df))
    gaps = []
    for passes in (20, 40):
        model = SGDLogisticRegression(optimizer="svrg", miniBatchFraction=FRACTION, tol=0.0,
                                      maxIter=updates_within(passes, FRACTION),
                                      **common).fit(df)
        gaps.append(objective(matrix, labels, model) / optimum - 1)
    assert 0 < gaps[1] < gaps[0] < 1e-3, gaps


@pytest.mark.parametrize("params,message", [
    (dict(mode="async"), "sync mode"),
    (dict(parameterServers=2), "sync mode"),
    (dict(localSteps=2), "sync mode"),
    (dict(compression="fp16"), "compression='none'"),
    (dict(iterateAveraging="tail"), "without iterate averaging"),
])
def test_svrg_is_refused_where_it_cannot_correct_its_batches(ctr_sets, params, message):
    df = ctr_sets["ctr"][0]
    with pytest.raises(ValueError, match=message):
        SGDLogisticRegression(optimizer="svrg", miniBatchFraction=0.1, **params).fit(df)


def test_svrg_is_refused_for_losses_without_a_curvature_bound(ctr_sets):
    df = ctr_sets["ctr"][0]
    for estimator, loss in ((SGDLinearSVC(optimizer="svrg"), "hinge"),
                            (SGDLinearRegression(optimizer="svrg", loss="huber"), "huber")):
        with pytest.raises(ValueError, match=f"loss '{loss}'"):
            estimator.fit(df)
