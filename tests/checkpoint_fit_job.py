"""A fit with checkpoints, in its own process (test_fault_tolerance.py kills it; its
uninterrupted reference is ``fit`` on the suite's session).

    python checkpoint_fit_job.py CHECKPOINT_DIR OUTPUT_JSON [MAX_ITER]
"""

import json
import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from gradspark import SGDLogisticRegression  # noqa: E402


def fit(spark, checkpoint_dir: str, max_iter: int = 80) -> dict:
    g = np.random.default_rng(8)
    X = g.normal(size=(300, 4)) * [1, 3, 0.5, 2]
    y = (X @ [1.0, -0.3, 2.0, 0.5] + g.logistic(size=300) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(2)
    model = SGDLogisticRegression(
        optimizer="adam", stepSize=0.05, miniBatchFraction=0.5, maxIter=max_iter, tol=0.0,
        regParam=0.01, seed=42, checkpointDir=checkpoint_dir, checkpointInterval=3,
    ).fit(df)
    return {
        "coefficients": model.coefficients.toArray().tolist(),
        "intercept": model.intercept,
        "history": model.summary.objectiveHistory,
        "resumed_from": model.summary.extra["resumedFromStep"],
    }


def main() -> None:
    checkpoint_dir, output = sys.argv[1], sys.argv[2]
    max_iter = int(sys.argv[3]) if len(sys.argv) > 3 else 80
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    result = fit(spark, checkpoint_dir, max_iter)
    with open(output, "w") as f:
        json.dump(result, f)
    spark.stop()


if __name__ == "__main__":
    main()
