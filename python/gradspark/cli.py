"""``gradspark train`` / ``gradspark predict``: batch jobs from tables, files or SQL.

    gradspark train --model logistic --input data.parquet --output model/
    gradspark train --model linear --sql "SELECT * FROM parquet.`/data/x` WHERE day > 3" \\
        --label price --param regParam=0.01 --param maxIter=200 --output model/
    gradspark predict --model model/ --table events --output scored/
    spark-submit --master yarn python/gradspark/cli.py train --job job.json

``train`` reads the data (``--input`` path, ``--table`` name or ``--sql`` query),
assembles the features (``--features a,b,c`` or every column but the label and
weight; string columns are indexed and one-hot encoded with pyspark.ml's
``StringIndexer``/``OneHotEncoder``), fits the estimator named by ``--model``
in a :class:`~pyspark.ml.Pipeline`, evaluates it on a held-out split, prints the
metrics as one JSON line, and saves the fitted ``PipelineModel`` at
``--output`` with ``metrics.json`` (metrics, loss history) and ``loss.png``
(with matplotlib, the ``plot`` extra) inside it.
A JSON job file (``--job``) gives the same options; flags override it.

Exit status, for batch schedulers: 0 on success, 2 for bad arguments, 3 for
data that cannot train (the one-line reason names the column), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from typing import Dict, List, Optional, Sequence

from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import (
    BinaryClassificationEvaluator, MulticlassClassificationEvaluator, RegressionEvaluator,
)
from pyspark.ml.feature import OneHotEncoder, StringIndexer, VectorAssembler
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import NumericType, StringType

from gradspark.connect import is_connect
from gradspark.data.validation import InvalidDataError
from gradspark.fit.rules import check_params as check_estimator_params
from gradspark.report import loss_plot_png
from gradspark.storage import entries, same_location
from gradspark.summaries import training_summary

logger = logging.getLogger("gradspark.cli")

BAD_ARGUMENTS, BAD_DATA, FAILED = 2, 3, 1
FEATURES = "features"


class UsageError(ValueError):
    """Arguments that cannot describe a job (exit status 2)."""


def _estimators() -> Dict[str, type]:
    from gradspark import SGDLinearRegression, SGDLinearSVC, SGDLogisticRegression

    return {"logistic": SGDLogisticRegression, "linear": SGDLinearRegression,
            "svc": SGDLinearSVC}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gradspark", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="fit a model and save a PipelineModel")
    predict = commands.add_parser("predict", help="score a dataset with a saved model")
    for command in (train, predict):
        source = command.add_argument_group("input (one of)")
        source.add_argument("--input", help="a Parquet, CSV or JSON path")
        source.add_argument("--format", help="format of --input (default: from its suffix)")
        source.add_argument("--table", help="a table or view name")
        source.add_argument("--sql", help="a SQL query")
        command.add_argument("--output", help="where to save the model / the predictions "
                                              "(an empty or new path, or this command's own "
                                              "earlier output)")
        command.add_argument("--overwrite", action="store_true", default=None,
                             help="replace whatever is at --output, even data that is not "
                                  "this command's output, or an input")
        command.add_argument("--master", help="Spark master (default: spark-submit's or local)")
        command.add_argument("--remote", metavar="URL",
                             help="a Spark Connect server (sc://host:port), or local[N] to "
                                  "start one here; instead of --master")
        command.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                             help="Spark configuration (repeatable)")
        command.add_argument("--verbose", action="store_true", default=None,
                             help="Spark's own log lines and stage progress bars, and "
                                  "gradspark's per-step log (default: errors and one "
                                  "progress line only)")
    train.add_argument("--job", help="a JSON (or, with PyYAML, YAML) file with any of "
                                     "these options")
    train.add_argument("--model", help="|".join(_estimators()) + "|torch")
    train.add_argument("--torch", metavar="MODULE:FUNCTION",
                       help="with --model torch: a function returning a TorchEstimator "
                            "(model_fn, loss_fn and its Params); its module must be "
                            "importable on the driver and the executors (--py-files), or "
                            "register itself with cloudpickle.register_pickle_by_value")
    train.add_argument("--label", help="the label column (default: label)")
    train.add_argument("--weight", help="a weight column")
    train.add_argument("--features", help="comma-separated feature columns "
                                          "(default: all but the label and weight)")
    train.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                       help="an estimator Param, e.g. regParam=0.01 (repeatable)")
    train.add_argument("--test-fraction", type=float, help="held-out share (default 0.2)")
    train.add_argument("--seed", type=int, help="split seed (default 42)")
    predict.add_argument("--model", help="a saved PipelineModel (from gradspark train)")
    return parser


TRAIN_DEFAULTS = {"label": "label", "test_fraction": 0.2, "seed": 42, "params": {}}


def _job(args: argparse.Namespace) -> dict:
    """Defaults, then the job file, then the flags."""
    job = dict(TRAIN_DEFAULTS) if args.command == "train" else {}
    if getattr(args, "job", None):
        loaded = _read_job_file(args.job)
        if not isinstance(loaded, dict):
            raise UsageError(f"job file {args.job} must hold a JSON object")
        job.update({k.replace("-", "_"): v for k, v in loaded.items()})
    for key, value in vars(args).items():
        if value is not None and key not in ("job", "param", "conf", "command"):
            job[key] = value
    params = dict(job.get("params") or {})
    for item in getattr(args, "param", []):
        name, equals, text = item.partition("=")
        if not equals or not name:
            raise UsageError(f"--param wants NAME=VALUE, got {item!r}")
        params[name] = _literal(text)
    job["params"] = params
    job["conf"] = list(job.get("conf") or []) + list(args.conf)
    sources = [k for k in ("input", "table", "sql") if job.get(k)]
    if len(sources) != 1:
        raise UsageError("give exactly one of --input, --table, --sql")
    if not job.get("output"):
        raise UsageError("--output is required")
    if not job.get("model"):
        raise UsageError("--model is required")
    inputs = [("--input", job.get("input"))]
    if args.command == "predict":
        inputs.append(("--model", job.get("model")))
    for flag, path in inputs:
        if path and same_location(path, job["output"]) and not job.get("overwrite"):
            raise UsageError(f"--output {job['output']} is also {flag}: refusing to replace "
                             f"it with the {'model' if args.command == 'train' else 'predictions'}"
                             "; choose another --output (or pass --overwrite)")
    return job


# What marks an --output as this command's own earlier output, which a rerun may replace.
TRAIN_OUTPUT = {"metadata", "stages", "metrics.json"}  # a saved PipelineModel + our report
PREDICTIONS_MARKER = "_GRADSPARK_PREDICTIONS"  # beside the Parquet parts (readers skip "_")


def check_params(job: dict) -> None:
    """Refuse an unknown --model or a bad --param before Spark starts (exit 2)."""
    estimators = _estimators()
    kind = job["model"]
    if kind not in estimators and kind != "torch":
        raise UsageError(f"--model must be one of {sorted(estimators) + ['torch']}, "
                         f"got {kind!r}")
    if kind == "torch":  # its Params come from the user's function, imported later
        return
    try:
        check_estimator_params(estimators[kind](**job["params"]))
    except (TypeError, ValueError) as error:
        raise UsageError(f"bad --param for {kind}: {error}") from None


def require_complete(df: DataFrame, columns: List[str]) -> None:
    """Refuse numeric columns with nulls or NaN, by name, in one pass: the assembler would
    turn a blank CSV cell into a NaN feature, named only as the assembled vector, and a
    held-out row with one would score NaN into the metrics."""
    if not columns:
        return
    counts = df.select(*[F.sum((F.col(c).isNull() | F.isnan(F.col(c).cast("double")))
                               .cast("long")).alias(c) for c in columns]).first()
    bad = {c: int(counts[c] or 0) for c in columns if counts[c]}
    if bad:
        raise InvalidDataError("; ".join(f"column {c!r} is blank, null or NaN in {n} rows"
                                         for c, n in bad.items())
                               + ": fill or drop those rows first")


def guard_output(spark: SparkSession, job: dict) -> None:
    """Refuse, before any work, to replace what is at ``--output`` unless it is empty,
    this command's own earlier output, or ``--overwrite`` was given."""
    output = job["output"]
    found = entries(spark, output)
    if not found or job.get("overwrite"):
        return
    ours = (TRAIN_OUTPUT <= set(found) if job["command"] == "train"
            else PREDICTIONS_MARKER in found)
    if not ours:
        shown = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(f"--output {output} already holds {len(found)} entries ({shown}) "
                         f"that are not an earlier 'gradspark {job['command']}' output: "
                         "refusing to replace them; choose an empty or new path (or pass "
                         "--overwrite)")


def _read_job_file(path: str):
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as error:
        raise UsageError(f"cannot read job file {path}: {error}") from None
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise UsageError(f"{path} is YAML: pip install pyyaml, or give the job as JSON")
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise UsageError(f"cannot parse job file {path}: {error}") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise UsageError(f"cannot parse job file {path}: {error}") from None


def _torch_estimator(spec: Optional[str]):
    """The TorchEstimator from ``module:function``."""
    import importlib

    from gradspark import TorchEstimator

    module_name, _, attribute = (spec or "").partition(":")
    if not module_name or not attribute:
        raise UsageError("--model torch needs --torch MODULE:FUNCTION (a function that "
                         "returns a TorchEstimator)")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"cannot load --torch {spec}: {error}") from None
    estimator = factory()
    if not isinstance(estimator, TorchEstimator):
        raise UsageError(f"--torch {spec} returned {type(estimator).__name__}, "
                         f"not a TorchEstimator")
    return estimator


def _literal(text: str):
    """'0.01' -> 0.01, 'true' -> True, 'adam' -> 'adam'."""
    try:
        return json.loads(text)
    except ValueError:
        return text


QUIET_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf",
                           "log4j2-quiet.properties")


def _session(job: dict) -> SparkSession:
    builder = SparkSession.builder.appName(f"gradspark {job.get('command', '')}".strip())
    remote = job.get("remote")
    if remote and job.get("master"):
        raise UsageError("give --master or --remote, not both")
    if remote:
        builder = builder.remote(remote)
    elif job.get("master"):
        builder = builder.master(job["master"])
    conf = {}
    for item in job.get("conf", []):
        key, equals, value = item.partition("=")
        if not equals:
            raise UsageError(f"--conf wants KEY=VALUE, got {item!r}")
        conf[key] = value
    _use_this_python(job, conf)
    # A session of its own (not a Connect server elsewhere): keep its JVM quiet.
    own_jvm = not remote or remote.startswith("local")
    if not job.get("verbose") and own_jvm:
        conf.setdefault("spark.ui.showConsoleProgress", "false")
        options = conf.get("spark.driver.extraJavaOptions", "")
        if "log4j2.configurationFile" not in options and " " not in QUIET_LOG4J:
            conf["spark.driver.extraJavaOptions"] = \
                f"{options} -Dlog4j2.configurationFile=file:{QUIET_LOG4J}".strip()
    for key, value in conf.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        # A local Connect server takes the static settings at its start, then the client
        # warns that it cannot set them again on its session.
        warnings.filterwarnings("ignore", message="Failed to set spark", category=UserWarning)
        spark = builder.getOrCreate()
    if not job.get("verbose") and not is_connect(spark):
        spark.sparkContext.setLogLevel("ERROR")  # a session made before us keeps its own
    return spark


def _use_this_python(job: dict, conf: Dict[str, str]) -> None:
    """Local masters run the Python workers with the CLI's own interpreter.

    Spark starts ``PYSPARK_PYTHON`` (default: the first ``python3`` on PATH),
    which need not be the one gradspark is installed in: the installed
    ``gradspark`` script run by its path from cron or a Makefile, say. On a
    local master the workers run on this machine, so this interpreter is the
    right one unless the user chose another. Under spark-submit (its JVM is
    already running) and on clusters the user's settings stand; see
    :func:`check_executors`.
    """
    if os.environ.get("PYSPARK_PYTHON") or "spark.pyspark.python" in conf:
        return
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started us
    master = job.get("master") or job.get("remote") or ("" if submitted else "local[*]")
    if master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable


def check_executors(spark: SparkSession) -> None:
    """One small task: can the executors' Python import gradspark? A UsageError if not.

    On a classic session an RDD task, which needs nothing but pyspark on the workers
    (an interpreter without pyarrow still answers); on Spark Connect, which has no
    RDDs, a DataFrame task.
    """

    def importable(rows):
        import importlib.util
        import sys

        for _ in rows:
            pass
        yield importlib.util.find_spec("gradspark") is not None, sys.executable

    cure = ("install it there (pip install gradspark), ship it with --py-files, or point "
            "PYSPARK_PYTHON / spark.pyspark.python at an interpreter that has it")
    chosen = (spark.conf.get("spark.pyspark.python", None)
              or os.environ.get("PYSPARK_PYTHON") or "python3")
    try:
        if is_connect(spark):
            import pyarrow as pa

            def importable_batches(batches):
                for found, executable in importable(batches):
                    yield pa.RecordBatch.from_pylist([{"found": found,
                                                       "executable": executable}])

            found, executable = spark.range(1, numPartitions=1).mapInArrow(
                importable_batches, "found boolean, executable string").first()
        else:
            found, executable = spark.sparkContext.parallelize([0], 1) \
                .mapPartitions(importable).collect()[0]
    except Exception as error:  # noqa: BLE001 - e.g. the executors' Python does not start
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(f"the executors' Python ({chosen}) could not run a task ({first}): "
                         f"it needs gradspark and its dependencies; {cure}") from error
    if not found:
        raise UsageError(f"the executors' Python ({executable}) cannot import gradspark: "
                         f"{cure}")


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
    draw their own bar there, :class:`gradspark.trainer.progress.Progress`)."""
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


def main(argv: Optional[Sequence[str]] = None, spark: Optional[SparkSession] = None) -> int:
    """Run one command; returns the exit status. ``spark``: reuse a session (tests)."""
    args = _parser().parse_args(argv)  # exits with 2 on malformed flags
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    owned = spark is None
    try:
        job = _job(args)
        job["command"] = args.command
        if args.command == "train":
            check_params(job)
        if spark is None:
            spark = _session(job)
            check_executors(spark)
        result = (train if args.command == "train" else predict)(spark, job)
        print(json.dumps(result if args.command == "predict" else
                         {k: result[k] for k in ("model", "metrics", "iterations")}))
        return 0
    except UsageError as error:
        print(f"gradspark: error: {error}", file=sys.stderr)
        return BAD_ARGUMENTS
    except InvalidDataError as error:
        print(f"gradspark: bad data: {error.message}", file=sys.stderr)
        return BAD_DATA
    except Exception as error:  # noqa: BLE001 - a batch job reports, then exits non-zero
        logger.debug("failed", exc_info=True)
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(f"gradspark: failed: {type(error).__name__}: {first}", file=sys.stderr)
        return FAILED
    finally:
        if owned and spark is not None:
            spark.stop()


if __name__ == "__main__":  # spark-submit python/gradspark/cli.py ...
    sys.exit(main())
