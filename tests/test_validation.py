"""validationIndicatorCol: early stopping on held-out rows, best step kept."""

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors
from pyspark.sql import functions as F

from gradspark import InvalidDataError, SGDLinearRegression, SGDLogisticRegression


@pytest.fixture(scope="module")
def overfitting(spark):
    """Few rows, many noise features: the training loss keeps falling, the held-out
    loss turns up. 40% of the rows are held out (column `held`)."""
    g = np.random.default_rng(4)
    n, d = 150, 60
    X = g.normal(size=(n, d))
    y = X[:, 0] * 2.0 + g.normal(scale=1.0, size=n)
    held = g.random(n) < 0.4
    df = spark.createDataFrame(
        [(Vectors.dense(x), float(t), bool(h)) for x, t, h in zip(X, y, held)],
        ["features", "label", "held"]).repartition(2).cache()
    return df, X, y, held


def _numpy_loss(model, X, y, scale):
    """Half the mean square, in the units of objectiveHistory: MLlib's squared error
    divides the label (and so the residual) by the training label's std."""
    residual = (y - (X @ model.coefficients.toArray() + model.intercept)) / scale
    return 0.5 * np.mean(residual**2)


@pytest.mark.parametrize("optimizer", ["sgd", "lbfgs"])
def test_early_stopping_keeps_the_best_step_by_mllibs_rule(overfitting, optimizer):
    df, X, y, held = overfitting
    params = dict(optimizer=optimizer, maxIter=200, tol=0.0, regParam=0.0,
                  standardization=False, solver="l-bfgs")  # the plain fit below: iterative too
    if optimizer == "sgd":
        params["stepSize"] = 0.05
    model = SGDLinearRegression(validationIndicatorCol="held", validationTol=0.001,
                                **params).fit(df)
    s = model.summary
    history = s.validationHistory
    # stopped early, by the rule, at the first step that did not improve enough
    assert s.totalIterations < 200
    best = np.minimum.accumulate(history)
    stalls = [i for i in range(1, len(history))
              if best[i - 1] - history[i] < 0.001 * max(history[i], 0.01)]
    assert stalls and stalls[0] == len(history) - 1
    assert s.bestIteration == int(np.argmin(history))
    # the model is the best step's, and its held-out loss is numpy's
    scale = np.std(y[~held], ddof=1)
    assert _numpy_loss(model, X[held], y[held], scale) == pytest.approx(min(history), rel=1e-9)
    # the training path is the plain fit's on the training rows: stopping there gives
    # the same model
    plain = SGDLinearRegression(**dict(params, maxIter=s.bestIteration)).fit(
        df.filter(~F.col("held")))
    np.testing.assert_allclose(model.coefficients.toArray(), plain.coefficients.toArray(),
                               rtol=1e-9, atol=1e-12)
    assert s.numInstances == int((~held).sum())


def test_validation_errors_name_the_column(overfitting, classification_data):
    df = overfitting[0]
    with pytest.raises(ValueError, match="'nope' not found"):
        SGDLinearRegression(validationIndicatorCol="nope").fit(df)
    with pytest.raises(ValueError, match="'label' must be boolean, not double"):
        SGDLinearRegression(validationIndicatorCol="label").fit(df)
    with pytest.raises(ValueError, match="needs sync mode"):
        SGDLinearRegression(validationIndicatorCol="held", mode="async",
                            optimizer="sgd").fit(df)
    with pytest.raises(InvalidDataError, match=r"validation rows \(none true\)"):
        SGDLinearRegression(validationIndicatorCol="none").fit(
            df.withColumn("none", F.lit(False)))
    multi = classification_data[0].withColumn(
        "held", F.col("multi") == 2.0)  # class 2 only in the validation rows
    with pytest.raises(InvalidDataError, match="hold class 2, which the training rows"):
        SGDLogisticRegression(labelCol="multi", family="multinomial",
                              validationIndicatorCol="held").fit(multi)
