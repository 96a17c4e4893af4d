"""Fit on a local-cluster (separate executor JVMs and Python workers); print JSON.

Run by test_cluster.py in its own process: one driver can hold only one
SparkContext, and the suite's shared session is local[2].
"""

import json
import os
import sys

from pyspark.ml.classification import LogisticRegression

from job_support import logistic_frame, quiet_session  # sets PYSPARK_PYTHON first
from gradspark import SGDLogisticRegression


def run(spark) -> dict:
    df, X, y = logistic_frame(spark, seed=4, rows=400, partitions=4)
    params = dict(regParam=0.02, elasticNetParam=0.5, tol=1e-12, maxIter=500)
    ours = SGDLogisticRegression(**params).fit(df)
    ref = LogisticRegression(**params).fit(df)
    pids = df.rdd.mapPartitions(lambda _: [os.getpid()]).distinct().collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    return {
        "ours": ours.coefficients.toArray().tolist() + [ours.intercept],
        "ref": ref.coefficients.toArray().tolist() + [ref.intercept],
        "worker_pids": len(set(pids)), "executors": executors,
    }


def main() -> None:
    spark = quiet_session(sys.argv[1] if len(sys.argv) > 1 else "local-cluster[2,1,1024]")
    print("RESULT " + json.dumps(run(spark)))
    spark.stop()


if __name__ == "__main__":
    main()
