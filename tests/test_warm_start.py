"""initialModel: continuing a fit equals the longer fit; other models warm-start from
their coefficients."""

import numpy as np
import pytest

from gradspark import SGDLinearRegression, SGDLogisticRegression, SGDLogisticRegressionModel

ADAM = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.5, seed=3, tol=0.0,
            regParam=0.01)


def _flat(model):
    return np.r_[model.coefficientMatrix.toArray().ravel(), model.interceptVector.toArray()]


# SVRG's snapshot and its full gradient are state too; 5% batches: snapshots at 0, 20, 60
SVRG = dict(optimizer="svrg", miniBatchFraction=0.05, seed=3, tol=0.0, regParam=0.01)


@pytest.mark.parametrize("settings", [ADAM, SVRG], ids=["adam", "svrg"])
@pytest.mark.parametrize("strategy", ["jobPerStep", "resident"])
def test_continuing_a_first_order_fit_equals_the_longer_fit(classification_data, strategy,
                                                             settings):
    """Adam on mini-batches: the moments, the step counter (bias correction) and the
    (seed, step) sampling all carry over, so 10 + 10 steps are the 20-step fit. SVRG:
    the second leg steps against the first leg's snapshot, the third takes its own."""
    df = classification_data[0]

    def estimator(steps):
        return SGDLogisticRegression(executionStrategy=strategy, maxIter=steps, **settings)

    first = estimator(10).fit(df)
    continued = estimator(10).setInitialModel(first).fit(df)
    straight = estimator(20).fit(df)
    np.testing.assert_array_equal(_flat(continued), _flat(straight))
    assert continued.summary.objectiveHistory == straight.summary.objectiveHistory
    assert continued.summary.totalIterations == 20
    # a third leg keeps going
    third = estimator(5).setInitialModel(continued).fit(df)
    longest = estimator(25).fit(df)
    np.testing.assert_array_equal(_flat(third), _flat(longest))


def test_a_loaded_model_warm_starts_from_its_coefficients(regression_data, tmp_path):
    """No optimizer state after save/load: the fit starts at the saved coefficients (its
    first loss is the loss there) and L-BFGS is back at the optimum within a few steps."""
    df = regression_data[0]
    tight = dict(regParam=0.1, tol=1e-10, weightCol="weight", solver="l-bfgs")
    fitted = SGDLinearRegression(**tight).fit(df)
    fitted.write().save(str(tmp_path / "model"))
    loaded = type(fitted).load(str(tmp_path / "model"))
    again = SGDLinearRegression(**tight).setInitialModel(loaded).fit(df)
    assert again.summary.objectiveHistory[0] == pytest.approx(
        fitted.summary.objectiveHistory[-1], rel=1e-9)
    assert again.summary.totalIterations <= 3 < fitted.summary.totalIterations
    np.testing.assert_allclose(again.coefficients.toArray(), fitted.coefficients.toArray(),
                               rtol=1e-6)
    # a first-order fit from there also starts at that loss
    sgd = SGDLinearRegression(optimizer="sgd", stepSize=0.01, maxIter=3, tol=0.0,
                              regParam=0.1, weightCol="weight").setInitialModel(loaded).fit(df)
    assert sgd.summary.objectiveHistory[0] == pytest.approx(
        fitted.summary.objectiveHistory[-1], rel=1e-9)


def test_other_params_warm_start_from_coefficients_and_bad_models_are_refused(
        classification_data, tmp_path):
    df = classification_data[0]
    first = SGDLogisticRegression(maxIter=10, **ADAM).fit(df)
    # another regParam: not the same problem, so no state is continued, but the start
    # is the first model's point
    other = SGDLogisticRegression(maxIter=1, **dict(ADAM, regParam=0.0)) \
        .setInitialModel(first).fit(df)
    assert other.summary.totalIterations == 1
    assert other.summary.objectiveHistory[0] < first.summary.objectiveHistory[0]
    multinomial = SGDLogisticRegression(labelCol="multi", maxIter=2).fit(df)
    with pytest.raises(ValueError, match=r"initialModel must be .* 5 features and 1 output"):
        SGDLogisticRegression(maxIter=2).setInitialModel(multinomial).fit(df)
    # the estimator saves without its initialModel (a warning says so)
    estimator = SGDLogisticRegression(maxIter=3).setInitialModel(first)
    estimator.write().save(str(tmp_path / "estimator"))
    loaded = SGDLogisticRegression.load(str(tmp_path / "estimator"))
    assert not loaded.isSet(loaded.initialModel) and loaded.getMaxIter() == 3
    assert isinstance(first, SGDLogisticRegressionModel)
