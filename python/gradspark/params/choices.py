"""The values the choice Params take, and their type converter."""

from __future__ import annotations

from pyspark.ml.param import TypeConverters

OPTIMIZERS = ("lbfgs", "sgd", "adagrad", "adam", "ftrl", "svrg")
FIRST_ORDER = "'sgd', 'adagrad', 'adam' or 'ftrl'"  # for messages
PARAMETER_SPACES = ("auto", "standardized", "raw")
PRECONDITIONINGS = ("auto", "diagonal", "none")
SCHEDULES = ("constant", "inverse_time", "inverse_sqrt", "cosine")
AVERAGINGS = ("auto", "none", "tail")
MODES = ("sync", "async")
STALE_GRADIENT_POLICIES = ("none", "scale", "compensate")
ENGINES = ("auto", "python", "jvm")
STRATEGIES = ("auto", "jobPerStep", "resident")
TOPOLOGIES = ("star", "tree")
BATCH_SIZINGS = ("fixed", "throughput")


def _one_of(name: str, allowed: tuple[str, ...]):
    def convert(value):
        value = TypeConverters.toString(value)
        if value not in allowed:
            raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        return value

    return convert
