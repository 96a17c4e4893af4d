"""What the subprocess test jobs share: a quiet session and a small logistic dataset.

The jobs run in their own driver processes (one SparkContext per process), so
they cannot use conftest's fixtures.
"""

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402


def quiet_session(master: str) -> SparkSession:
    spark = (SparkSession.builder.master(master)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def logistic_frame(spark: SparkSession, seed: int, rows: int, partitions: int):
    """(cached DataFrame, X, y): 4 features on different scales, logistic labels."""
    g = np.random.default_rng(seed)
    X = g.normal(size=(rows, 4)) * [1, 2, 0.5, 4]
    y = (X @ [1.0, -0.5, 2.0, 0.2] + g.logistic(size=rows) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(partitions).cache()
    return df, X, y
