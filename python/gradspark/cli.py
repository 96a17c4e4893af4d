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
import sys
from typing import Optional, Sequence

from pyspark.sql import SparkSession

from gradspark.data.validation import InvalidDataError
from gradspark.storage import same_location
from gradspark.jobs.checks import (TRAIN_DEFAULTS, UsageError, _estimators, _literal,
                                   _read_job_file, check_params)
from gradspark.jobs.pipeline import feature_stages, predict, train
from gradspark.jobs.session import _session, check_executors

logger = logging.getLogger("gradspark.cli")

BAD_ARGUMENTS, BAD_DATA, FAILED = 2, 3, 1

__all__ = ["main", "feature_stages", "predict", "train", "UsageError", "BAD_ARGUMENTS",
           "BAD_DATA", "FAILED"]






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
