"""SparkSessions one after another in one driver process (as a notebook that restarts
its session, or the examples job, runs them). The first only loads the JVM kernels and
runs no task with them (a fit stopped before its first job); each later one fits on the
kernels (blockify and job-per-step gradients in Scala) and on MLlib.

Prints RESULT {"fits": [{"engine", "gap"}, ...]}: ``gap`` is the largest coefficient
difference from MLlib's LogisticRegression on the same rows.
"""

import json

import numpy as np
from job_support import logistic_frame, quiet_session
from pyspark.ml.classification import LogisticRegression

from gradspark import SGDLogisticRegression
from gradspark.jvm.loader import load_kernels

PARAMS = dict(regParam=0.01, maxIter=200, tol=1e-10)


def main() -> None:
    spark = quiet_session("local[2]")
    load_kernels(spark)
    spark.stop()
    fits = []
    for seed in range(2):
        spark = quiet_session("local[2]")
        df, _, _ = logistic_frame(spark, seed, 400, 2)
        ours = SGDLogisticRegression(engine="jvm", executionStrategy="jobPerStep",
                                     **PARAMS).fit(df)
        mllib = LogisticRegression(**PARAMS).fit(df)
        gap = float(np.max(np.abs(ours.coefficients.toArray() - mllib.coefficients.toArray())))
        fits.append({"engine": ours.summary.extra["engine"], "gap": gap})
        spark.stop()
    print("RESULT " + json.dumps({"fits": fits}))


if __name__ == "__main__":
    main()
