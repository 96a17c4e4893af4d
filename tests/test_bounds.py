"""Box constraints on logistic regression coefficients and intercepts, against MLlib's
bound-constrained LogisticRegression (L-BFGS-B on both sides)."""

import numpy as np
import pytest
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.linalg import Matrices, Vectors

from gradspark import SGDLogisticRegression

TIGHT = dict(regParam=0.01, tol=1e-10, maxIter=500)


def _parameters(model):
    return np.c_[model.coefficientMatrix.toArray(), model.interceptVector.toArray()]


def _objective(model):
    return model.summary.objectiveHistory[-1]


@pytest.mark.parametrize("bounds,standardization", [
    (dict(lowerBoundsOnCoefficients=Matrices.dense(1, 5, [0.0] * 5),
          upperBoundsOnIntercepts=Vectors.dense([0.5])), True),
    (dict(lowerBoundsOnCoefficients=Matrices.dense(1, 5, [0.0] * 5),
          upperBoundsOnIntercepts=Vectors.dense([0.5])), False),
    (dict(upperBoundsOnCoefficients=Matrices.dense(1, 5, [0.1, 0.0, 1.0, 0.05, 1.0]),
          lowerBoundsOnIntercepts=Vectors.dense([1.0])), True),
])
def test_binomial_bounds_reach_mllibs_constrained_optimum(classification_data, bounds,
                                                          standardization):
    df = classification_data[0]
    ours = SGDLogisticRegression(standardization=standardization, **bounds, **TIGHT).fit(df)
    mllib = LogisticRegression(standardization=standardization, **bounds, **TIGHT).fit(df)
    np.testing.assert_allclose(_parameters(ours), _parameters(mllib), atol=2e-4)
    assert _objective(ours) <= _objective(mllib) + 1e-9
    lower = bounds.get("lowerBoundsOnCoefficients")
    upper = bounds.get("upperBoundsOnCoefficients")
    coefficients = ours.coefficientMatrix.toArray()
    if lower is not None:
        assert (coefficients >= lower.toArray() - 1e-12).all()
    if upper is not None:
        assert (coefficients <= upper.toArray() + 1e-12).all()
    # the bounds bind: the unconstrained optimum lies outside them
    free = _parameters(SGDLogisticRegression(standardization=standardization, **TIGHT).fit(df))
    assert np.abs(free - _parameters(ours)).max() > 0.05


@pytest.mark.parametrize("bounds", [
    dict(lowerBoundsOnCoefficients=Matrices.dense(3, 5, [0.0] * 15)),
    dict(upperBoundsOnCoefficients=Matrices.dense(3, 5, [0.0] * 15),
         lowerBoundsOnIntercepts=Vectors.dense([-0.2, -0.2, -0.2])),
])
def test_multinomial_bounds_reach_mllibs_constrained_optimum(classification_data, bounds):
    df = classification_data[0]
    ours = SGDLogisticRegression(labelCol="multi", **bounds, **TIGHT).fit(df)
    mllib = LogisticRegression(labelCol="multi", **bounds, **TIGHT).fit(df)
    assert _objective(ours) <= _objective(mllib) + 1e-9
    np.testing.assert_allclose(ours.coefficientMatrix.toArray(),
                               mllib.coefficientMatrix.toArray(), atol=2e-3)
    # Without intercept bounds the intercepts are free up to a common shift (softmax):
    # compare what the shift leaves unchanged, the probabilities.
    p_ours = [r.probability.toArray() for r in ours.transform(df).collect()]
    p_mllib = [r.probability.toArray() for r in mllib.transform(df).collect()]
    np.testing.assert_allclose(p_ours, p_mllib, atol=2e-3)
    if "lowerBoundsOnIntercepts" in bounds:
        assert (ours.interceptVector.toArray() >= -0.2 - 1e-12).all()
    else:
        assert ours.interceptVector.toArray().sum() == pytest.approx(0.0, abs=1e-9)


def test_first_order_optimizers_project_onto_the_bounds(classification_data):
    df = classification_data[0]
    bounds = dict(lowerBoundsOnCoefficients=Matrices.dense(1, 5, [0.0] * 5),
                  upperBoundsOnIntercepts=Vectors.dense([0.5]))
    adam = SGDLogisticRegression(optimizer="adam", stepSize=0.05, maxIter=300, tol=0.0,
                                 regParam=0.01, **bounds).fit(df)
    lbfgs = SGDLogisticRegression(**bounds, **TIGHT).fit(df)
    assert (adam.coefficients.toArray() >= 0.0).all() and adam.intercept <= 0.5
    np.testing.assert_allclose(_parameters(adam), _parameters(lbfgs), atol=5e-3)


def test_bounds_persist_and_bad_bounds_are_refused(classification_data, tmp_path):
    df = classification_data[0]
    lower = Matrices.dense(1, 5, [0.0, -1.0, 0.0, -2.0, 0.0])
    estimator = SGDLogisticRegression(lowerBoundsOnCoefficients=lower,
                                      upperBoundsOnIntercepts=Vectors.dense([0.5]))
    estimator.write().save(str(tmp_path / "estimator"))
    loaded = SGDLogisticRegression.load(str(tmp_path / "estimator"))
    np.testing.assert_array_equal(loaded.getLowerBoundsOnCoefficients().toArray(),
                                  lower.toArray())
    assert loaded.getUpperBoundsOnIntercepts() == Vectors.dense([0.5])
    with pytest.raises(ValueError, match=r"shape \(1, 4\); this fit needs \(1, 5\)"):
        SGDLogisticRegression(lowerBoundsOnCoefficients=Matrices.dense(1, 4, [0.0] * 4)).fit(df)
    with pytest.raises(ValueError, match="lower bound must be <= its upper bound"):
        SGDLogisticRegression(lowerBoundsOnCoefficients=Matrices.dense(1, 5, [1.0] * 5),
                              upperBoundsOnCoefficients=Matrices.dense(1, 5, [0.0] * 5)).fit(df)
    with pytest.raises(ValueError, match="L2 regularization only"):
        SGDLogisticRegression(lowerBoundsOnCoefficients=lower, regParam=0.1,
                              elasticNetParam=0.5).fit(df)
    with pytest.raises(ValueError, match="need fitIntercept=True"):
        SGDLogisticRegression(lowerBoundsOnIntercepts=Vectors.dense([0.0]),
                              fitIntercept=False).fit(df)
