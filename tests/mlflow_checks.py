"""MLflow with a real local tracking store (sqlite, made per test), no mocks.

Run by tests/test_mlflow.py in a pytest process of its own: MLflow's autolog
patches pyspark.ml for the rest of the process, and later tests on the shared
session saw transforms return rows in another order.

``mlflow.pyspark.ml.autolog()`` logs our Params by itself (it patches
``Estimator.fit``); with the packaged allowlist it logs our models too, and our
fits add the loss curve and the training summary's metrics. ``mlflow.spark``
round-trips a Pipeline with our stages, and a ``toMLlib()`` export.
"""

from __future__ import annotations

import numpy as np
import pytest

mlflow = pytest.importorskip("mlflow", reason="MLflow is an optional extra")

from pyspark.ml import Pipeline  # noqa: E402
from pyspark.ml.feature import StandardScaler  # noqa: E402

from gradspark import SGDLinearRegression, SGDLogisticRegression  # noqa: E402
from gradspark.integrations import mlflow_tracking  # noqa: E402


@pytest.fixture
def tracking(tmp_path, spark):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    # Artifacts under tmp_path too (a sqlite store's default is ./mlruns, in the cwd).
    mlflow.set_experiment(experiment_id=mlflow.create_experiment(
        "gradspark-tests", artifact_location=(tmp_path / "artifacts").as_uri()))
    yield mlflow.MlflowClient()
    mlflow.pyspark.ml.autolog(disable=True)
    spark.sparkContext._conf._jconf.remove(mlflow_tracking.ALLOWLIST_CONF)
    mlflow.set_tracking_uri("")


def _artifacts(client, run_id):
    return {a.path for a in client.list_artifacts(run_id)}


def test_autolog_logs_our_params_loss_curve_metrics_and_a_loadable_model(
        tracking, spark, classification_data):
    df = classification_data[0]
    assert mlflow_tracking.use_mlflow_allowlist(spark) == mlflow_tracking.ALLOWLIST_FILE
    mlflow.pyspark.ml.autolog(log_datasets=False)
    model = SGDLogisticRegression(regParam=0.05, maxIter=40).fit(df)
    run = mlflow.last_active_run()
    data = tracking.get_run(run.info.run_id).data
    assert data.params["regParam"] == "0.05" and data.params["maxIter"] == "40"
    curve = tracking.get_metric_history(run.info.run_id, "training_loss")
    assert [m.step for m in curve] == list(range(len(model.summary.objectiveHistory)))
    np.testing.assert_allclose([m.value for m in curve], model.summary.objectiveHistory)
    assert data.metrics["training_accuracy"] == pytest.approx(model.summary.accuracy)
    assert data.metrics["training_areaUnderROC"] == pytest.approx(model.summary.areaUnderROC)
    assert "model" in _artifacts(tracking, run.info.run_id)
    loaded = mlflow.spark.load_model(f"runs:/{run.info.run_id}/model")
    ours = model.transform(df).select("prediction", "probability").collect()
    theirs = loaded.transform(df).select("prediction", "probability").collect()
    assert [r.prediction for r in theirs] == [r.prediction for r in ours]
    np.testing.assert_allclose([r.probability[1] for r in theirs],
                               [r.probability[1] for r in ours], rtol=1e-12)


def test_without_the_allowlist_autolog_skips_our_model_and_the_list_keeps_mlflows(
        tracking, spark, regression_data):
    df = regression_data[0]
    mlflow.pyspark.ml.autolog(log_datasets=False)  # MLflow's own list only
    SGDLinearRegression(maxIter=5, solver="l-bfgs").fit(df)
    run = mlflow.last_active_run()
    assert "model" not in _artifacts(tracking, run.info.run_id)
    # Regression metrics logged all the same (the curve and summary are ours).
    assert "training_rootMeanSquaredError" in tracking.get_run(run.info.run_id).data.metrics
    # Our file replaces MLflow's when set, so it must carry every default entry.
    import mlflow.pyspark.ml as autolog_module

    def entries(path):
        return {line.strip() for line in open(path)
                if line.strip() and not line.startswith("#")}

    defaults = entries(autolog_module.__file__.replace("__init__.py",
                                                       "log_model_allowlist.txt"))
    assert defaults <= entries(mlflow_tracking.ALLOWLIST_FILE)


def test_log_model_round_trips_a_pipeline_and_an_mllib_export(tracking, spark,
                                                              classification_data):
    df = classification_data[0]
    pipeline = Pipeline(stages=[StandardScaler(inputCol="features", outputCol="scaled"),
                                SGDLogisticRegression(featuresCol="scaled", maxIter=20)])
    fitted = pipeline.fit(df)
    # Requirements given, as a user logging a library's model would: MLflow's inference
    # of them reloads each model in a new Spark driver (~20 s each), which autolog's
    # check above already exercises.
    requirements = ["pyspark", "gradspark"]
    with mlflow.start_run() as run:
        mlflow.spark.log_model(fitted, artifact_path="pipeline", pip_requirements=requirements)
        mlflow.spark.log_model(fitted.stages[-1].toMLlib(), artifact_path="mllib",
                               pip_requirements=["pyspark"])
    scaled = fitted.stages[0].transform(df).cache()
    want = fitted.stages[-1].transform(scaled).select("probability").collect()
    for name, frame in (("pipeline", df), ("mllib", scaled)):
        loaded = mlflow.spark.load_model(f"runs:/{run.info.run_id}/{name}")
        got = loaded.transform(frame).select("probability").collect()
        np.testing.assert_allclose(sorted(r.probability[1] for r in got),
                                   sorted(r.probability[1] for r in want), rtol=1e-12,
                                   err_msg=name)
