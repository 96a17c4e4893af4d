"""Bytes per step and time-to-target-loss of each communication lever, against plain sync.

One run, one SparkSession (``local[2]``: two resident workers), two cached
datasets that every fit trains from:

* ``dense``: ``--rows`` x ``--cols`` standard-normal features (``async_vs_sync.py``'s
  generator);
* ``sparse``: ``--sparse-rows`` x ``--sparse-cols`` at ``--density``
  (``engine.py``'s generator: uniform non-zeros, generated on the executors).

Every configuration fits ``SGDLogisticRegression(optimizer="sgd")`` for
``--steps`` steps with mini-batches (``--fraction`` dense,
``--sparse-fraction`` sparse, so a sparse step touches few features;
``--step-size`` and ``--sparse-step-size``):
``sync`` (resident workers, exact messages: sparse index/value pairs when
smaller), ``fp16``, ``topk`` at 1% with and without error feedback, and
``localSteps=4``; and, for comparison, one Spark job per step with the numpy
engine (``jobs``), exact and with fp16 partition sums. The model summary gives the bytes the driver received and
sent per step. The per-step loss gradspark logs is smoothed over
``--window`` steps (a mini-batch loss is noisy); the target is sync's final
smoothed loss plus 1%, and time-to-target is the first moment a smoothed
loss is at or below it, since ``fit`` started. Ratios are against sync on
the same dataset; each configuration runs ``--repeats`` times and the
median is printed. "-" means the target was never reached.

    .venv/bin/python benchmarks/communication.py
    .venv/bin/python benchmarks/communication.py --rows 20000 --sparse-rows 20000 \\
        --sparse-cols 10000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

from async_vs_sync import StepLog, make_data, time_to  # noqa: E402
from engine import make_sparse  # noqa: E402
from gradspark import SGDLogisticRegression  # noqa: E402

CONFIGS = [
    ("sync", {}),
    ("fp16", dict(compression="fp16")),
    ("topk 1%", dict(compression="topk", compressionRatio=0.01)),
    ("topk 1% no EF", dict(compression="topk", compressionRatio=0.01, errorFeedback=False)),
    ("local k=4", dict(localSteps=4)),
    ("jobs", dict(executionStrategy="jobPerStep", engine="python")),
    ("jobs fp16", dict(executionStrategy="jobPerStep", engine="python", compression="fp16")),
]


def smoothed(points, window: int):
    """(time, mean loss of the last ``window`` logged steps) for every step after the first
    ``window - 1``."""
    return [(points[i][0], statistics.fmean(loss for _, loss in points[i + 1 - window: i + 1]))
            for i in range(window - 1, len(points))]


def run_dataset(df, label: str, fraction: float, step_size: float, args, log: StepLog) -> list:
    base = dict(optimizer="sgd", stepSize=step_size, tol=0.0, maxIter=args.steps,
                miniBatchFraction=fraction, executionStrategy="resident",
                parameterServerHost="127.0.0.1")
    configs = [(name, extra) for name, extra in CONFIGS if name in args.settings.split(",")]
    SGDLogisticRegression(**dict(base, maxIter=2)).fit(df)  # warm up workers and the JVM
    runs = {}
    for name, extra in configs:
        for _ in range(args.repeats):
            log.reset()
            extra_metrics = SGDLogisticRegression(**{**base, **extra}).fit(df).summary.extra
            # Local SGD logs one loss per round: smooth over the same number of steps.
            window = max(1, args.window // extra.get("localSteps", 1))
            runs.setdefault(name, []).append((smoothed(log.points, window), extra_metrics))
    target = 1.01 * statistics.median(points[-1][1] for points, _ in runs["sync"])
    print(f"\n{label}: sgd stepSize {step_size}, miniBatchFraction {fraction}, "
          f"{args.steps} steps, 2 workers; target {target:.6f} (sync's final loss, smoothed "
          f"over {args.window} steps, + 1%); median of {args.repeats}")
    print(f"{'setting':<15}{'in B/step':>12}{'ratio':>8}{'out B/step':>12}{'ratio':>8}"
          f"{'to target s':>13}{'ratio':>8}{'final loss':>12}")
    rows, sync = [], {}
    for name, _ in configs:
        figures = runs[name]
        received = statistics.median(m["bytesReceivedPerStep"] for _, m in figures)
        sent = statistics.median(m["bytesSentPerStep"] for _, m in figures)
        reached = [time_to(points, target) for points, _ in figures]
        to_target = statistics.median(reached) if None not in reached else None
        final = statistics.median(points[-1][1] for points, _ in figures)
        if name == "sync":
            sync = dict(received=received, sent=sent, to_target=to_target)
        ratios = [received / sync["received"], sent / sync["sent"],
                  to_target / sync["to_target"] if to_target and sync["to_target"] else None]
        print(f"{name:<15}{received:>12,.0f}{ratios[0]:>7.3f}x{sent:>12,.0f}{ratios[1]:>7.3f}x"
              f"{'-' if to_target is None else f'{to_target:.2f}':>13}"
              f"{'-' if ratios[2] is None else f'{ratios[2]:.2f}x':>8}{final:>12.6f}")
        rows.append(dict(dataset=label, setting=name, bytes_received_per_step=received,
                         bytes_sent_per_step=sent, time_to_target=to_target,
                         received_ratio=ratios[0], sent_ratio=ratios[1],
                         time_ratio=ratios[2], final_loss=final))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cols", type=int, default=100)
    parser.add_argument("--sparse-rows", type=int, default=200_000)
    parser.add_argument("--sparse-cols", type=int, default=100_000)
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--fraction", type=float, default=0.05)
    parser.add_argument("--sparse-fraction", type=float, default=0.002)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-size", type=float, default=0.1)
    parser.add_argument("--sparse-step-size", type=float, default=0.01)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--datasets", default="dense,sparse", help="comma-separated")
    parser.add_argument("--settings", default=",".join(name for name, _ in CONFIGS),
                        help="comma-separated names from the table (sync is the baseline "
                             "and must be included)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "8g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    log = StepLog()
    trainer_log = logging.getLogger("gradspark.trainer")
    trainer_log.addHandler(log)
    trainer_log.setLevel(logging.INFO)
    rows = []
    datasets = args.datasets.split(",")
    if "dense" in datasets:
        df = make_data(spark, args.rows, args.cols, 2)
        df.count()
        rows += run_dataset(df, f"dense {args.rows:,} x {args.cols}", args.fraction,
                            args.step_size, args, log)
        df.unpersist()
    if "sparse" in datasets:
        df = make_sparse(spark, args.sparse_rows, args.sparse_cols, args.density, 2)
        df.count()
        rows += run_dataset(df, f"sparse {args.sparse_rows:,} x {args.sparse_cols:,} at "
                                f"{args.density:.1%}", args.sparse_fraction,
                            args.sparse_step_size, args, log)
    spark.stop()
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "rows": rows}, out, indent=2)


if __name__ == "__main__":
    main()
