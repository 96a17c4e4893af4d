"""Resident workers in a fan-in tree of depth 3 (local[4]); prints one RESULT line of JSON.

Run by test_cluster.py in its own process: four workers need four task slots,
and the tree is a barrier stage, which Spark retries as a whole when a node
fails (here the deepest one, on the first attempt of its stage).
"""

import json
import os

from job_support import logistic_frame, quiet_session  # sets PYSPARK_PYTHON first
from gradspark import SGDLogisticRegression
from gradspark.testing.faults import ENVIRONMENT_VARIABLE


def main() -> None:
    spark = quiet_session("local[4]")
    df, _, _ = logistic_frame(spark, seed=9, rows=800, partitions=6)
    df.count()
    params = dict(executionStrategy="resident", parameterServerHost="127.0.0.1",
                  regParam=0.01, elasticNetParam=0.5)

    def fit(**extra):
        model = SGDLogisticRegression(**params, **extra).fit(df)
        return [*model.coefficients.toArray(), model.intercept], model.summary.extra

    star, _ = fit()
    tree, tree_extra = fit(aggregationTopology="tree")
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps({"fail_partition": 3, "fail_step": 0})
    retried, retried_extra = fit(aggregationTopology="tree")
    del os.environ[ENVIRONMENT_VARIABLE]
    print("RESULT " + json.dumps({
        "star": star, "tree": tree, "retried": retried,
        "workers": tree_extra["residentWorkers"], "depth": tree_extra["treeDepth"],
        "reconnects": retried_extra["reconnects"],
    }))
    spark.stop()


if __name__ == "__main__":
    main()
