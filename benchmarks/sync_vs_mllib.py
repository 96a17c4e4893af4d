"""Time gradspark's sync-mode gradient step against Spark MLlib's logistic regression.

One run, one SparkSession, one cached synthetic DataFrame that both libraries
train from. The figures:

* **MLlib iteration** -- ``pyspark.ml.classification.LogisticRegression`` with
  ``tol=0, regParam=0`` is fitted with ``maxIter=k_small`` and
  ``maxIter=k_large``; the per-iteration time is
  ``(t_large - t_small) / (iters_large - iters_small)`` with the iteration
  counts read from ``model.summary.totalIterations``. The difference cancels
  what every fit pays once (blockifying and caching the instances, the
  standardization pass). The intercept of that line,
  ``t_small - iters_small * per_iteration``, is reported as the fixed cost per fit.
* **gradspark engine step** -- gradspark's internals are driven directly:
  ``NumpyTrainingData`` (one pass: validate, blockify, cache, statistics; timed
  on its own as "setup"), then ``PythonGradientEngine.gradient_sums`` --
  one broadcast of the weights plus one ``treeAggregate`` of the gradient
  sums over all rows -- followed by a plain gradient-descent update on the
  driver. After one warm-up step, ``--steps`` steps are timed one by one.
* **gradspark estimator iteration** -- ``gradspark.SGDLogisticRegression``
  (default optimizer: L-BFGS) timed end to end by the same difference
  method as MLlib. An L-BFGS iteration may evaluate the gradient more than
  once (line search), so the time per gradient evaluation, from
  ``model.summary.extra["gradientEvaluations"]``, is reported as well.
  MLlib (breeze's L-BFGS) does not expose its evaluation count, so its
  figure is per iteration only.

* **gradspark read-only pass** -- a job of the same shape as an engine step
  that only unpickles the cached blocks and counts rows: the part of a step
  that is moving data from the JVM block store into the Python workers.

Every difference figure is computed ``--repeats`` times and the median is
reported. Each estimator first gets ``--warmup-fits`` untimed fits (two by
default: in the JVM the second fit of a session is still measurably slower
than later ones), and the Python workers are started, with gradspark
imported, before anything is timed, so no measurement includes JIT
compilation or interpreter start-up. Ratios are gradspark / MLlib: above 1
means gradspark is slower.

The features are correlated (``--correlation``, default 0.5) on purpose:
with independent features the problem is so well conditioned that both
L-BFGS implementations reach their gradient-norm floor after about 7
iterations even with ``tol=0``, leaving the difference method almost no
extra iterations to measure.

Run from the repository root::

    .venv/bin/python benchmarks/sync_vs_mllib.py                      # 1,000,000 x 100
    .venv/bin/python benchmarks/sync_vs_mllib.py --rows 100000 --cols 20 --json out.json

See ``benchmarks/README.md`` for what the numbers do and do not mean.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

LABEL = "label"
FEATURES = "features"

READ_ONLY_PASSES = 3

# What one timed fit reports: (iterations, gradient evaluations or None).
FitCounts = Tuple[int, Optional[int]]
FitFn = Callable[[int], FitCounts]


# -- command line -----------------------------------------------------------

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="number of rows")
    parser.add_argument("--cols", type=int, default=100, help="number of dense features")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the data")
    parser.add_argument("--master", default="local[2]", help="Spark master URL")
    parser.add_argument("--driver-memory", default="12g", help="spark.driver.memory")
    parser.add_argument("--seed", type=int, default=42, help="seed of the synthetic data")
    parser.add_argument("--correlation", type=float, default=0.5,
                        help="correlation between every pair of features, in [0, 1)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="difference measurements per estimator (median reported)")
    parser.add_argument("--warmup-fits", type=int, default=2,
                        help="untimed fits per estimator before the repeats (JIT warm-up)")
    parser.add_argument("--steps", type=int, default=10,
                        help="timed gradspark engine steps (median reported)")
    parser.add_argument("--k-small", type=int, default=2, help="maxIter of the short fit")
    parser.add_argument("--k-large", type=int, default=22, help="maxIter of the long fit")
    parser.add_argument("--block-size", type=int, default=4096, help="gradspark rows per block")
    parser.add_argument("--aggregation-depth", type=int, default=2,
                        help="treeAggregate depth (both libraries)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if not 0 < args.k_small < args.k_large:
        parser.error("need 0 < --k-small < --k-large")
    if not 0.0 <= args.correlation < 1.0:
        parser.error("--correlation must be in [0, 1)")
    for name in ("rows", "cols", "partitions", "repeats", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup_fits < 0:
        parser.error("--warmup-fits must be at least 0")
    return args


# -- Spark and the data -----------------------------------------------------

def build_session(master: str, driver_memory: str):
    # Executors (Python workers) must run this interpreter: the venv has
    # gradspark, numpy and scipy. It has to be set before the JVM starts.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("gradspark sync vs MLlib benchmark")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def true_coefficients(cols: int, seed: int) -> Tuple[np.ndarray, float]:
    """The logistic model the labels are drawn from (a d-vector, not data)."""
    rng = np.random.default_rng(seed)
    # Scaled so the margin has standard deviation ~1.5: classes overlap, and
    # the optimum is finite (no separable data).
    beta = rng.normal(size=cols) * (1.5 / np.sqrt(cols))
    return beta, 0.25


def make_data(spark, rows: int, cols: int, partitions: int, seed: int, correlation: float):
    """Cached DataFrame(features: dense vector, label: 0/1), generated inside Spark.

    Feature ``j`` is ``sqrt(1 - rho) * e_j + sqrt(rho) * f`` with independent
    standard normals ``e_j`` and one shared factor ``f``: every pair of
    features has correlation ``rho``. Some correlation makes the problem less
    trivially conditioned, so L-BFGS does not converge to machine precision
    (and stop) within the ``maxIter`` values the difference method needs.
    """
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    beta, intercept = true_coefficients(cols, seed)
    names = [f"x{j}" for j in range(cols)]
    factor = F.randn(seed + cols + 1)
    own, shared = float(np.sqrt(1.0 - correlation)), float(np.sqrt(correlation))
    raw = (
        spark.range(rows, numPartitions=partitions)
        .select(factor.alias("factor"))
        .select(*[(own * F.randn(seed + j) + shared * F.col("factor")).alias(name)
                  for j, name in enumerate(names)])
    )
    margin = F.lit(float(intercept))
    for name, b in zip(names, beta):
        margin = margin + F.lit(float(b)) * F.col(name)
    probability = F.lit(1.0) / (F.lit(1.0) + F.exp(-margin))
    labelled = raw.withColumn(LABEL, (F.rand(seed + cols) < probability).cast("double"))
    df = (
        VectorAssembler(inputCols=names, outputCol=FEATURES)
        .transform(labelled)
        .select(FEATURES, LABEL)
        .cache()
    )
    df.count()
    return df


def warm_python_workers(spark) -> None:
    """Start the Python workers and import gradspark's executor-side modules in them.

    Workers are reused across tasks (``spark.python.worker.reuse``), so the
    first gradspark pass timed afterwards does not include interpreter start-up.
    """
    sc = spark.sparkContext
    slices = sc.defaultParallelism

    def touch(_: int) -> int:
        import gradspark.data.blocks  # noqa: F401  (numpy, scipy.sparse, pyspark.ml.linalg)
        import gradspark.engine  # noqa: F401
        return 1

    sc.parallelize(range(slices), slices).map(touch).count()


# -- timing helpers ---------------------------------------------------------

def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


@dataclass
class FitTiming:
    seconds: float
    iterations: int
    evaluations: Optional[int]


def time_fit(fit: FitFn, max_iter: int) -> FitTiming:
    start = time.perf_counter()
    iterations, evaluations = fit(max_iter)
    return FitTiming(time.perf_counter() - start, iterations, evaluations)


@dataclass
class DifferenceResult:
    """Per-iteration cost of an estimator from pairs of short and long fits."""

    per_iteration_s: float  # median over repeats
    per_evaluation_s: Optional[float]  # median; None when the count is unknown
    fixed_cost_s: float  # median time a fit spends outside its iterations
    per_iteration_samples_s: List[float] = field(default_factory=list)
    per_evaluation_samples_s: List[float] = field(default_factory=list)
    pairs: List[Dict[str, FitTiming]] = field(default_factory=list)


def per_iteration_by_difference(
    fit: FitFn, k_small: int, k_large: int, repeats: int, warmup_fits: int, label: str
) -> DifferenceResult:
    """Median over ``repeats`` of (t_large - t_small) / (iters_large - iters_small)."""
    for w in range(warmup_fits):
        max_iter = k_large if w % 2 == 0 else k_small
        print(f"[{label}] warm-up fit {w + 1}/{warmup_fits} (maxIter={max_iter}) ...", flush=True)
        time_fit(fit, max_iter)
    per_iter: List[float] = []
    per_eval: List[float] = []
    fixed: List[float] = []
    pairs: List[Dict[str, FitTiming]] = []
    for r in range(repeats):
        small = time_fit(fit, k_small)
        large = time_fit(fit, k_large)
        pairs.append({"small": small, "large": large})
        extra_iters = large.iterations - small.iterations
        if extra_iters <= 0:
            raise RuntimeError(
                f"{label}: maxIter={k_large} ran {large.iterations} iterations and "
                f"maxIter={k_small} ran {small.iterations}; the difference method needs "
                "more iterations in the long fit (did it converge early?)"
            )
        per_iter.append((large.seconds - small.seconds) / extra_iters)
        fixed.append(small.seconds - small.iterations * per_iter[-1])
        if small.evaluations is not None and large.evaluations is not None:
            per_eval.append(
                (large.seconds - small.seconds) / (large.evaluations - small.evaluations)
            )
        evals = (f", evaluations {small.evaluations} -> {large.evaluations}"
                 if small.evaluations is not None else "")
        print(
            f"[{label}] repeat {r + 1}/{repeats}: {small.seconds:.2f}s "
            f"({small.iterations} it) / {large.seconds:.2f}s ({large.iterations} it){evals} "
            f"-> {per_iter[-1]:.4f} s/it",
            flush=True,
        )
    return DifferenceResult(
        per_iteration_s=median(per_iter),
        per_evaluation_s=median(per_eval) if per_eval else None,
        fixed_cost_s=median(fixed),
        per_iteration_samples_s=per_iter,
        per_evaluation_samples_s=per_eval,
        pairs=pairs,
    )


# -- the three measurements ---------------------------------------------------

def mllib_fit(df, aggregation_depth: int) -> FitFn:
    from pyspark.ml.classification import LogisticRegression

    def fit(max_iter: int) -> FitCounts:
        model = LogisticRegression(
            featuresCol=FEATURES, labelCol=LABEL, maxIter=max_iter, tol=0.0, regParam=0.0,
            aggregationDepth=aggregation_depth,
        ).fit(df)
        return model.summary.totalIterations, None

    return fit


def gradspark_fit(df, block_size: int, aggregation_depth: int) -> FitFn:
    from gradspark import SGDLogisticRegression

    def fit(max_iter: int) -> FitCounts:
        model = SGDLogisticRegression(
            featuresCol=FEATURES, labelCol=LABEL, maxIter=max_iter, tol=0.0,
            blockSize=block_size, aggregationDepth=aggregation_depth,
        ).fit(df)
        return model.summary.totalIterations, model.summary.extra["gradientEvaluations"]

    return fit


@dataclass
class EngineResult:
    setup_s: float  # NumpyTrainingData: validate + blockify + cache + statistics
    per_step_s: float  # median
    step_samples_s: List[float]
    read_only_pass_s: float  # median pass that only reads (unpickles) the cached blocks
    read_only_samples_s: List[float]
    mean_loss_first: float  # sanity: a real descent lowers the loss
    mean_loss_last: float


def time_read_only_pass(blocks, passes: int, aggregation_depth: int) -> List[float]:
    """Passes shaped like a gradient pass that only unpickle the blocks and count rows.

    The blocks live in the JVM's block store as pickled bytes; every gradient
    pass ships them to the Python workers and unpickles them. This is that
    floor (same job shape: one task per partition, then ``treeAggregate``),
    so ``step - read_only`` is roughly the numpy work plus the broadcast.
    """

    def count_rows(iterator) -> List[int]:
        return [sum(len(block.labels) for block in iterator)]

    times: List[float] = []
    for _ in range(passes):
        t0 = time.perf_counter()
        blocks.mapPartitions(count_rows).treeAggregate(
            0, operator.add, operator.add, depth=aggregation_depth)
        times.append(time.perf_counter() - t0)
    return times


def time_engine_steps(
    df, num_features: int, steps: int, block_size: int, aggregation_depth: int,
    learning_rate: float = 0.1,
) -> EngineResult:
    """Time full-batch gradient-descent steps on gradspark's engine, one at a time."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.dataset import NumpyTrainingData
    from gradspark.engine import PythonGradientEngine
    from gradspark.losses import BinaryLogisticLoss

    start = time.perf_counter()
    data = NumpyTrainingData(df, FEATURES, LABEL, None, BINARY, block_size=block_size,
                        aggregation_depth=aggregation_depth)
    setup = time.perf_counter() - start
    print(f"[gradspark engine] setup (TrainingData) {setup:.2f}s", flush=True)
    try:
        engine = PythonGradientEngine(data.blocks, BinaryLogisticLoss(), aggregation_depth)
        coef = np.zeros((num_features, 1))
        offset = np.zeros(1)
        aux = np.zeros(0)
        sums = engine.gradient_sums(coef, offset, aux)  # warm-up step, untimed
        first_loss = sums.loss_sum / sums.weight_sum
        times: List[float] = []
        for _ in range(steps):
            t0 = time.perf_counter()
            coef = coef - learning_rate * sums.xtg / sums.weight_sum
            offset = offset - learning_rate * sums.gsum / sums.weight_sum
            sums = engine.gradient_sums(coef, offset, aux)
            times.append(time.perf_counter() - t0)
        last_loss = sums.loss_sum / sums.weight_sum
        print(
            f"[gradspark engine] {steps} steps, median {median(times):.4f}s "
            f"(min {min(times):.4f}, max {max(times):.4f}); "
            f"mean loss {first_loss:.6f} -> {last_loss:.6f}",
            flush=True,
        )
        read_only = time_read_only_pass(data.blocks, READ_ONLY_PASSES, aggregation_depth)
        print(f"[gradspark engine] read-only pass, median {median(read_only):.4f}s", flush=True)
    finally:
        data.release()
    return EngineResult(setup, median(times), times, median(read_only), read_only,
                        first_loss, last_loss)


# -- report -------------------------------------------------------------------

def fmt_seconds(value: Optional[float]) -> str:
    return "       n/a  " if value is None else f"{value:10.4f} s"


def fmt_ratio(value: Optional[float]) -> str:
    return "     n/a" if value is None else f"{value:7.2f}x"


def fmt_range(samples: Sequence[float]) -> str:
    return f"[{min(samples):.4f} .. {max(samples):.4f}]"


def report(
    args: argparse.Namespace, load_start: float, data_s: float, mllib: DifferenceResult,
    engine: EngineResult, estimator: DifferenceResult,
) -> Dict[str, object]:
    base = mllib.per_iteration_s
    ratios = {
        "engine_step": engine.per_step_s / base,
        "estimator_iteration": estimator.per_iteration_s / base,
        "estimator_evaluation": (estimator.per_evaluation_s / base
                                 if estimator.per_evaluation_s is not None else None),
        "read_only_pass": engine.read_only_pass_s / base,
    }
    rows = [
        ("MLlib LogisticRegression iteration", base, 1.0, mllib.per_iteration_samples_s),
        ("gradspark engine step", engine.per_step_s, ratios["engine_step"],
         engine.step_samples_s),
        ("gradspark estimator iteration (L-BFGS)", estimator.per_iteration_s,
         ratios["estimator_iteration"], estimator.per_iteration_samples_s),
        ("gradspark estimator per gradient eval", estimator.per_evaluation_s,
         ratios["estimator_evaluation"], estimator.per_evaluation_samples_s),
        ("gradspark read-only pass (no compute)", engine.read_only_pass_s,
         ratios["read_only_pass"], engine.read_only_samples_s),
    ]
    rule = "=" * 88
    lines = [
        "",
        rule,
        f"gradspark sync vs MLlib LogisticRegression | {args.rows:,} rows x {args.cols} "
        f"dense features",
        f"master {args.master}, {args.partitions} partitions, driver memory "
        f"{args.driver_memory}; maxIter {args.k_small} vs {args.k_large}, "
        f"{args.repeats} repeats, {args.steps} engine steps; feature correlation "
        f"{args.correlation}",
        f"{os.cpu_count()} CPUs; 1-minute load average before start {load_start:.2f} "
        "(other work on the machine distorts every figure)",
        rule,
        "setup (once)",
        f"  {'generate + cache DataFrame':<40}{fmt_seconds(data_s)}",
        f"  {'gradspark NumpyTrainingData (one pass)':<40}{fmt_seconds(engine.setup_s)}",
        f"  {'MLlib fixed cost per fit':<40}{fmt_seconds(mllib.fixed_cost_s)}",
        f"  {'gradspark estimator fixed cost per fit':<40}{fmt_seconds(estimator.fixed_cost_s)}",
        f"{'per iteration (median)':<42}{'seconds':>12}  {'gs/MLlib':>8}  range of samples",
    ]
    for name, value, ratio, samples in rows:
        spread = fmt_range(samples) if samples else ""
        lines.append(f"  {name:<40}{fmt_seconds(value)}  {fmt_ratio(ratio)}  {spread}".rstrip())
    lines.append(rule)
    print("\n".join(lines), flush=True)
    return {
        "config": vars(args),
        "environment": environment(),
        "load_average_1m_before_start": load_start,
        "setup_s": {
            "generate_and_cache": data_s,
            "gradspark_training_data": engine.setup_s,
            "mllib_fixed_cost_per_fit": mllib.fixed_cost_s,
            "gradspark_estimator_fixed_cost_per_fit": estimator.fixed_cost_s,
        },
        "mllib": asdict(mllib),
        "gradspark_engine": asdict(engine),
        "gradspark_estimator": asdict(estimator),
        "ratio_gradspark_over_mllib": ratios,
    }


def environment() -> Dict[str, str]:
    import pyspark
    import scipy

    return {
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "platform": platform.platform(),
        "cpu_count": str(os.cpu_count()),
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()[0]
    spark = build_session(args.master, args.driver_memory)
    try:
        print(f"generating {args.rows:,} x {args.cols} in {args.partitions} partitions ...",
              flush=True)
        start = time.perf_counter()
        df = make_data(
            spark, args.rows, args.cols, args.partitions, args.seed, args.correlation)
        data_s = time.perf_counter() - start
        print(f"data cached in {data_s:.2f}s", flush=True)

        warm_python_workers(spark)
        mllib = per_iteration_by_difference(
            mllib_fit(df, args.aggregation_depth), args.k_small, args.k_large, args.repeats,
            args.warmup_fits, "MLlib")
        engine = time_engine_steps(
            df, args.cols, args.steps, args.block_size, args.aggregation_depth)
        estimator = per_iteration_by_difference(
            gradspark_fit(df, args.block_size, args.aggregation_depth),
            args.k_small, args.k_large, args.repeats, args.warmup_fits, "gradspark estimator")

        figures = report(args, load_start, data_s, mllib, engine, estimator)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(figures, out, indent=2)
            print(f"figures written to {args.json}")
        df.unpersist()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
