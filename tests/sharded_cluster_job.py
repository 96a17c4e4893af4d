"""Sharded parameter servers on a local-cluster (separate executor JVMs), with a killed shard.

Prints one RESULT line of JSON. Run by test_sharded.py in its own process:
killing a task's Python process, and Spark retrying the barrier stage, need
real executors (local[N] never retries).
"""

import json
import os
import sys
import tempfile


from job_support import quiet_session  # sets PYSPARK_PYTHON first
from hashed_data import frames, hashed_rows
from gradspark import SGDLogisticRegression
from gradspark.testing.faults import ENVIRONMENT_VARIABLE


def run(spark) -> dict:
    columns, labels = hashed_rows(2400, seed=5, rare=True)
    df = frames(spark, columns, labels, partitions=3)
    df.count()
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.1, maxIter=16,
                  regParam=1e-3, seed=7, parameterServerHost="127.0.0.1")

    def fit(**extra):
        model = SGDLogisticRegression(**params, **extra).fit(df)
        return ([*model.coefficients.toArray(), model.intercept],
                model.summary.objectiveHistory, model.summary.extra)

    single, single_history, _ = fit(mode="async", maxStaleness=0)
    sharded, sharded_history, sharded_extra = fit(parameterServers=2)
    with tempfile.TemporaryDirectory() as directory:
        # Worker 1 hosts shard 1: its Python process dies at step 7 of the first attempt.
        os.environ[ENVIRONMENT_VARIABLE] = json.dumps(
            {"fail_partition": 1, "fail_step": 7, "kill": True})
        try:
            killed, killed_history, killed_extra = fit(
                parameterServers=2, checkpointDir=directory, checkpointInterval=5)
        finally:
            del os.environ[ENVIRONMENT_VARIABLE]
    stale, _, stale_extra = fit(mode="async", maxStaleness=2, parameterServers=2)
    return {
        "single": single, "single_history": single_history,
        "sharded": sharded, "sharded_history": sharded_history,
        "killed": killed, "killed_history": killed_history,
        "restarts": killed_extra["stageRestarts"],
        "shard_bytes": sharded_extra["shardBytesReceived"],
        "strategy": sharded_extra["executionStrategy"],
        "stale_final": stale_extra["finalObjective"],
        "stale_initial": stale_extra["initialObjective"],
        "stale_max_staleness": stale_extra["maxStaleness"],
    }


def main() -> None:
    spark = quiet_session(sys.argv[1] if len(sys.argv) > 1 else "local-cluster[2,1,1024]")
    print("RESULT " + json.dumps(run(spark)))
    spark.stop()


if __name__ == "__main__":
    main()
