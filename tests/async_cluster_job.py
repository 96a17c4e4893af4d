"""Async mode and resident workers on a local-cluster (separate executor JVMs).

Prints one RESULT line of JSON.

Run by test_cluster.py in its own process. Covers what needs real executors:
workers in other processes reaching the driver's server, and a task that fails
on its first attempt being retried by Spark (local[N] never retries).
"""

import json
import os

import numpy as np

from job_support import logistic_frame, quiet_session  # sets PYSPARK_PYTHON first
from gradspark import SGDLogisticRegression
from gradspark.testing.faults import ENVIRONMENT_VARIABLE


def run(spark) -> dict:
    df, X, y = logistic_frame(spark, seed=8, rows=600, partitions=2)
    df.count()
    params = dict(optimizer="adam", stepSize=0.05, tol=0.0, regParam=0.01, maxIter=80)
    remote = dict(params, mode="async", parameterServerHost="127.0.0.1")

    def fit(**extra):
        model = SGDLogisticRegression(**extra).fit(df)
        m = X @ model.coefficients.toArray() + model.intercept
        loss = float(np.mean(np.logaddexp(0, m) - y * m))
        return [*model.coefficients.toArray(), model.intercept], loss, model.summary.extra

    # Sync mode's default here: resident workers over the JVM-validated blocks.
    sync, sync_loss, sync_extra = fit(parameterServerHost="127.0.0.1", **params)
    job, _, _ = fit(executionStrategy="jobPerStep", engine="python", **params)
    bsp, _, _ = fit(maxStaleness=0, **remote)
    stale, stale_loss, stale_extra = fit(maxStaleness=2, **remote)
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps({"fail_partition": 0, "fail_step": 5})
    retried, _, retried_extra = fit(maxStaleness=0, **remote)
    resident_retried, _, resident_extra = fit(executionStrategy="resident",
                                              parameterServerHost="127.0.0.1", **params)
    del os.environ[ENVIRONMENT_VARIABLE]
    return {
        "sync": sync, "bsp": bsp, "retried": retried,
        "sync_strategy": sync_extra["executionStrategy"], "job": job,
        "resident_retried": resident_retried,
        "resident_reconnects": resident_extra["reconnects"],
        "sync_loss": sync_loss, "stale_loss": stale_loss,
        "stale_max_staleness": stale_extra["maxStaleness"],
        "retried_reconnects": retried_extra["reconnects"],
        "retried_updates": retried_extra["workerUpdates"],
    }


def main() -> None:
    spark = quiet_session("local-cluster[2,1,1024]")
    print("RESULT " + json.dumps(run(spark)))
    spark.stop()


if __name__ == "__main__":
    main()
