"""Async mode on a local-cluster (separate executor JVMs); prints one RESULT line of JSON.

Run by test_cluster.py in its own process. Covers what needs real executors:
workers in other processes reaching the driver's server, and a task that fails
on its first attempt being retried by Spark (local[N] never retries).
"""

import json
import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from gradspark import SGDLogisticRegression  # noqa: E402
from gradspark.faults import ENVIRONMENT_VARIABLE  # noqa: E402


def main() -> None:
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    g = np.random.default_rng(8)
    X = g.normal(size=(600, 4)) * [1, 2, 0.5, 4]
    y = (X @ [1.0, -0.5, 2.0, 0.2] + g.logistic(size=600) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).repartition(2).cache()
    df.count()
    params = dict(optimizer="adam", stepSize=0.05, tol=0.0, regParam=0.01, maxIter=80)
    remote = dict(params, mode="async", parameterServerHost="127.0.0.1")

    def fit(**extra):
        model = SGDLogisticRegression(**extra).fit(df)
        m = X @ model.coefficients.toArray() + model.intercept
        loss = float(np.mean(np.logaddexp(0, m) - y * m))
        return [*model.coefficients.toArray(), model.intercept], loss, model.summary.extra

    sync, sync_loss, _ = fit(**params)
    bsp, _, _ = fit(maxStaleness=0, **remote)
    stale, stale_loss, stale_extra = fit(maxStaleness=2, **remote)
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps({"fail_partition": 0, "fail_step": 5})
    retried, _, retried_extra = fit(maxStaleness=0, **remote)
    del os.environ[ENVIRONMENT_VARIABLE]
    print("RESULT " + json.dumps({
        "sync": sync, "bsp": bsp, "retried": retried,
        "sync_loss": sync_loss, "stale_loss": stale_loss,
        "stale_max_staleness": stale_extra["maxStaleness"],
        "retried_reconnects": retried_extra["reconnects"],
        "retried_updates": retried_extra["workerUpdates"],
    }))
    spark.stop()


if __name__ == "__main__":
    main()
