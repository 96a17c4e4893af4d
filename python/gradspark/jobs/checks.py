"""Checks before a batch job touches anything: the job's arguments, its Params, the rows it
trains on and the output it would write (which it never deletes or overwrites unless the
user asked to replace it)."""

from __future__ import annotations

import json
import logging
from typing import Dict, List, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gradspark.data.validation import InvalidDataError
from gradspark.fit.rules import check_params as check_estimator_params
from gradspark.storage import entries

logger = logging.getLogger("gradspark.cli")


class UsageError(ValueError):
    """Arguments that cannot describe a job (exit status 2)."""


def _estimators() -> Dict[str, type]:
    from gradspark.estimators import SGDLinearRegression, SGDLinearSVC, SGDLogisticRegression

    return {"logistic": SGDLogisticRegression, "linear": SGDLinearRegression,
            "svc": SGDLinearSVC}


TRAIN_DEFAULTS = {"label": "label", "test_fraction": 0.2, "seed": 42, "params": {}}


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

    from gradspark.estimators import TorchEstimator

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
