"""A fit run by an installed gradspark (tests/test_install.py), outside the repository.

Prints RESULT {"module": gradspark's path, "engine": the kernels the fit used,
"jar": the packaged jar's path or None, "objective": the last objective}.
"""

import json
import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import gradspark  # noqa: E402
from gradspark import SGDLogisticRegression  # noqa: E402
from gradspark.jvm.build import jar_path  # noqa: E402


def main() -> None:
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    g = np.random.default_rng(1)
    X = g.normal(size=(400, 3))
    y = (X @ [1.0, -2.0, 0.5] + g.logistic(size=400) > 0).astype(float)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"])
    model = SGDLogisticRegression(engine=sys.argv[1] if len(sys.argv) > 1 else "auto",
                                  executionStrategy="jobPerStep").fit(df)
    print("RESULT " + json.dumps({
        "module": gradspark.__file__, "engine": model.summary.extra["engine"],
        "jar": str(jar_path()) if jar_path().exists() else None,
        "objective": model.summary.objectiveHistory[-1]}))
    spark.stop()


if __name__ == "__main__":
    main()
