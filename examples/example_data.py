"""What the examples share: a local SparkSession and synthetic data built inside Spark."""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.ml.feature import VectorAssembler  # noqa: E402
from pyspark.sql import DataFrame, SparkSession, functions as F  # noqa: E402

TRUE_COEFFICIENTS = [1.5, -2.0, 0.75, 0.0, 3.0, -0.5, 0.0, 1.0]
FEATURE_COLUMNS = [f"x{j}" for j in range(len(TRUE_COEFFICIENTS))]


def arguments(doc: str, rows: int, **extra) -> argparse.Namespace:
    """``--rows`` and ``--master`` (plus ``extra``: name -> default) for an example."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, default=rows)
    parser.add_argument("--master", default="local[2]")
    for name, default in extra.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    return parser.parse_args()


def session(master: str, name: str) -> SparkSession:
    """A quiet session (under spark-submit, the master given there wins)."""
    builder = SparkSession.builder.appName(name).config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def synthetic(spark: SparkSession, rows: int, seed: int = 7) -> DataFrame:
    """x_j ~ N(0, (j+1)^2); label ~ Bernoulli(sigmoid(sum_j x_j * beta_j / (j+1) - 0.5))."""
    df = spark.range(rows, numPartitions=4)
    for j in range(len(TRUE_COEFFICIENTS)):
        df = df.withColumn(f"x{j}", F.randn(seed + j) * (j + 1))
    margin = sum(F.col(f"x{j}") * (b / (j + 1)) for j, b in enumerate(TRUE_COEFFICIENTS)) - 0.5
    return df.withColumn("label", (F.rand(seed) < 1 / (1 + F.exp(-margin))).cast("double"))


def assembled(spark: SparkSession, rows: int) -> DataFrame:
    """:func:`synthetic` with its features assembled into ``features``, cached."""
    return VectorAssembler(inputCols=FEATURE_COLUMNS, outputCol="features").transform(
        synthetic(spark, rows)).cache()
