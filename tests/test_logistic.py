"""SGDLogisticRegression against MLlib's LogisticRegression on the same data and Params."""

import numpy as np
import pytest
from pyspark.ml.classification import LogisticRegression

from gradspark import SGDLogisticRegression

TIGHT = dict(tol=1e-12, maxIter=1000)


def _fit_both(df, **params):
    ours = SGDLogisticRegression(**TIGHT, **params).fit(df)
    ref = LogisticRegression(**TIGHT, **params).fit(df)
    return ours, ref


@pytest.mark.parametrize("params", [
    {},
    {"regParam": 0.05},
    {"regParam": 0.05, "weightCol": "weight"},
    {"regParam": 0.02, "elasticNetParam": 1.0},
    {"regParam": 0.03, "elasticNetParam": 0.4, "weightCol": "weight"},
    {"regParam": 0.05, "standardization": False},
    {"regParam": 0.02, "elasticNetParam": 0.5, "standardization": False},
    {"regParam": 0.01, "fitIntercept": False},
], ids=str)
def test_binomial_matches_mllib(classification_data, params):
    df = classification_data[0]
    ours, ref = _fit_both(df, **params)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-4, atol=1e-5)
    assert ours.intercept == pytest.approx(ref.intercept, rel=1e-4, abs=1e-5)
    assert not ours.isMultinomial and ours.numClasses == 2


def test_l1_gives_exact_zeros_where_mllib_does(classification_data):
    df = classification_data[0]
    ours, ref = _fit_both(df, regParam=0.08, elasticNetParam=1.0)
    assert np.array_equal(ours.coefficients.toArray() == 0, ref.coefficients.toArray() == 0)
    assert (ref.coefficients.toArray() == 0).any()


@pytest.mark.parametrize("params", [
    {"regParam": 0.01},
    {"regParam": 0.0},
    {"regParam": 0.02, "elasticNetParam": 0.3, "weightCol": "weight"},
    {"regParam": 0.01, "fitIntercept": False},
], ids=str)
def test_multinomial_matches_mllib(classification_data, params):
    df = classification_data[0]
    ours, ref = _fit_both(df, labelCol="multi", **params)
    assert ours.isMultinomial and ours.numClasses == 3
    np.testing.assert_allclose(ours.coefficientMatrix.toArray(), ref.coefficientMatrix.toArray(),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours.interceptVector.toArray(), ref.interceptVector.toArray(),
                               rtol=1e-4, atol=1e-4)


def test_family_multinomial_on_binary_labels(classification_data):
    df = classification_data[0]
    ours, ref = _fit_both(df, family="multinomial", regParam=0.01)
    assert ours.coefficientMatrix.numRows == 2
    np.testing.assert_allclose(ours.coefficientMatrix.toArray(), ref.coefficientMatrix.toArray(),
                               rtol=1e-4, atol=1e-4)


def test_sparse_vectors_match_dense_and_mllib(sparse_data):
    sparse_df, dense_df, _, _ = sparse_data
    sparse = SGDLogisticRegression(regParam=0.01, **TIGHT).fit(sparse_df)
    dense = SGDLogisticRegression(regParam=0.01, **TIGHT).fit(dense_df)
    ref = LogisticRegression(regParam=0.01, **TIGHT).fit(sparse_df)
    np.testing.assert_allclose(sparse.coefficients.toArray(), dense.coefficients.toArray(),
                               rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(sparse.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer,step,iters,atol", [
    ("sgd", 1.0, 150, 2e-2),
    ("adagrad", 0.5, 150, 2e-3),
    ("adam", 0.05, 150, 1e-2),
])
def test_first_order_optimizers_approach_the_mllib_solution(classification_data, optimizer,
                                                           step, iters, atol):
    df = classification_data[0]
    ref = LogisticRegression(regParam=0.05, **TIGHT).fit(df)
    ours = SGDLogisticRegression(regParam=0.05, optimizer=optimizer, stepSize=step,
                                 maxIter=iters, tol=0.0).fit(df)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(), atol=atol)
    history = ours.summary.objectiveHistory
    assert len(history) == ours.summary.totalIterations == iters
    assert history[-1] < history[0]


def test_mini_batches_are_reproducible_from_the_seed(classification_data):
    df = classification_data[0]

    def fit(seed):
        return SGDLogisticRegression(optimizer="adam", stepSize=0.1, miniBatchFraction=0.3,
                                     learningRateSchedule="cosine",
                                     maxIter=80, tol=0.0, seed=seed, regParam=0.05).fit(df)

    a, b, c = fit(1), fit(1), fit(2)
    np.testing.assert_array_equal(a.coefficients.toArray(), b.coefficients.toArray())
    assert a.summary.objectiveHistory == b.summary.objectiveHistory
    assert not np.array_equal(a.coefficients.toArray(), c.coefficients.toArray())
    # mini-batch Adam still lands near the full-batch optimum: same probabilities
    ref = LogisticRegression(regParam=0.05, **TIGHT).fit(df)
    pa = np.array([r.probability[1] for r in a.transform(df).select("probability").collect()])
    pr = np.array([r.probability[1] for r in ref.transform(df).select("probability").collect()])
    assert np.abs(pa - pr).mean() < 0.02


def test_predictions_match_mllib(classification_data):
    df = classification_data[0]
    ours, ref = _fit_both(df, regParam=0.05, threshold=0.4)
    a = ours.transform(df).select("probability", "prediction", "rawPrediction").collect()
    b = ref.transform(df).select("probability", "prediction", "rawPrediction").collect()
    pa = np.array([r.probability.toArray() for r in a])
    pb = np.array([r.probability.toArray() for r in b])
    np.testing.assert_allclose(pa, pb, atol=1e-5)
    np.testing.assert_allclose([r.rawPrediction.toArray() for r in a],
                               [r.rawPrediction.toArray() for r in b], atol=1e-4)
    # threshold 0.4 is honoured; compare only rows not sitting on the threshold
    clear = np.abs(pb[:, 1] - 0.4) > 1e-3
    assert np.array_equal(np.array([r.prediction for r in a])[clear],
                          np.array([r.prediction for r in b])[clear])
