"""Summaries, evaluate() and single-vector predictions against MLlib's own.

The metric definitions are checked on *MLlib's* predictions: our summary classes
read an MLlib model's transform output, and every field must equal that MLlib
model's summary. Our fitted models are then checked for consistency (summary ==
evaluate on the training data == numpy on the collected predictions).
"""

import numpy as np
import pytest
from pyspark.ml.classification import LinearSVC, LogisticRegression
from pyspark.ml.linalg import Vectors
from pyspark.ml.regression import LinearRegression

from conftest import transform_stream
from gradspark import SGDLinearRegression, SGDLinearSVC, SGDLogisticRegression
from gradspark.summaries import (
    BinaryClassificationSummary,
    ClassificationSummary,
    RegressionSummary,
    training_summary,
)

CLASSIFICATION_FIELDS = (
    "labels", "accuracy", "weightedPrecision", "weightedRecall", "weightedTruePositiveRate",
    "weightedFalsePositiveRate", "precisionByLabel", "recallByLabel",
    "truePositiveRateByLabel", "falsePositiveRateByLabel")
CURVES = ("roc", "pr", "fMeasureByThreshold", "precisionByThreshold", "recallByThreshold")
REGRESSION_FIELDS = ("explainedVariance", "meanAbsoluteError", "meanSquaredError",
                     "rootMeanSquaredError", "r2", "r2adj", "numInstances", "degreesOfFreedom")


def _same(ours, theirs, fields, rtol=1e-12):
    for name in fields:
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=rtol,
                                   atol=1e-14, err_msg=name)


def _curve(frame):
    return np.array(frame.collect(), dtype=float)


@pytest.mark.parametrize("label,weighted", [("label", True), ("multi", True),
                                            ("label", False)])
def test_classification_metrics_equal_mllib_on_mllib_predictions(classification_data,
                                                                  label, weighted):
    df = classification_data[0]
    weight = {"weightCol": "weight"} if weighted else {}
    mllib = LogisticRegression(labelCol=label, regParam=0.05, **weight).fit(df)
    theirs = mllib.summary
    columns = dict(predictions=mllib.transform(df), labelCol=label,
                   predictionCol="prediction", featuresCol="features",
                   weightCol="weight" if weighted else None, probabilityCol="probability")
    if label == "multi":
        ours = ClassificationSummary(**columns)
    else:
        ours = BinaryClassificationSummary(scoreCol="probability", **columns)
        # 500 rows: fewer distinct scores than MLlib bins, so the curves are exact
        for curve in CURVES:
            np.testing.assert_allclose(_curve(getattr(ours, curve)),
                                       _curve(getattr(theirs, curve)), rtol=1e-12,
                                       err_msg=curve)
        assert ours.areaUnderROC == pytest.approx(theirs.areaUnderROC, rel=1e-12)
    _same(ours, theirs, CLASSIFICATION_FIELDS)
    for beta in (1.0, 0.5):
        np.testing.assert_allclose(ours.fMeasureByLabel(beta), theirs.fMeasureByLabel(beta),
                                   rtol=1e-12)
        assert ours.weightedFMeasure(beta) == pytest.approx(theirs.weightedFMeasure(beta),
                                                            rel=1e-12)


def test_binned_curves_follow_mllib_on_many_distinct_scores(spark):
    """5,000 distinct margins: both sides bin to ~1,000 points; MLlib groups inside its
    sort's partitions, we over the global order, so areas agree closely, not exactly."""
    g = np.random.default_rng(3)
    X = g.normal(size=(5000, 3))
    y = (X @ [1.0, -2.0, 0.5] + g.logistic(size=5000) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"])
    mllib = LinearSVC(regParam=0.1).fit(df)
    theirs = mllib.summary()
    ours = BinaryClassificationSummary(mllib.transform(df), "label", "prediction", "features",
                                       None, scoreCol="rawPrediction")
    assert abs(ours.roc.count() - theirs.roc.count()) <= 3
    assert 1000 <= ours.roc.count() <= 1003
    assert ours.areaUnderROC == pytest.approx(theirs.areaUnderROC, abs=2e-4)
    exact = np.mean((X @ mllib.coefficients.toArray())[y == 1][:, None]
                    > (X @ mllib.coefficients.toArray())[y == 0][None, :])
    assert ours.areaUnderROC == pytest.approx(exact, abs=1e-3)  # Mann-Whitney U


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_regression_metrics_equal_mllib_on_mllib_predictions(regression_data, fit_intercept):
    df = regression_data[0]
    mllib = LinearRegression(regParam=0.1, weightCol="weight", solver="l-bfgs",
                             fitIntercept=fit_intercept).fit(df)
    ours = RegressionSummary(mllib.transform(df), "label", "prediction", "features", "weight",
                             numCoefficients=4, fitIntercept=fit_intercept)
    _same(ours, mllib.summary, REGRESSION_FIELDS, rtol=1e-10)
    np.testing.assert_allclose(_curve(ours.residuals)[:, 0],
                               _curve(mllib.summary.residuals)[:, 0], rtol=1e-12)
    with pytest.raises(NotImplementedError, match="normal"):
        ours.coefficientStandardErrors


@pytest.mark.parametrize("estimator,label,kind", [
    (SGDLogisticRegression(regParam=0.05, weightCol="weight"), "label", "binary"),
    (SGDLogisticRegression(regParam=0.05, weightCol="weight", labelCol="multi"), "multi",
     "multiclass"),
    (SGDLinearSVC(regParam=0.05), "label", "binary"),
])
def test_fitted_classifier_summary_is_its_evaluation_on_the_training_data(
        classification_data, estimator, label, kind):
    df, _, binary, multi, weight = classification_data
    model = estimator.fit(df)
    summary, evaluated = training_summary(model), model.evaluate(df)
    assert type(evaluated) is (BinaryClassificationSummary if kind == "binary"
                               else ClassificationSummary)
    assert summary.objectiveHistory and summary.totalIterations > 0
    _same(summary, evaluated, CLASSIFICATION_FIELDS)
    # numpy on the collected predictions
    rows = model.transform(df).select(label, "prediction", "weight").collect()
    truth, predicted, w = (np.array(c, dtype=float) for c in zip(*rows))
    if not model.isSet(model.weightCol):
        w = np.ones_like(w)
    assert summary.accuracy == pytest.approx(np.sum(w * (truth == predicted)) / w.sum())
    if kind == "binary":
        assert summary.asBinary is summary
        assert summary.areaUnderROC == pytest.approx(evaluated.areaUnderROC, rel=1e-12)
        assert 0.7 < summary.areaUnderROC <= 1.0
    else:
        with pytest.raises(TypeError):
            summary.asBinary


def test_fitted_regression_summary_matches_numpy(regression_data):
    df, X, y, weight = regression_data
    model = SGDLinearRegression(regParam=0.0, weightCol="weight", tol=1e-10).fit(df)
    s = model.summary
    prediction = X @ model.coefficients.toArray() + model.intercept
    residual = y - prediction
    w = weight
    assert s.meanSquaredError == pytest.approx(np.sum(w * residual**2) / w.sum(), rel=1e-9)
    assert s.meanAbsoluteError == pytest.approx(np.sum(w * abs(residual)) / w.sum(), rel=1e-9)
    assert s.numInstances == len(y) and s.degreesOfFreedom == len(y) - 5
    # with unit-ish weights the weighted R^2 is close to the textbook one
    assert s.r2 == pytest.approx(1 - np.sum(w * residual**2)
                                 / np.sum(w * (y - np.average(y, weights=w))**2), rel=1e-3)
    assert model.evaluate(df).r2 == pytest.approx(s.r2, rel=1e-12)


def test_single_vector_predictions_equal_transform(classification_data, regression_data):
    df = classification_data[0]
    rows = df.limit(5).collect()
    checks = [
        (SGDLogisticRegression(regParam=0.05).fit(df),
         ("rawPrediction", "predictRaw"), ("probability", "predictProbability")),
        (SGDLogisticRegression(regParam=0.05, labelCol="multi").fit(df),
         ("rawPrediction", "predictRaw"), ("probability", "predictProbability")),
        (SGDLinearSVC(regParam=0.05).fit(df), ("rawPrediction", "predictRaw")),
    ]
    for model, *outputs in checks:
        transformed = model.transform(df.limit(5)).collect()
        for row, out in zip(rows, transformed):
            assert model.predict(row.features) == out.prediction
            for column, method in outputs:
                np.testing.assert_allclose(getattr(model, method)(row.features).toArray(),
                                           out[column].toArray(), rtol=1e-14)
        with pytest.raises(ValueError, match="size 3; this model was fitted on 5"):
            model.predict(Vectors.dense([1.0, 2.0, 3.0]))
    regression = SGDLinearRegression().fit(regression_data[0])
    x = regression_data[1][0]
    assert regression.predict(Vectors.dense(x)) == pytest.approx(
        x @ regression.coefficients.toArray() + regression.intercept, rel=1e-14)


def test_thresholds_pick_the_largest_scaled_probability(classification_data):
    df = classification_data[0]
    thresholds = [0.2, 0.5, 0.3]
    lr = SGDLogisticRegression(regParam=0.05, labelCol="multi", thresholds=thresholds)
    model = lr.fit(df)
    assert model.numClasses == 3
    rows = model.transform(df).select("probability", "prediction").collect()
    p = np.array([r.probability.toArray() for r in rows])
    expected = np.argmax(p / thresholds, axis=1)
    np.testing.assert_array_equal([r.prediction for r in rows], expected)
    assert (expected != np.argmax(p, axis=1)).any()  # the thresholds changed something
    # MLlib agrees on the rule, given the same probabilities
    mllib = LogisticRegression(regParam=0.05, labelCol="multi", thresholds=thresholds).fit(df)
    theirs = mllib.transform(df).select("probability", "prediction").collect()
    q = np.array([r.probability.toArray() for r in theirs])
    np.testing.assert_array_equal([r.prediction for r in theirs], np.argmax(q / thresholds, 1))
    with pytest.raises(ValueError, match="thresholds has 2 entries; .* 3 classes"):
        SGDLogisticRegression(labelCol="multi", thresholds=[0.5, 0.5]).fit(df)


def test_transform_runs_on_a_streaming_dataframe(spark, classification_data, tmp_path):
    """Structured Streaming: predictions on a stream equal numpy's on the same rows."""
    model = SGDLogisticRegression(regParam=0.05).fit(classification_data[0])
    rows = transform_stream(spark, model, classification_data[0], tmp_path,
                            ["probability", "prediction"])
    assert len(rows) == 40
    x = np.array([r.x for r in rows])
    p = 1 / (1 + np.exp(-(x @ model.coefficients.toArray() + model.intercept)))
    np.testing.assert_allclose([r.probability[1] for r in rows], p, rtol=1e-12)
    np.testing.assert_array_equal([r.prediction for r in rows], (p > 0.5).astype(float))


def test_transform_scores_dense_sparse_and_null_rows_alike(spark, classification_data):
    """The batch scorer reads mixed dense/sparse rows (and nulls) from the Arrow buffers:
    every output equals numpy's; a null features row gets null outputs; a vector of the
    wrong size is named."""
    from pyspark.sql.types import DoubleType, StructField, StructType
    from pyspark.ml.linalg import VectorUDT

    model = SGDLogisticRegression(regParam=0.05, labelCol="multi").fit(classification_data[0])
    g = np.random.default_rng(9)
    X = g.normal(size=(30, 5)) * (g.random((30, 5)) < 0.5)
    rows = []
    for i, x in enumerate(X):
        if i % 3 == 0:
            rows.append((Vectors.sparse(5, np.flatnonzero(x).tolist(),
                                        x[np.flatnonzero(x)].tolist()), 1.0))
        else:
            rows.append((Vectors.dense(x), 1.0))
    rows.append((None, 1.0))
    schema = StructType([StructField("features", VectorUDT()), StructField("other", DoubleType())])
    df = spark.createDataFrame(rows, schema).coalesce(1)
    out = model.transform(df).collect()
    assert [r.other for r in out] == [1.0] * 31  # other columns pass through
    margins = X @ model.coefficientMatrix.toArray().T + model.interceptVector.toArray()
    p = np.exp(margins - margins.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose([r.rawPrediction.toArray() for r in out[:30]], margins,
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose([r.probability.toArray() for r in out[:30]], p, rtol=1e-12)
    np.testing.assert_array_equal([r.prediction for r in out[:30]], p.argmax(1))
    assert out[30].prediction is None and out[30].probability is None
    wrong = spark.createDataFrame([(Vectors.dense([1.0, 2.0]),)], ["features"])
    with pytest.raises(Exception, match="holds a vector of size 2; the model was fitted on 5"):
        model.transform(wrong).collect()
