"""The estimators on a Spark Connect session (``SparkSession.builder.remote("local[2]")``).

Prints one RESULT line of JSON. Run by test_connect.py in its own process: a
local Connect server starts its own Spark driver, which cannot share a
process with the suite's classic session. The references are computed here
too, on the same Connect DataFrames (MLlib's estimators, which run server
side) or in numpy/torch; the classic-session comparison happens in the test.
"""

import json
import logging
import tempfile

import numpy as np

from job_support import logistic_frame  # sets PYSPARK_PYTHON first
import torch  # noqa: E402
from pyspark.ml import Pipeline, PipelineModel  # noqa: E402
from pyspark.ml.classification import LinearSVC, LogisticRegression  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.ml.regression import LinearRegression  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from gradspark import (SGDLinearRegression, SGDLinearSVC, SGDLogisticRegression,  # noqa: E402
                       SGDLogisticRegressionModel, TorchEstimator)
from gradspark.data.validation import InvalidDataError  # noqa: E402
from torch_support import (full_batch_reference, regression_arrays, sgd,  # noqa: E402
                           small_regressor, state_arrays)

#: The classification data (job_support.logistic_frame), shared with test_connect.py.
DATA = dict(seed=11, rows=600, partitions=3)
TIGHT = dict(tol=1e-10, maxIter=300)
FULL = dict(optimizer="sgd", stepSize=0.5, maxIter=15, tol=0.0, regParam=0.01)
MINI = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.5, maxIter=20, tol=0.0,
            regParam=0.01, seed=3)


def flat(model):
    return [*model.coefficients.toArray(), model.intercept]


def metrics(summary):
    """Fields of a binary summary, for the classic-session comparison."""
    return [summary.areaUnderROC, summary.accuracy, summary.weightedFMeasure(),
            summary.precisionByThreshold.count()]


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("gradspark.estimators.base").setLevel(logging.INFO)
    spark = (SparkSession.builder.remote("local[2]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    try:
        print("RESULT " + json.dumps(run(spark)), flush=True)
    finally:
        spark.stop()  # a live Connect server would keep this process (and its port) alive


def run(spark) -> dict:
    out = {"session": type(spark).__module__}
    df, X, y = logistic_frame(spark, **DATA)
    targets = X @ [0.5, -1.0, 2.0, 0.1] + 3.0 + np.random.default_rng(2).normal(size=len(X))
    rdf = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, targets)],
                                ["features", "label"]).repartition(3).cache()

    # 1. MLlib agreement, on the same Connect DataFrames.
    ours = SGDLogisticRegression(regParam=0.01, **TIGHT).fit(df)
    ref = LogisticRegression(regParam=0.01, **TIGHT).fit(df)
    out["logistic"], out["logistic_mllib"] = flat(ours), flat(ref)
    out["strategy"] = ours.summary.extra["executionStrategy"]
    out["summary"], out["evaluate"] = metrics(ours.summary), metrics(ours.evaluate(df))
    ours_p = ours.transform(df).select("probability").collect()
    ref_p = ref.transform(df).select("probability").collect()
    out["probability"] = [r[0][1] for r in ours_p]
    out["probability_mllib"] = [r[0][1] for r in ref_p]
    out["linear"] = flat(SGDLinearRegression(regParam=0.1, elasticNetParam=0.5,
                                             solver="l-bfgs", **TIGHT).fit(rdf))
    out["linear_mllib"] = flat(LinearRegression(regParam=0.1, elasticNetParam=0.5,
                                                solver="l-bfgs", **TIGHT).fit(rdf))
    # MLlib's own tolerances for the hinge loss: at 1e-10 its OWL-QN runs all 300
    # iterations (a Spark job each) for no closer agreement (tests/test_svc.py)
    out["svc"] = flat(SGDLinearSVC(regParam=0.01).fit(df))
    out["svc_mllib"] = flat(LinearSVC(regParam=0.01).fit(df))

    # 2. The same full-batch fit on every strategy; the test compares it with classic.
    for strategy in ("jobPerStep", "resident"):
        model = SGDLogisticRegression(executionStrategy=strategy, **FULL).fit(df)
        out[f"full_{strategy}"] = flat(model)
        out[f"full_{strategy}_history"] = model.summary.objectiveHistory

    # 3. Async: maxStaleness=0 is sync's steps; SSP trains. Sharded servers too.
    out["mini_sync"] = flat(SGDLogisticRegression(executionStrategy="resident", **MINI).fit(df))
    # async mode does not average its iterates: compare its steps with sync's last iterate
    out["mini_sync_last"] = flat(SGDLogisticRegression(executionStrategy="resident",
                                                       iterateAveraging="none", **MINI).fit(df))
    bsp = SGDLogisticRegression(mode="async", maxStaleness=0, **MINI).fit(df)
    out["mini_bsp"] = flat(bsp)
    ssp = SGDLogisticRegression(mode="async", maxStaleness=2, **MINI).fit(df)
    out["ssp_history"] = ssp.summary.objectiveHistory
    out["ssp_strategy"] = ssp.summary.extra["executionStrategy"]
    raw = dict(MINI, parameterSpace="raw")  # shards need uncentered parameters
    out["raw_bsp"] = flat(SGDLogisticRegression(mode="async", maxStaleness=0, **raw).fit(df))
    out["raw_sharded"] = flat(SGDLogisticRegression(parameterServers=2, **raw).fit(df))

    with tempfile.TemporaryDirectory() as tmp:
        # 4. Checkpoints from the Connect client: 10 steps, then resumed to 20.
        checkpointed = dict(MINI, checkpointDir=f"{tmp}/ckpt", checkpointInterval=5)
        SGDLogisticRegression(**dict(checkpointed, maxIter=10)).fit(df)
        resumed = SGDLogisticRegression(**checkpointed).fit(df)
        out["resumed"] = flat(resumed)
        out["resumed_from"] = resumed.summary.extra["resumedFromStep"]

        # 5. Persistence: a Pipeline round trip, and overwrite() on Connect.
        pipeline = Pipeline(stages=[SGDLogisticRegression(regParam=0.01)]).fit(df)
        pipeline.write().save(f"{tmp}/pipeline")
        loaded = PipelineModel.load(f"{tmp}/pipeline")
        out["pipeline_before"] = [r[0][1] for r in pipeline.transform(df).select(
            "rawPrediction").collect()]
        out["pipeline_after"] = [r[0][1] for r in loaded.transform(df).select(
            "rawPrediction").collect()]
        ours.write().save(f"{tmp}/model")
        bsp.write().overwrite().save(f"{tmp}/model")
        out["overwritten"] = flat(SGDLogisticRegressionModel.load(f"{tmp}/model"))
        SGDLogisticRegression(maxIter=7, regParam=0.5).write().save(f"{tmp}/estimator")
        estimator = SGDLogisticRegression.load(f"{tmp}/estimator")
        out["estimator_params"] = [estimator.getMaxIter(), estimator.getRegParam()]

    # 6. Drop-in on Connect: MLlib's Params and defaults, default Params' fits, toMLlib.
    problems = {}
    for mllib_cls, our_cls in ((LogisticRegression, SGDLogisticRegression),
                               (LinearRegression, SGDLinearRegression),
                               (LinearSVC, SGDLinearSVC)):
        theirs, mine = mllib_cls(), our_cls()
        found = []
        for param in theirs.params:
            if not mine.hasParam(param.name):
                found.append(f"no {param.name}")
                continue
            counterpart = mine.getParam(param.name)
            if counterpart.doc != param.doc:
                found.append(f"doc of {param.name}")
            if theirs.hasDefault(param) and (not mine.hasDefault(counterpart) or
                                             mine.getOrDefault(counterpart)
                                             != theirs.getOrDefault(param)):
                found.append(f"default of {param.name}")
            setter = "set" + param.name[0].upper() + param.name[1:]
            if hasattr(theirs, setter) and not hasattr(mine, setter):
                found.append(f"no {setter}")
        problems[mllib_cls.__name__] = found
    out["dropin_problems"] = problems
    default = SGDLogisticRegression(regParam=0.01).fit(df)
    out["default_logistic"] = flat(default)
    out["default_logistic_mllib"] = flat(LogisticRegression(regParam=0.01).fit(df))
    normal, normal_mllib = (SGDLinearRegression(regParam=0.1).fit(rdf),
                            LinearRegression(regParam=0.1).fit(rdf))
    out["default_linear"], out["default_linear_mllib"] = flat(normal), flat(normal_mllib)
    out["default_linear_errors"] = normal.summary.coefficientStandardErrors
    out["default_linear_errors_mllib"] = normal_mllib.summary.coefficientStandardErrors
    exported = default.toMLlib()
    out["exported"] = [type(exported).__name__, exported.uid == default.uid]
    out["exported_probability"] = [r[0][1] for r in exported.transform(df).select(
        "probability").collect()]
    out["default_probability"] = [r[0][1] for r in default.transform(df).select(
        "probability").collect()]

    # 7. Bad input is named, as on a classic session.
    bad = spark.createDataFrame([(Vectors.dense(x), 1.0) for x in X[:5]]
                                + [(Vectors.dense([np.nan, 0, 0, 0]), 1.0)],
                                ["features", "label"])
    try:
        SGDLogisticRegression().fit(bad)
        out["nan_error"] = None
    except InvalidDataError as error:
        out["nan_error"] = error.message

    # 8. TorchEstimator: two ranks take the single-process full-batch steps.
    tX, ty = regression_arrays(301)
    tdf = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(tX, ty)],
                                ["features", "label"])
    torch_model = TorchEstimator(small_regressor, torch.nn.MSELoss(), sgd(0.2), numWorkers=2,
                                 batchSize=1000, epochs=10, seed=5).fit(tdf)
    reference = full_batch_reference(small_regressor, tX, ty, lr=0.2, epochs=10, seed=5)
    trained = state_arrays(torch_model.module())
    out["torch_max_diff"] = max(float(np.abs(trained[k] - v).max()) for k, v in reference.items())
    first = torch_model.transform(tdf.limit(3)).collect()
    with torch.no_grad():
        direct = torch_model.module()(torch.tensor(
            np.stack([r.features.toArray() for r in first]), dtype=torch.float32)).numpy()[:, 0]
    out["torch_prediction_diff"] = float(np.abs(
        np.array([r.prediction for r in first]) - direct).max())
    return out


if __name__ == "__main__":
    main()
