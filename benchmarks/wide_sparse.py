"""Wide sparse logistic regression (CTR-shaped hashed features): gradspark vs MLlib vs
liblinear.

One SparkSession (``local[2]``), and per generator and width one cached
DataFrame that both Spark libraries train from: ``--rows`` rows of
:mod:`gradspark.testing.ctr_data`'s ``--generators`` (``ctr``: 30 hashed
categorical fields, binary, 30 non-zeros per row, a few thousand hot buckets
and a long tail; ``tail``: 10-100 of 100 fields per row, Zipf ids, count
features) hashed into ``2^w`` buckets for each ``--widths`` entry,
``--partitions`` partitions. liblinear gets the same rows (the same seeds) as
a scipy CSR matrix.

Per generator and width:

* **fit**: ``LogisticRegression`` and ``SGDLogisticRegression`` with the
  same Params (``regParam=1e-4, standardization=False, maxIter=--iterations,
  tol=0``; gradspark's defaults otherwise: L-BFGS, ``engine="auto"``), whole
  ``fit`` wall time, median of ``--repeats`` after a warm-up fit of each. The
  two L-BFGS implementations take different paths, so gradspark is timed **to
  MLlib's objective**, as liblinear is: its ``maxIter`` is the first iteration
  whose objective is at most MLlib's final objective x (1 + 1e-5), from the
  history of a ``maxIter`` fit (or of a 3 x ``maxIter`` one when that ends
  above); the table says how many. Its fit with MLlib's own ``maxIter`` is
  timed too (**same Params** columns: the same time budget in iterations,
  ending at a lower objective when it reaches MLlib's sooner).
* **step**: gradspark's engine driven directly (the cached, compacted JVM
  blocks; one full-batch ``gradient_sums`` per step, median of ``--steps``)
  next to the occurring features and the non-zeros a step touches: the
  step should follow those, not the width.
* **liblinear** (``liblinear-multicore``'s Python module, ``-s 0 -m 2 -B 1 -R``:
  L2 logistic regression by trust-region Newton on 2 threads, the bias not
  regularized, ``C = 1 / (regParam * rows)``: MLlib's objective times
  ``C * rows``), timed **to MLlib's objective** like gradspark: the largest of
  ``--liblinear-eps`` whose model reaches it, median of ``--repeats`` after a
  warm-up. Every objective in the table is evaluated by one numpy function
  on each model's coefficients.
* **load**: liblinear's is building its ``problem`` from the CSR matrix (its
  data in its own format); gradspark's data pass is blockify + validate +
  cache + statistics of the cached DataFrame (``JvmTrainingData``), which
  every fit starts with (its time is inside the fit's).
* ``--adam`` (the widest width <= 2^22 only): the mini-batch Adam fit of
  issue 17 (``stepSize=0.05, miniBatchFraction=0.01, maxIter=200``): its
  parameter space, exact initial/final objectives and whether it warned.

Ratios: MLlib / gradspark (above 1: gradspark faster) and gradspark /
liblinear (above 1: liblinear faster).

    .venv/bin/python benchmarks/wide_sparse.py                    # 200,000 rows, 2^18-2^24
    .venv/bin/python benchmarks/wide_sparse.py --generators ctr --widths 20 --repeats 1
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
import scipy.sparse as sp

from gradspark.testing.ctr_data import ctr_arrays, ctr_frame

PARAMS = dict(regParam=1e-4, standardization=False, tol=0.0)
TOLERANCE = 1e-5  # relative objective gap counted as "at MLlib's objective"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--generators", nargs="+", default=["ctr", "tail"],
                        choices=["ctr", "tail"])
    parser.add_argument("--widths", type=int, nargs="+", default=[18, 20, 22, 24],
                        help="log2 of the hashing space")
    parser.add_argument("--liblinear-eps", type=float, nargs="+",
                        default=[1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0003],
                        help="liblinear stopping tolerances tried, largest first")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=20, help="MLlib's maxIter")
    parser.add_argument("--repeats", type=int, default=2, help="timed fits (median)")
    parser.add_argument("--steps", type=int, default=5, help="timed engine steps (median)")
    parser.add_argument("--adam", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--data-pass-only", action="store_true",
                        help="only the data pass against liblinear's load, median of "
                             "--repeats + 2 each after one warm-up")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="14g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


def local_data(generator: str, rows: int, width: int, partitions: int, seed: int):
    """The same rows as :func:`ctr_frame`'s, as one scipy CSR matrix and labels."""
    per = rows // partitions
    parts = [ctr_arrays(generator, per, width, seed, p) for p in range(partitions)]
    X = sp.vstack([sp.csr_matrix((v, i, ptr), shape=(len(y), width))
                   for i, v, ptr, y in parts]).tocsr()
    return X, np.concatenate([y for *_, y in parts])


def objective(X, y, coefficients: np.ndarray, intercept: float) -> float:
    """MLlib's objective (``standardization=False``): mean log-loss + regParam/2 |w|^2."""
    m = X @ coefficients + intercept
    return float(np.mean(np.logaddexp(0.0, m) - y * m)
                 + PARAMS["regParam"] / 2 * coefficients @ coefficients)


def liblinear_fits(X, y, target: float, eps_list: Sequence[float], repeats: int):
    """liblinear's load and its fit to ``target``: the largest eps that reaches it."""
    from liblinear import liblinearutil as liblinear

    load, problem = timed(lambda: liblinear.problem(y, X))
    c = 1.0 / (PARAMS["regParam"] * X.shape[0])

    def fit(eps: float):
        seconds, model = timed(lambda: liblinear.train(
            problem, f"-s 0 -m 2 -B 1 -R -c {c!r} -e {eps!r} -q"))
        w = np.ctypeslib.as_array(model.w, shape=(X.shape[1] + 1,)).copy()
        sign = 1.0 if model.get_labels()[0] == 1 else -1.0  # liblinear's first label is +1
        return seconds, objective(X, y, sign * w[:-1], sign * w[-1])

    fit(eps_list[0])  # warm-up
    for eps in eps_list:
        seconds, value = fit(eps)
        if value <= target:
            times = [seconds] + [fit(eps)[0] for _ in range(repeats - 1)]
            return {"liblinearLoadSeconds": load, "liblinearSeconds": statistics.median(times),
                    "liblinearEps": eps, "liblinearObjective": value}
    return {"liblinearLoadSeconds": load, "liblinearSeconds": float("nan"),
            "liblinearEps": None, "liblinearObjective": value}


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def mllib_fit(df, max_iter: int):
    from pyspark.ml.classification import LogisticRegression

    seconds, model = timed(lambda: LogisticRegression(maxIter=max_iter, **PARAMS).fit(df))
    return seconds, model


def gradspark_fit(df, max_iter: int, **extra):
    from gradspark import SGDLogisticRegression

    seconds, model = timed(
        lambda: SGDLogisticRegression(maxIter=max_iter, **{**PARAMS, **extra}).fit(df))
    return seconds, model


def iterations_to_reach(df, target: float, max_iter: int) -> int:
    """The fewest gradspark iterations that end at or below ``target`` (at most 3x MLlib's
    count): a fit with ``maxIter=i`` takes the first ``i`` iterations of a longer one."""
    _, model = gradspark_fit(df, max_iter)
    history = model.summary.objectiveHistory
    if history[-1] > target:
        _, longer = gradspark_fit(df, 3 * max_iter)
        history = longer.summary.objectiveHistory
    reached = [i for i, value in enumerate(history) if value <= target]
    if not reached:
        raise RuntimeError(f"gradspark did not reach MLlib's objective {target} in "
                           f"{3 * max_iter} iterations (ended at {history[-1]})")
    return reached[0]


def engine_steps(spark, df, steps: int) -> Dict[str, float]:
    """The data pass a fit starts with, then the median full-batch JVM step on the
    compacted, partition-local blocks (as a job-per-step fit runs it), and what a step
    touches."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.compaction import active_features
    from gradspark.data.jvm import JvmTrainingData
    from gradspark.engine.jvm import JvmGradientEngine
    from gradspark.losses import BinaryLogisticLoss

    data_seconds, data = timed(lambda: JvmTrainingData(df, "features", "label", None, BINARY,
                                                       4096, 2))
    with data:
        width = data.num_features
        nnz = data.statistics.stored_entries
        active = active_features(data.statistics)
        if active is not None:
            data.compact(active)
        engine = JvmGradientEngine(data, BinaryLogisticLoss(), 2, local_features=True)
        d = data.num_features
        rng = np.random.default_rng(0)
        times = []
        for _ in range(steps + 1):  # the first is a warm-up
            coef = rng.normal(scale=0.01, size=(d, 1))
            seconds, _ = timed(lambda: engine.gradient_sums(coef, np.zeros(1), np.zeros(0)))
            times.append(seconds)
        held = float(engine.metrics["meanPartitionFeatures"])
    return {"width": width, "trainedFeatures": d, "nonZeros": nnz,
            "meanPartitionFeatures": held, "dataPassSeconds": data_seconds,
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


def run_case(spark, args, generator: str, exponent: int) -> Dict[str, object]:
    width = 1 << exponent
    print(f"\n== {generator}, 2^{exponent} = {width:,} buckets: generating {args.rows:,} rows ...",
          flush=True)
    df = ctr_frame(spark, args.rows, width, args.partitions, args.seed, generator)
    X, y = local_data(generator, args.rows, width, args.partitions, args.seed)
    mllib_fit(df, args.iterations)  # warm-up
    mllib = [mllib_fit(df, args.iterations) for _ in range(args.repeats)]
    mllib_model = mllib[-1][1]
    mllib_objective = objective(X, y, mllib_model.coefficients.toArray(), mllib_model.intercept)
    target = mllib_objective * (1 + TOLERANCE)
    ours_iters = iterations_to_reach(df, target, args.iterations)  # also our warm-up
    ours = [gradspark_fit(df, ours_iters) for _ in range(args.repeats)]
    same = [gradspark_fit(df, args.iterations) for _ in range(args.repeats)]
    same_model = same[-1][1]
    model = ours[-1][1]
    extra = model.summary.extra
    row = {
        "generator": generator,
        "exponent": exponent,
        "mllibSeconds": statistics.median(s for s, _ in mllib),
        "mllibObjective": mllib_objective,
        "mllibIterations": mllib_model.summary.totalIterations,
        "gradsparkSeconds": statistics.median(s for s, _ in ours),
        "gradsparkObjective": objective(X, y, model.coefficients.toArray(), model.intercept),
        "gradsparkIterations": model.summary.totalIterations,
        "gradsparkEvaluations": extra["gradientEvaluations"],
        "preconditioning": extra["preconditioning"],
        "sameParamsSeconds": statistics.median(s for s, _ in same),
        "sameParamsObjective": objective(X, y, same_model.coefficients.toArray(),
                                         same_model.intercept),
        "executionStrategy": extra["executionStrategy"],
        "bytesSentPerStep": extra.get("bytesSentPerStep"),
        "bytesReceivedPerStep": extra.get("bytesReceivedPerStep"),
        **engine_steps(spark, df, args.steps),
        **liblinear_fits(X, y, target, args.liblinear_eps, args.repeats),
    }
    row["ratio"] = row["mllibSeconds"] / row["gradsparkSeconds"]
    row["sameParamsRatio"] = row["mllibSeconds"] / row["sameParamsSeconds"]
    row["liblinearRatio"] = row["gradsparkSeconds"] / row["liblinearSeconds"]
    row["loadRatio"] = row["dataPassSeconds"] / row["liblinearLoadSeconds"]
    if args.adam and exponent == max(e for e in args.widths if e <= 22):
        row["adam"] = adam_case(df)
    df.unpersist()
    print(json.dumps(row, indent=1), flush=True)
    return row


def data_pass_case(spark, args, generator: str, exponent: int) -> Dict[str, object]:
    """The data pass (DataFrame to cached, validated blocks with their statistics) and
    liblinear's load of the same rows, each timed repeatedly in this one run."""
    from liblinear import liblinearutil as liblinear

    from gradspark.data.blocks import BINARY
    from gradspark.data.jvm import JvmTrainingData

    width = 1 << exponent
    df = ctr_frame(spark, args.rows, width, args.partitions, args.seed, generator)
    X, y = local_data(generator, args.rows, width, args.partitions, args.seed)

    def data_pass() -> None:
        JvmTrainingData(df, "features", "label", None, BINARY, 4096, 2).release()

    repeats = args.repeats + 2
    ours = [timed(data_pass)[0] for _ in range(repeats + 1)][1:]
    theirs = [timed(lambda: liblinear.problem(y, X))[0] for _ in range(repeats + 1)][1:]
    df.unpersist()
    row = {"generator": generator, "exponent": exponent,
           "dataPassSeconds": statistics.median(ours),
           "liblinearLoadSeconds": statistics.median(theirs)}
    row["loadRatio"] = row["dataPassSeconds"] / row["liblinearLoadSeconds"]
    print(json.dumps(row), flush=True)
    return row


def report(rows: List[Dict[str, object]]) -> None:
    if "mllibSeconds" not in rows[0]:
        print("\n| generator | features | data pass s | liblinear load s | ratio |")
        print("| --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['generator']} | 2^{r['exponent']} | {r['dataPassSeconds']:.2f} | "
                  f"{r['liblinearLoadSeconds']:.2f} | {r['loadRatio']:.2f}x |")
        return
    print("\n| generator | features | MLlib fit s | gradspark fit s | liblinear fit s (eps) | "
          "MLlib / gradspark | gradspark / liblinear | objective MLlib / gradspark / liblinear "
          "| gradspark iterations | same Params: gradspark fit s, MLlib / gradspark, objective "
          "| trained features | held per partition | step s | data pass s | liblinear load s |")
    print("| --- " * 15 + "|")
    for r in rows:
        print(f"| {r['generator']} | 2^{r['exponent']} | {r['mllibSeconds']:.1f} | "
              f"{r['gradsparkSeconds']:.1f} | {r['liblinearSeconds']:.1f} ({r['liblinearEps']}) | "
              f"{r['ratio']:.2f}x | {r['liblinearRatio']:.2f}x | {r['mllibObjective']:.6f} / "
              f"{r['gradsparkObjective']:.6f} / {r['liblinearObjective']:.6f} | "
              f"{r['gradsparkIterations']} ({r['executionStrategy']}, "
              f"{r['preconditioning']}) | {r['sameParamsSeconds']:.1f}, "
              f"{r['sameParamsRatio']:.2f}x, {r['sameParamsObjective']:.6f} | "
              f"{r['trainedFeatures']:,} | {r['meanPartitionFeatures']:,.0f} | "
              f"{r['stepSeconds']:.3f} | {r['dataPassSeconds']:.1f} | "
              f"{r['liblinearLoadSeconds']:.2f} |")
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
    case = data_pass_case if args.data_pass_only else run_case
    rows = [case(spark, args, g, e) for g in args.generators for e in args.widths]
    report(rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
