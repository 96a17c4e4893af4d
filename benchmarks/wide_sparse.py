"""Wide sparse logistic regression (CTR-shaped hashed features): gradspark vs MLlib.

One SparkSession (``local[2]``), and per width one cached DataFrame that both
libraries train from: ``--rows`` rows of 30 hashed categorical fields (binary
features, 30 non-zeros per row; small vocabularies give a few thousand hot
buckets, large ones a long tail), hashed into ``2^w`` buckets for each
``--widths`` entry, labels from a logistic model, ``--partitions`` partitions.

Per width:

* **fit**: ``LogisticRegression`` and ``SGDLogisticRegression`` with the
  same Params (``regParam=1e-4, standardization=False, maxIter=--iterations,
  tol=0``; gradspark's defaults otherwise: L-BFGS, ``engine="auto"``), whole
  ``fit`` wall time, median of ``--repeats`` after a warm-up fit of each. The
  two L-BFGS implementations take different paths, so gradspark is timed **to
  MLlib's objective**: if its ``maxIter`` fit ends above MLlib's final
  objective x (1 + 1e-5), the first iteration of a longer fit's history that
  reaches it becomes gradspark's ``maxIter`` (the table says which).
* **step**: gradspark's engine driven directly (the cached, compacted JVM
  blocks; one full-batch ``gradient_sums`` per step, median of ``--steps``)
  next to the occurring features and the non-zeros a step touches: the
  step should follow those, not the width.
* ``--adam`` (the widest width <= 2^22 only): the mini-batch Adam fit of
  issue 17 (``stepSize=0.05, miniBatchFraction=0.01, maxIter=200``): its
  parameter space, exact initial/final objectives and whether it warned.

Ratios are MLlib / gradspark: above 1 means gradspark is faster.

    .venv/bin/python benchmarks/wide_sparse.py                    # 400,000 rows, 2^20/22/24
    .venv/bin/python benchmarks/wide_sparse.py --rows 100000 --widths 20 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from typing import Dict, List, Optional, Sequence

import numpy as np

from gradspark.testing.ctr_data import sparse_rows

GENERATOR = "ctr"  # gradspark.testing.ctr_data's: 30 hashed fields, ~30 non-zeros per row
PARAMS = dict(regParam=1e-4, standardization=False, tol=0.0)
TOLERANCE = 1e-5  # relative objective gap counted as "at MLlib's objective"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--widths", type=int, nargs="+", default=[20, 22, 24],
                        help="log2 of the hashing space")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=20, help="MLlib's maxIter")
    parser.add_argument("--repeats", type=int, default=2, help="timed fits (median)")
    parser.add_argument("--steps", type=int, default=5, help="timed engine steps (median)")
    parser.add_argument("--adam", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="14g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


def make_data(spark, rows: int, width: int, partitions: int, seed: int):
    per = rows // partitions
    rdd = spark.sparkContext.parallelize(range(partitions), partitions).flatMap(
        lambda p: sparse_rows(GENERATOR, p, per, width, seed))
    df = rdd.toDF(["label", "features"]).select("features", "label").cache()
    df.count()
    return df


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def mllib_fit(df, max_iter: int):
    from pyspark.ml.classification import LogisticRegression

    seconds, model = timed(lambda: LogisticRegression(maxIter=max_iter, **PARAMS).fit(df))
    return seconds, model.summary.objectiveHistory[-1], model.summary.totalIterations


def gradspark_fit(df, max_iter: int, **extra):
    from gradspark import SGDLogisticRegression

    seconds, model = timed(
        lambda: SGDLogisticRegression(maxIter=max_iter, **{**PARAMS, **extra}).fit(df))
    return seconds, model


def iterations_to_reach(df, target: float, max_iter: int) -> int:
    """gradspark's maxIter that ends at or below ``target`` (at most 3x MLlib's count)."""
    _, model = gradspark_fit(df, max_iter)
    if model.summary.objectiveHistory[-1] <= target:
        return max_iter
    _, longer = gradspark_fit(df, 3 * max_iter)
    history = longer.summary.objectiveHistory
    reached = [i for i, value in enumerate(history) if value <= target]
    if not reached:
        raise RuntimeError(f"gradspark did not reach MLlib's objective {target} in "
                           f"{3 * max_iter} iterations (ended at {history[-1]})")
    return reached[0]


def engine_steps(spark, df, steps: int) -> Dict[str, float]:
    """Median full-batch JVM step on the compacted blocks, and what a step touches."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.compaction import active_features
    from gradspark.data.jvm import JvmTrainingData
    from gradspark.engine.jvm import JvmGradientEngine
    from gradspark.losses import BinaryLogisticLoss

    with JvmTrainingData(df, "features", "label", None, BINARY, 4096, 2) as data:
        width = data.num_features
        nnz = data.statistics.stored_entries
        active = active_features(data.statistics)
        if active is not None:
            data.compact(active)
        engine = JvmGradientEngine(data, BinaryLogisticLoss(), 2)
        d = data.num_features
        rng = np.random.default_rng(0)
        times = []
        for _ in range(steps + 1):  # the first is a warm-up
            coef = rng.normal(scale=0.01, size=(d, 1))
            seconds, _ = timed(lambda: engine.gradient_sums(coef, np.zeros(1), np.zeros(0)))
            times.append(seconds)
    return {"width": width, "trainedFeatures": d, "nonZeros": nnz,
            "stepSeconds": statistics.median(times[1:])}


def adam_case(df) -> Dict[str, object]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seconds, model = gradspark_fit(df, 200, optimizer="adam", stepSize=0.05,
                                       miniBatchFraction=0.01)
    extra = model.summary.extra
    return {"seconds": seconds, "parameterSpace": extra["parameterSpace"],
            "executionStrategy": extra["executionStrategy"],
            "initialObjective": extra["initialObjective"],
            "finalObjective": extra["finalObjective"],
            "warned": any(w.category.__name__ == "DivergenceWarning" for w in caught)}


def run_width(spark, args, exponent: int) -> Dict[str, object]:
    width = 1 << exponent
    print(f"\n== 2^{exponent} = {width:,} buckets: generating {args.rows:,} rows ...", flush=True)
    df = make_data(spark, args.rows, width, args.partitions, args.seed)
    mllib_fit(df, args.iterations)  # warm-up
    mllib = [mllib_fit(df, args.iterations) for _ in range(args.repeats)]
    target = mllib[-1][1] * (1 + TOLERANCE)
    ours_iters = iterations_to_reach(df, target, args.iterations)  # also our warm-up
    ours = [gradspark_fit(df, ours_iters) for _ in range(args.repeats)]
    model = ours[-1][1]
    extra = model.summary.extra
    row = {
        "exponent": exponent,
        "mllibSeconds": statistics.median(s for s, _, _ in mllib),
        "mllibObjective": mllib[-1][1],
        "mllibIterations": mllib[-1][2],
        "gradsparkSeconds": statistics.median(s for s, _ in ours),
        "gradsparkObjective": model.summary.objectiveHistory[-1],
        "gradsparkIterations": model.summary.totalIterations,
        "gradsparkEvaluations": extra["gradientEvaluations"],
        "bytesSentPerStep": extra.get("bytesSentPerStep"),
        "bytesReceivedPerStep": extra.get("bytesReceivedPerStep"),
        **engine_steps(spark, df, args.steps),
    }
    row["ratio"] = row["mllibSeconds"] / row["gradsparkSeconds"]
    if args.adam and exponent == max(e for e in args.widths if e <= 22):
        row["adam"] = adam_case(df)
    df.unpersist()
    print(json.dumps(row, indent=1), flush=True)
    return row


def report(rows: List[Dict[str, object]]) -> None:
    print("\n| features | MLlib fit s | gradspark fit s | MLlib / gradspark | objective MLlib | "
          "objective gradspark (iterations) | occurring features | step s | "
          "weights out B/step | sums in B/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| 2^{r['exponent']} | {r['mllibSeconds']:.1f} | {r['gradsparkSeconds']:.1f} | "
              f"{r['ratio']:.2f}x | {r['mllibObjective']:.6f} | "
              f"{r['gradsparkObjective']:.6f} ({r['gradsparkIterations']}) | "
              f"{r['trainedFeatures']:,} | {r['stepSeconds']:.3f} | "
              f"{r['bytesSentPerStep']:,.0f} | {r['bytesReceivedPerStep']:,.0f} |")
    for r in rows:
        if "adam" in r:
            a = r["adam"]
            print(f"\nAdam (stepSize 0.05, fraction 0.01, 200 steps) at 2^{r['exponent']}: "
                  f"{a['seconds']:.1f} s, {a['executionStrategy']}, {a['parameterSpace']} space, "
                  f"objective {a['initialObjective']:.6f} -> {a['finalObjective']:.6f}, "
                  f"DivergenceWarning: {a['warned']}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("gradspark wide sparse benchmark")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"load average before start: {os.getloadavg()[0]:.2f}", flush=True)
    rows = [run_width(spark, args, e) for e in args.widths]
    report(rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
