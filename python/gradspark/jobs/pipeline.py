"""What a batch job does: read the source, assemble the features into a Pipeline with the
estimator, fit and evaluate (train), or score (predict), and write the results."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Dict, List

from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import (
    BinaryClassificationEvaluator, MulticlassClassificationEvaluator, RegressionEvaluator,
)
from pyspark.ml.feature import OneHotEncoder, StringIndexer, VectorAssembler
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import NumericType, StringType

from gradspark.connect import is_connect
from gradspark.report import loss_plot_png
from gradspark.summaries import training_summary
from gradspark.jobs.checks import (PREDICTIONS_MARKER, UsageError, _estimators, _torch_estimator,
                                   guard_output, require_complete)

logger = logging.getLogger("gradspark.cli")


FEATURES = "features"


def read_source(spark: SparkSession, job: dict) -> DataFrame:
    """The job's data: a path, a table or a SQL query."""
    if job.get("sql"):
        return spark.sql(job["sql"])
    if job.get("table"):
        return spark.table(job["table"])
    path = job["input"]
    fmt = job.get("format") or path.rstrip("/").rsplit(".", 1)[-1].lower()
    if fmt == "csv":
        return spark.read.csv(path, header=True, inferSchema=True)
    if fmt not in ("parquet", "json", "orc"):
        fmt = "parquet"
    return spark.read.format(fmt).load(path)


def feature_stages(df: DataFrame, columns: List[str]) -> list:
    """Index and one-hot encode string columns, then assemble everything into ``features``."""
    kinds = {f.name: f.dataType for f in df.schema.fields}
    missing = [c for c in columns if c not in kinds]
    if missing:
        raise UsageError(f"feature columns {missing} not found; the data has {sorted(kinds)}")
    categorical = [c for c in columns if isinstance(kinds[c], StringType)]
    other = [c for c in columns if c not in categorical
             and not isinstance(kinds[c], (NumericType, VectorUDT))]
    if other:
        raise UsageError(f"feature columns {other} are neither numeric, string nor vector")
    stages: list = []
    assembled = []
    if categorical:
        indexed = [f"{c}__index" for c in categorical]
        encoded = [f"{c}__onehot" for c in categorical]
        stages += [StringIndexer(inputCols=categorical, outputCols=indexed, handleInvalid="keep"),
                   OneHotEncoder(inputCols=indexed, outputCols=encoded, handleInvalid="keep")]
    for c in columns:
        assembled.append(f"{c}__onehot" if c in categorical else c)
    # handleInvalid="keep": NaN reaches the estimator, whose error names the column.
    stages.append(VectorAssembler(inputCols=assembled, outputCol=FEATURES, handleInvalid="keep"))
    return stages


def _evaluators(kind: str, label: str, binary: bool) -> Dict[str, object]:
    if kind == "linear":
        return {m: RegressionEvaluator(labelCol=label, metricName=m) for m in ("rmse", "r2", "mae")}
    metrics: Dict[str, object] = {
        m: MulticlassClassificationEvaluator(labelCol=label, metricName=m)
        for m in ("accuracy", "f1")}
    if binary:
        metrics["areaUnderROC"] = BinaryClassificationEvaluator(labelCol=label)
    return metrics


def train(spark: SparkSession, job: dict) -> dict:
    """Fit, evaluate and save; returns the metrics written to metrics.json."""
    guard_output(spark, job)
    estimators = _estimators()
    kind = job["model"]
    df = read_source(spark, job)
    label, weight = job["label"], job.get("weight")
    for role, column in (("label", label), ("weight", weight)):
        if column and column not in df.columns:
            raise UsageError(f"{role} column {column!r} not found; the data has "
                             f"{sorted(df.columns)}")
    features = job.get("features")
    if isinstance(features, str):
        features = [c.strip() for c in features.split(",") if c.strip()]
    features = features or [c for c in df.columns if c not in (label, weight)]
    for role, column in (("label", label), ("weight", weight)):
        if column in features:
            raise UsageError(f"the {role} column {column!r} is among --features: a model "
                             f"would be given its own answer; leave it out of --features")
    missing = [c for c in features if c not in df.columns]
    if missing:
        raise UsageError(f"feature columns {missing} not found; the data has "
                         f"{sorted(df.columns)}")
    require_complete(df, [c for c in features if isinstance(df.schema[c].dataType,
                                                            NumericType)]
                     + [c for c in (label, weight) if c])
    params = dict(job["params"], labelCol=label, featuresCol=FEATURES)
    if weight and kind == "torch":
        raise UsageError("--weight is not supported with --model torch")
    if weight:
        params["weightCol"] = weight
    try:
        if kind == "torch":
            estimator = _torch_estimator(job.get("torch")).setParams(**params)
        else:
            estimator = estimators[kind](**params)
    except (TypeError, ValueError) as error:
        raise UsageError(f"bad --param for {kind}: {error}") from None
    fraction = float(job["test_fraction"])
    if not 0.0 <= fraction < 1.0:
        raise UsageError(f"--test-fraction must be in [0, 1), got {fraction}")
    train_df, test_df = (df.randomSplit([1 - fraction, fraction], seed=int(job["seed"]))
                         if fraction > 0 else (df, df))
    _phase(f"fitting {kind} on {', '.join(features)} (a pass over the data, then the steps)")
    model = Pipeline(stages=feature_stages(df, features) + [estimator]).fit(train_df)
    fitted = model.stages[-1]
    _phase("evaluating on the held-out split" if fraction > 0 else "evaluating")
    # Cached: each metric is a pass, and the split would be re-read and re-scored.
    scored = model.transform(test_df).cache()
    family = ("linear" if kind == "torch" and fitted.getLabelDtype() != "int64" else kind)
    binary = kind == "svc" or (kind == "logistic" and fitted.numClasses == 2)
    try:
        metrics = {name: evaluator.evaluate(scored)
                   for name, evaluator in _evaluators(family, label, binary).items()}
    finally:
        scored.unpersist()
    summary = training_summary(fitted) if fitted.hasSummary else None
    history = list(summary.objectiveHistory) if summary is not None else []
    report = {"model": kind, "metrics": metrics, "heldOutFraction": fraction,
              "features": features, "params": job["params"], "lossHistory": history,
              # torch: one loss per epoch
              "iterations": getattr(summary, "totalIterations", len(history))
              if summary is not None else None}
    _phase(f"saving to {job['output']}")
    model.write().overwrite().save(job["output"])
    output = job["output"].rstrip("/")
    write_file(spark, output + "/metrics.json", json.dumps(report, indent=2).encode("utf-8"))
    if report["lossHistory"]:
        try:
            png = loss_plot_png(report["lossHistory"], f"gradspark {kind}: training loss")
            write_file(spark, output + "/loss.png", png)
        except ImportError as missing:  # the optional plot extra
            logger.warning("no loss.png: %s", missing)
    return report


def _phase(text: str) -> None:
    """Where the job is: logged, and shown on an interactive terminal (the training steps
    draw their own bar there, :class:`gradspark.integrations.progress.Progress`)."""
    logger.info("%s", text)
    if sys.stderr.isatty() and not logger.isEnabledFor(logging.INFO):
        print(f"gradspark: {text} ...", file=sys.stderr, flush=True)


def predict(spark: SparkSession, job: dict) -> dict:
    guard_output(spark, job)
    model = PipelineModel.load(job["model"])
    scored = model.transform(read_source(spark, job))
    keep = [c for c in scored.columns if c != FEATURES and not c.endswith(("__index",
                                                                           "__onehot"))]
    scored.select(*keep).write.mode("overwrite").parquet(job["output"])
    write_file(spark, job["output"].rstrip("/") + "/" + PREDICTIONS_MARKER, b"")
    return {"output": job["output"], "rows": spark.read.parquet(job["output"]).count()}


def write_file(spark: SparkSession, path: str, data: bytes) -> None:
    """A small file on any Hadoop filesystem (local, HDFS, S3A...); from a Spark Connect
    client, which has no JVM, through ``pyarrow.fs`` (local, HDFS, S3, GCS)."""
    if is_connect(spark):
        import pyarrow.fs as pafs

        fs, where = pafs.FileSystem.from_uri(path if "://" in path else os.path.abspath(path))
        with fs.open_output_stream(where) as out:
            out.write(data)
        return
    jvm = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(target, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
