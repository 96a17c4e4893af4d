"""Pipeline, CrossValidator, evaluators and persistence, with MLlib's own components."""

import numpy as np
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.evaluation import (
    BinaryClassificationEvaluator, MulticlassClassificationEvaluator, RegressionEvaluator,
)
from pyspark.ml.feature import StandardScaler
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

from gradspark import (
    SGDLinearRegression, SGDLinearRegressionModel, SGDLinearSVC, SGDLinearSVCModel,
    SGDLogisticRegression, SGDLogisticRegressionModel,
)


def test_evaluators_score_like_mllib(classification_data):
    df = classification_data[0]
    ours = SGDLogisticRegression(regParam=0.05, labelCol="multi").fit(df).transform(df)
    ref = LogisticRegression(regParam=0.05, labelCol="multi").fit(df).transform(df)
    for metric in ("accuracy", "f1", "logLoss"):
        ev = MulticlassClassificationEvaluator(labelCol="multi", metricName=metric)
        assert ev.evaluate(ours) == pytest.approx(ev.evaluate(ref), abs=1e-4)
    auc = BinaryClassificationEvaluator()
    bin_ours = SGDLogisticRegression(regParam=0.05).fit(df).transform(df)
    bin_ref = LogisticRegression(regParam=0.05).fit(df).transform(df)
    assert auc.evaluate(bin_ours) == pytest.approx(auc.evaluate(bin_ref), abs=1e-6)
    assert auc.evaluate(SGDLinearSVC(regParam=0.05).fit(df).transform(df)) > 0.75


def test_regression_evaluator(regression_data):
    df, X, y, _ = regression_data
    pred = SGDLinearRegression().fit(df).transform(df)
    A = np.column_stack([X, np.ones(len(y))])
    residual = y - A @ np.linalg.lstsq(A, y, rcond=None)[0]
    rmse = RegressionEvaluator(metricName="rmse").evaluate(pred)
    assert rmse == pytest.approx(np.sqrt(np.mean(residual**2)), rel=1e-6)


def test_pipeline_round_trips_through_save_and_load(classification_data, tmp_path):
    df = classification_data[0].withColumnRenamed("features", "raw")
    pipeline = Pipeline(stages=[
        StandardScaler(inputCol="raw", outputCol="features"),
        SGDLogisticRegression(regParam=0.05, labelCol="multi", weightCol="weight"),
    ])
    fitted = pipeline.fit(df)
    path = str(tmp_path / "pipeline")
    fitted.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    model = loaded.stages[-1]
    assert isinstance(model, SGDLogisticRegressionModel)
    assert model.uid == fitted.stages[-1].uid
    assert model.getWeightCol() == "weight" and model.getRegParam() == 0.05
    np.testing.assert_array_equal(model.coefficientMatrix.toArray(),
                                  fitted.stages[-1].coefficientMatrix.toArray())
    before = [r.probability for r in fitted.transform(df).select("probability").collect()]
    after = [r.probability for r in loaded.transform(df).select("probability").collect()]
    assert before == after
    # the unfitted pipeline (with our estimator) persists too
    reloaded = Pipeline.load(_saved(pipeline, tmp_path / "unfitted"))
    assert reloaded.getStages()[1].getRegParam() == 0.05


def _saved(stage, path):
    stage.write().overwrite().save(str(path))
    return str(path)


@pytest.mark.parametrize("estimator,model_cls,label", [
    (SGDLinearRegression(loss="huber", regParam=0.1), SGDLinearRegressionModel, "label"),
    (SGDLinearSVC(regParam=0.1), SGDLinearSVCModel, "label"),
])
def test_models_save_and_load(spark, classification_data, regression_data, tmp_path,
                              estimator, model_cls, label):
    df = regression_data[0] if model_cls is SGDLinearRegressionModel else classification_data[0]
    model = estimator.fit(df)
    loaded = model_cls.load(_saved(model, tmp_path / "m"))
    np.testing.assert_array_equal(loaded.coefficients.toArray(), model.coefficients.toArray())
    assert loaded.intercept == model.intercept
    assert not loaded.hasSummary
    if model_cls is SGDLinearRegressionModel:
        assert loaded.scale == model.scale and loaded.getLoss() == "huber"
    est = type(estimator).load(_saved(estimator, tmp_path / "e"))
    assert est.getRegParam() == 0.1 and est.uid == estimator.uid


def test_cross_validator_selects_like_mllib(classification_data):
    df = classification_data[0]

    def best(estimator):
        grid = ParamGridBuilder().addGrid(estimator.regParam, [0.001, 0.5]).build()
        cv = CrossValidator(estimator=estimator, estimatorParamMaps=grid, numFolds=2,
                            evaluator=BinaryClassificationEvaluator(), seed=3, parallelism=2)
        fitted = cv.fit(df)
        return fitted.bestModel.getRegParam(), fitted.avgMetrics

    ours, ours_metrics = best(SGDLogisticRegression())
    ref, ref_metrics = best(LogisticRegression())
    assert ours == ref
    np.testing.assert_allclose(ours_metrics, ref_metrics, atol=1e-4)


def test_params_are_real_pyspark_params():
    lr = SGDLogisticRegression(maxIter=7, optimizer="adam")
    assert lr.getMaxIter() == 7 and lr.getOptimizer() == "adam"
    assert lr.getSeed() == SGDLogisticRegression().getSeed()  # stable default seed
    assert lr.copy({lr.regParam: 0.3}).getRegParam() == 0.3
    assert "miniBatchFraction" in lr.explainParams()
    with pytest.raises(ValueError, match="optimizer"):
        SGDLogisticRegression(optimizer="newton")
