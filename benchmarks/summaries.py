"""Summary metrics: gradspark's DataFrame aggregations against MLlib's RDD metrics.

One cached DataFrame of ``--rows`` rows (``--features`` dense features, a binary
label, a 3-class label, a real label, a weight). Each model is fitted once per
side (MLlib's estimator and gradspark's, same Params, few iterations: the fit is not
what is timed); then, median of ``--repeats``, a *fresh* ``model.evaluate(df)`` is
timed until its fields are read:

* ``binary``: ``areaUnderROC``, ``roc.count()``, ``accuracy``, ``weightedFMeasure()``
  (logistic regression, 2 classes: every distinct probability is a score, so the
  curve is binned to 1,000 points on both sides);
* ``multiclass``: ``accuracy``, ``weightedPrecision``, ``fMeasureByLabel()`` (3 classes);
* ``regression``: ``rootMeanSquaredError``, ``r2``, ``explainedVariance``.

It prints seconds per side, the ratio MLlib / gradspark (above 1: gradspark faster)
and the largest difference between the two sides' values (the models differ a
little: both fits stop after ``--iterations`` L-BFGS steps; the ROC's point count,
which differs by MLlib's per-partition binning, enters divided by 10^6).

    .venv/bin/python benchmarks/summaries.py                   # 1,000,000 rows
    .venv/bin/python benchmarks/summaries.py --rows 100000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


def frame(spark, rows: int, features: int, partitions: int):
    """Rows generated on the executors (no driver-side data), cached."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    columns = [F.randn(seed=j) for j in range(features)]
    margin = sum(c * (1.0 / (j + 1)) for j, c in enumerate(columns))
    noise = F.randn(seed=10_001)
    df = (spark.range(rows, numPartitions=partitions)
          .select(F.array(*columns).alias("x"), margin.alias("m"), noise.alias("e"),
                  (F.rand(seed=10_002) + 0.5).alias("weight"))
          .select(array_to_vector("x").alias("features"),
                  (F.col("m") + F.col("e") > 0).cast("double").alias("label"),
                  F.when(F.col("m") + F.col("e") > 1, 2.0)
                   .when(F.col("m") + F.col("e") > -1, 1.0).otherwise(0.0).alias("multi"),
                  (2.0 * F.col("m") + F.col("e")).alias("y"), "weight"))
    df = df.cache()
    df.count()
    return df


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


FIELDS: Dict[str, List[str]] = {
    "binary": ["areaUnderROC", "accuracy"],
    "multiclass": ["accuracy", "weightedPrecision"],
    "regression": ["rootMeanSquaredError", "r2", "explainedVariance"],
}


def read_fields(kind: str, summary) -> List[float]:
    values = [float(getattr(summary, name)) for name in FIELDS[kind]]
    if kind == "binary":
        values += [summary.weightedFMeasure(), float(summary.roc.count()) / 1e6]
    if kind == "multiclass":
        values += list(summary.fMeasureByLabel())
    return values


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.regression import LinearRegression
    from pyspark.sql import SparkSession

    from gradspark import SGDLinearRegression, SGDLogisticRegression

    spark = (SparkSession.builder.master("local[2]")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = frame(spark, args.rows, args.features, args.partitions)
    common = dict(maxIter=args.iterations, regParam=0.01, weightCol="weight")
    fits = {
        "binary": (LogisticRegression(**common), SGDLogisticRegression(**common)),
        "multiclass": (LogisticRegression(labelCol="multi", **common),
                       SGDLogisticRegression(labelCol="multi", **common)),
        "regression": (LinearRegression(labelCol="y", solver="l-bfgs", **common),
                       SGDLinearRegression(labelCol="y", **common)),
    }
    results = {}
    for kind, (mllib, ours) in fits.items():
        models = {"mllib": mllib.fit(df), "gradspark": ours.fit(df)}
        seconds, values = {}, {}
        for side, model in models.items():
            values[side] = read_fields(kind, model.evaluate(df))  # warm-up
            seconds[side] = median_seconds(lambda: read_fields(kind, model.evaluate(df)),
                                           args.repeats)
        gap = float(np.max(np.abs(np.subtract(values["mllib"], values["gradspark"]))))
        results[kind] = {**seconds, "ratio": seconds["mllib"] / seconds["gradspark"],
                         "max_value_gap": gap}
        print(f"{kind:11s} MLlib {seconds['mllib']:7.2f} s   gradspark "
              f"{seconds['gradspark']:7.2f} s   MLlib/gradspark {results[kind]['ratio']:5.2f}x"
              f"   max |value gap| {gap:.2e}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "results": results}, handle, indent=2)
    spark.stop()


if __name__ == "__main__":
    main()
