"""Cost of one full-batch gradient step: numpy floor, MLlib, and every gradspark engine/strategy.

One run, one SparkSession, the same cached data for everyone:

* **numpy floor** -- one process, the same logistic gradient+loss pass over
  a local copy of the same shape (blocked 8192-row products, all BLAS threads):
  what the arithmetic costs with no Spark at all.
* **MLlib evaluation / iteration** -- inside ``LogisticRegression(tol=0)``
  fits, read from Spark's job records (the UI's REST API): each gradient
  evaluation is one ``treeAggregate at RDDLossFunction`` job, and the median
  interval between consecutive ones' completions is what one evaluation
  costs (its broadcast, its job, breeze's update); per iteration is the span
  of the evaluations over the iterations they served. The difference of a
  short and a long fit (``sync_vs_mllib.py``'s method), used before, swung
  from -0.10 to 0.17 s per iteration here: each fit's fixed cost (blockifying
  and caching its instances) is seconds and noisy, and MLlib converges in
  about a dozen iterations.
* **gradspark per step** -- each engine driven directly, one
  ``gradient_sums`` call (full batch) per step, median over ``--steps``:
  ``python`` kernels one job per step, ``jvm`` kernels one job per step, and
  ``resident`` workers (one message round per step).
* **end to end** -- ``SGDLogisticRegression()`` (L-BFGS, ``engine="auto"``)
  and MLlib ``LogisticRegression`` fitted with their defaults; wall time of
  the whole ``fit`` and the final objective (mean log-loss), medians.

Datasets: ``dense`` (``--rows`` x ``--cols``, default 1,000,000 x 100) and
``sparse`` (``--sparse-rows`` x ``--sparse-cols`` at ``--density``, default
200,000 x 10,000 at 1%). ``--scaling`` adds the step cost of the resident
and jvm strategies at three sizes of rows, features and partitions;
``--fixed-cost`` splits a JVM step on tiny data into its Spark job and the
driver's time around it.

    .venv/bin/python benchmarks/engine.py                    # both datasets, ~10 min
    .venv/bin/python benchmarks/engine.py --datasets dense --scaling
    .venv/bin/python benchmarks/engine.py --rows 100000 --sparse-rows 20000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from contextlib import ExitStack
from datetime import datetime
from typing import Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sync_vs_mllib import (  # noqa: E402
    FEATURES, LABEL, build_session, make_data, median, warm_python_workers,
)

# gradspark's default blockSize: the floor does the engines' arithmetic, blocked alike.
FLOOR_BLOCK = 4096


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--datasets", default="dense,sparse", help="comma-separated")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=100)
    parser.add_argument("--sparse-rows", type=int, default=200_000)
    parser.add_argument("--sparse-cols", type=int, default=10_000)
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="14g")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per engine")
    parser.add_argument("--repeats", type=int, default=3, help="end-to-end fits (medians)")
    parser.add_argument("--mllib-iterations", type=int, default=32,
                        help="maxIter of the MLlib fits timed job by job (tol=0)")
    parser.add_argument("--mllib-repeats", type=int, default=3,
                        help="MLlib fits timed job by job (their intervals are pooled)")
    parser.add_argument("--scaling", action="store_true",
                        help="also measure step cost at 3 sizes of rows, features, partitions")
    parser.add_argument("--fixed-cost", action="store_true",
                        help="also split a tiny JVM step into the Spark job and the driver")
    parser.add_argument("--json", metavar="PATH")
    return parser.parse_args(argv)


# -- data ----------------------------------------------------------------------

def make_sparse(spark, rows: int, cols: int, density: float, partitions: int, seed: int = 7):
    """Cached DataFrame of sparse rows (nnz = density * cols, uniform columns), generated
    on the executors; labels from a fixed sparse logistic model."""
    from pyspark.ml.linalg import Vectors

    nnz = max(1, int(round(density * cols)))
    beta = np.random.default_rng(seed).normal(size=cols) * (1.5 / np.sqrt(nnz))

    def rows_of(partition, iterator):
        g = np.random.default_rng([seed, partition])
        for _ in iterator:
            idx = np.sort(g.choice(cols, nnz, replace=False))
            val = g.normal(size=nnz)
            p = 1.0 / (1.0 + np.exp(-(val @ beta[idx])))
            yield Vectors.sparse(cols, idx, val), float(g.random() < p)

    rdd = spark.sparkContext.range(rows, numSlices=partitions).mapPartitionsWithIndex(rows_of)
    df = rdd.toDF([FEATURES, LABEL]).cache()
    df.count()
    return df


def local_copy(rows: int, cols: int, sparse: bool, density: float):
    g = np.random.default_rng(0)
    y = (g.random(rows) < 0.5).astype(float)
    if not sparse:
        return g.normal(size=(rows, cols)), y
    import scipy.sparse as sp

    # Built row by row like the Spark data (scipy's sparse.random draws a
    # permutation of rows x cols positions: gigabytes at this size).
    nnz = max(1, int(round(density * cols)))
    indices = np.sort(g.integers(0, cols, size=(rows, nnz)), axis=1).ravel()
    indptr = np.arange(rows + 1, dtype=np.int64) * nnz
    return sp.csr_matrix((g.normal(size=rows * nnz), indices, indptr), shape=(rows, cols)), y


# -- the figures -----------------------------------------------------------------

def one_pass(blocks, coef) -> float:
    """One logistic loss + gradient pass over pre-cut blocks, as every engine does it."""
    from gradspark.losses import BinaryLogisticLoss

    loss, w = BinaryLogisticLoss(), np.ones(FLOOR_BLOCK)
    xtg, total = np.zeros_like(coef), 0.0
    for block, labels in blocks:
        value = loss.evaluate(np.asarray(block @ coef), labels, w[: block.shape[0]],
                              np.zeros(0))
        xtg += np.asarray(block.T @ value.d_margins)
        total += value.loss_sum
    return total


def cut(X, y, rows: slice):
    X, y = X[rows], y[rows]
    return [(X[s:s + FLOOR_BLOCK], y[s:s + FLOOR_BLOCK]) for s in range(0, X.shape[0], FLOOR_BLOCK)]


def _half_passes(X, y, coef, steps, barrier, results, half) -> None:
    from threadpoolctl import threadpool_limits

    rows = X.shape[0] // 2
    blocks = cut(X, y, slice(half * rows, X.shape[0] if half else rows))
    times = []
    with threadpool_limits(1):
        for _ in range(steps + 1):
            barrier.wait()
            t0 = time.perf_counter()
            one_pass(blocks, coef)
            times.append(time.perf_counter() - t0)
    results.put((half, times[1:]))


def numpy_floor(X, y, steps: int) -> Dict[str, float]:
    """Median seconds per pass without Spark: one process with all BLAS threads, and two
    forked processes of one thread over half the rows each (slowest of the two)."""
    import multiprocessing as mp

    coef = np.random.default_rng(1).normal(size=(X.shape[1], 1)) * 0.01
    blocks, times = cut(X, y, slice(None)), []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        one_pass(blocks, coef)
        times.append(time.perf_counter() - t0)
    context = mp.get_context("fork")
    barrier, results = context.Barrier(2), context.SimpleQueue()
    children = [context.Process(target=_half_passes,
                                args=(X, y, coef, steps, barrier, results, h)) for h in (0, 1)]
    for child in children:
        child.start()
    halves = dict(results.get() for _ in children)
    for child in children:
        child.join()
    split = [max(a, b) for a, b in zip(halves[0], halves[1])]
    return {"one process": median(times[1:]), "two processes": median(split)}


def step_times(engine, cols: int, steps: int) -> List[float]:
    """Seconds per full-batch gradient_sums call (after one warm-up), small GD steps between."""
    coef, offset, aux = np.zeros((cols, 1)), np.zeros(1), np.zeros(0)
    sums = engine.gradient_sums(coef, offset, aux)
    times = []
    for _ in range(steps):
        coef = coef - 0.1 * sums.xtg / sums.weight_sum
        offset = offset - 0.1 * sums.gsum / sums.weight_sum
        t0 = time.perf_counter()
        sums = engine.gradient_sums(coef, offset, aux)
        times.append(time.perf_counter() - t0)
    return times


def engine_steps(df, cols: int, steps: int, strategies: Sequence[str]) -> Dict[str, dict]:
    """Per-step medians of each strategy, plus each data path's one-pass setup time."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.dataset import NumpyTrainingData
    from gradspark.engine import PythonGradientEngine
    from gradspark.data.jvm import JvmTrainingData
    from gradspark.engine.jvm import JvmGradientEngine
    from gradspark.engine.resident import ResidentGradientEngine
    from gradspark.losses import BinaryLogisticLoss

    loss, out = BinaryLogisticLoss(), {}
    with ExitStack() as stack:
        t0 = time.perf_counter()
        jvm_data = stack.enter_context(JvmTrainingData(df, FEATURES, LABEL, None, BINARY,
                                                       4096, 2))
        out["setup jvm blockify"] = {"median_s": time.perf_counter() - t0}
        for name in strategies:
            if name == "python jobPerStep":
                t0 = time.perf_counter()
                data = stack.enter_context(NumpyTrainingData(df, FEATURES, LABEL, None, BINARY,
                                                        4096, 2))
                out["setup python blockify"] = {"median_s": time.perf_counter() - t0}
                engine = PythonGradientEngine(data.blocks, loss, 2)
            elif name == "jvm jobPerStep":
                engine = JvmGradientEngine(jvm_data, loss, 2)
            else:
                engine = stack.enter_context(ResidentGradientEngine(
                    jvm_data.block_source(), loss, cols, 1, host="127.0.0.1"))
            times = step_times(engine, cols, steps)
            out[name] = {"median_s": median(times), "samples_s": times}
            print(f"  {name:<22} {median(times):8.4f} s/step", flush=True)
    return out


MLLIB_EVALUATION_JOB = "treeAggregate at RDDLossFunction"


def _spark_jobs(spark) -> List[dict]:
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _job_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%Z").timestamp()


def mllib_evaluations(spark, df, max_iter: int, repeats: int) -> Dict[str, dict]:
    """MLlib's cost per gradient evaluation and per iteration, from its jobs' completion times.

    One warm-up fit, then ``repeats`` fits of ``LogisticRegression(maxIter, tol=0)``;
    the intervals between consecutive evaluation jobs of each fit are pooled.
    """
    from pyspark.ml.classification import LogisticRegression

    def fit():
        return LogisticRegression(featuresCol=FEATURES, labelCol=LABEL, maxIter=max_iter,
                                  tol=0.0, regParam=0.0, aggregationDepth=2).fit(df)

    fit()
    intervals: List[float] = []
    per_iteration: List[float] = []
    for r in range(repeats):
        before = max((job["jobId"] for job in _spark_jobs(spark)), default=-1)
        iterations = fit().summary.totalIterations
        deadline = time.time() + 30  # the status store is fed by the listener bus, async
        while True:
            jobs = sorted((job for job in _spark_jobs(spark) if job["jobId"] > before
                           and job["name"].startswith(MLLIB_EVALUATION_JOB)),
                          key=lambda job: job["jobId"])
            if all(job.get("completionTime") for job in jobs) or time.time() > deadline:
                break
            time.sleep(0.2)
        done = [_job_time(job["completionTime"]) for job in jobs if job.get("completionTime")]
        gaps = [b - a for a, b in zip(done, done[1:])]
        intervals += gaps
        # The first job is the evaluation at the starting point; the rest serve the iterations.
        per_iteration.append(sum(gaps) / max(iterations, 1))
        print(f"[MLlib] fit {r + 1}/{repeats}: {iterations} iterations, {len(done)} evaluations, "
              f"median {median(gaps):.4f} s per evaluation, {per_iteration[-1]:.4f} s per "
              "iteration", flush=True)
    return {"MLlib evaluation": {"median_s": median(intervals), "samples_s": intervals},
            "MLlib iteration": {"median_s": median(per_iteration), "samples_s": per_iteration}}


def mean_log_loss_history(model) -> float:
    return float(model.summary.objectiveHistory[-1])


def end_to_end(df, repeats: int) -> Dict[str, dict]:
    from pyspark.ml.classification import LogisticRegression

    from gradspark import SGDLogisticRegression

    fits = {
        "MLlib LogisticRegression fit": lambda: LogisticRegression(
            featuresCol=FEATURES, labelCol=LABEL).fit(df),
        "gradspark SGDLogisticRegression fit": lambda: SGDLogisticRegression(
            featuresCol=FEATURES, labelCol=LABEL, parameterServerHost="127.0.0.1").fit(df),
        # The default tol stops on a relative change of 1e-6; this one goes on to
        # (or below) the objective MLlib reaches.
        "gradspark fit, tol=1e-10": lambda: SGDLogisticRegression(
            featuresCol=FEATURES, labelCol=LABEL, tol=1e-10,
            parameterServerHost="127.0.0.1").fit(df),
        "gradspark fit, resident": lambda: SGDLogisticRegression(
            featuresCol=FEATURES, labelCol=LABEL, executionStrategy="resident",
            parameterServerHost="127.0.0.1").fit(df),
    }
    out = {}
    for name, fit in fits.items():
        fit()  # warm-up
        times, objectives, extra = [], [], {}
        for _ in range(repeats):
            t0 = time.perf_counter()
            model = fit()
            times.append(time.perf_counter() - t0)
            objectives.append(mean_log_loss_history(model))
            extra = getattr(model.summary, "extra", {})
        out[name] = {"median_s": median(times), "samples_s": times,
                     "objective": median(objectives),
                     "iterations": model.summary.totalIterations,
                     "strategy": extra.get("executionStrategy", "")}
        print(f"  {name:<36} {median(times):7.2f} s, objective {median(objectives):.8f}, "
              f"{model.summary.totalIterations} iterations {out[name]['strategy']}", flush=True)
    return out


def measure(spark, args, label: str, df, cols: int, floor_X, floor_y) -> dict:
    print(f"\n== {label}", flush=True)
    result: Dict[str, object] = {}
    floors = numpy_floor(floor_X, floor_y, args.steps)
    # The floor is the faster way numpy alone does the pass on this machine.
    result["numpy floor"] = {"median_s": min(floors.values()), **floors}
    print(f"  numpy floor            {floors}", flush=True)
    result.update(mllib_evaluations(spark, df, args.mllib_iterations, args.mllib_repeats))
    result.update(engine_steps(df, cols, args.steps,
                               ("python jobPerStep", "jvm jobPerStep", "resident")))
    result.update(end_to_end(df, args.repeats))
    return result


def print_table(label: str, result: dict) -> None:
    floor = result["numpy floor"]["median_s"]
    mllib = result["MLlib evaluation"]["median_s"]
    print(f"\n{label}\n{'':38}{'seconds':>10}{'/ floor':>10}{'/ MLlib eval':>13}")
    for name, figure in result.items():
        if name.startswith("setup") or "fit" in name:
            continue
        s = figure["median_s"]
        print(f"{name:38}{s:10.4f}{s / floor:10.2f}{s / mllib:13.2f}")
    for name, figure in result.items():
        if name.startswith("setup"):
            print(f"{name:38}{figure['median_s']:10.2f}")
    fits = {k: v for k, v in result.items() if "fit" in k}
    ref = fits.get("MLlib LogisticRegression fit")
    for name, figure in fits.items():
        ratio = figure["median_s"] / ref["median_s"]
        print(f"{name:38}{figure['median_s']:10.2f}{'':10}{ratio:13.2f}"
              f"   objective {figure['objective']:.8f}")


def scaling(spark, args) -> dict:
    """Step cost of the resident and jvm strategies at three sizes of each dimension."""
    base_rows, base_cols, base_parts = args.rows // 4, args.cols, args.partitions
    grid = [("rows", r, base_cols, base_parts) for r in (base_rows // 2, base_rows, 2 * base_rows)]
    grid += [("features", base_rows, c, base_parts) for c in (base_cols // 4, base_cols,
                                                               4 * base_cols)]
    grid += [("partitions", base_rows, base_cols, p) for p in (base_parts, 2 * base_parts,
                                                               4 * base_parts)]
    out = []
    for dimension, rows, cols, parts in grid:
        print(f"\n== scaling: {rows} x {cols}, {parts} partitions", flush=True)
        df = make_data(spark, rows, cols, parts, 42, 0.5)
        steps = engine_steps(df, cols, max(3, args.steps // 2), ("jvm jobPerStep", "resident"))
        out.append({"dimension": dimension, "rows": rows, "cols": cols, "partitions": parts,
                    **{k: v["median_s"] for k, v in steps.items()}})
        df.unpersist()
    print(f"\n{'dimension':12}{'rows':>10}{'cols':>6}{'parts':>6}{'jvm s':>10}{'resident s':>12}")
    for row in out:
        print(f"{row['dimension']:12}{row['rows']:10d}{row['cols']:6d}{row['partitions']:6d}"
              f"{row['jvm jobPerStep']:10.4f}{row['resident']:12.4f}")
    return {"scaling": out}


def fixed_cost(spark, steps: int = 30) -> dict:
    """A JVM step on 2 x 1,000 sparse rows of 10,000 features (all fixed cost), split
    into the Spark job (its submission-to-completion, from Spark's job records) and
    the driver's time around it."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.jvm import JvmTrainingData
    from gradspark.engine.jvm import JvmGradientEngine
    from gradspark.losses import BinaryLogisticLoss

    cols = 10_000
    df = make_sparse(spark, 2_000, cols, 0.01, 2)
    with JvmTrainingData(df, FEATURES, LABEL, None, BINARY, 4096, 2) as data:
        engine = JvmGradientEngine(data, BinaryLogisticLoss(), 2)
        step_times(engine, cols, 3)
        before = max(job["jobId"] for job in _spark_jobs(spark))
        steps_s = step_times(engine, cols, steps)
    time.sleep(2)  # the status store is fed asynchronously
    jobs = [job for job in _spark_jobs(spark) if job["jobId"] > before]
    jobs_s = [_job_time(job["completionTime"]) - _job_time(job["submissionTime"])
              for job in jobs if job.get("completionTime")]
    df.unpersist()
    out = {"step_s": median(steps_s), "job_s": median(jobs_s),
           "driver_s": median(steps_s) - median(jobs_s)}
    print(f"\nfixed cost of a JVM step: step {out['step_s']:.4f} s = Spark job "
          f"{out['job_s']:.4f} s + driver {out['driver_s']:.4f} s (medians, {steps} steps)")
    return {"fixed cost": out}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    load = os.getloadavg()[0]
    spark = build_session(args.master, args.driver_memory)
    figures: Dict[str, object] = {"config": vars(args), "load_average_before": load}
    try:
        warm_python_workers(spark)
        datasets = args.datasets.split(",")
        if "dense" in datasets:
            df = make_data(spark, args.rows, args.cols, args.partitions, 42, 0.5)
            X, y = local_copy(args.rows, args.cols, False, 1.0)
            figures["dense"] = measure(spark, args, f"dense {args.rows:,} x {args.cols}", df,
                                       args.cols, X, y)
            del X, y
            df.unpersist()
        if "sparse" in datasets:
            df = make_sparse(spark, args.sparse_rows, args.sparse_cols, args.density,
                             args.partitions)
            X, y = local_copy(args.sparse_rows, args.sparse_cols, True, args.density)
            figures["sparse"] = measure(
                spark, args, f"sparse {args.sparse_rows:,} x {args.sparse_cols:,} at "
                f"{args.density:.1%}", df, args.sparse_cols, X, y)
            del X, y
            df.unpersist()
        if args.scaling:
            figures.update(scaling(spark, args))
        if args.fixed_cost:
            figures.update(fixed_cost(spark))
        print(f"\n{os.cpu_count()} CPUs, {args.master}, {args.partitions} partitions; "
              f"load average before start {load:.2f}; medians")
        for name in ("dense", "sparse"):
            if name in figures:
                print_table(name, figures[name])
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(figures, out, indent=2)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
