"""Fit on a local-cluster (separate executor JVMs and Python workers); print JSON.

Run by test_cluster.py in its own process: one driver can hold only one
SparkContext, and the suite's shared session is local[2].
"""

import json
import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.classification import LogisticRegression  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from gradspark import SGDLogisticRegression  # noqa: E402


def main() -> None:
    spark = (SparkSession.builder.master(sys.argv[1] if len(sys.argv) > 1 else "local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    g = np.random.default_rng(4)
    X = g.normal(size=(400, 4)) * [1, 2, 0.5, 4]
    y = (X @ [1.0, -0.5, 2.0, 0.2] + g.logistic(size=400) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(4).cache()
    params = dict(regParam=0.02, elasticNetParam=0.5, tol=1e-12, maxIter=500)
    ours = SGDLogisticRegression(**params).fit(df)
    ref = LogisticRegression(**params).fit(df)
    pids = df.rdd.mapPartitions(lambda _: [os.getpid()]).distinct().collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print("RESULT " + json.dumps({
        "ours": ours.coefficients.toArray().tolist() + [ours.intercept],
        "ref": ref.coefficients.toArray().tolist() + [ref.intercept],
        "worker_pids": len(set(pids)), "executors": executors,
    }))
    spark.stop()


if __name__ == "__main__":
    main()
