"""Time-to-target-loss of sync vs async mode, with and without a straggler.

One run, one SparkSession (``local[2]``: two workers), one cached synthetic
logistic-regression DataFrame that every fit trains from. Every configuration
fits ``SGDLogisticRegression(optimizer="adam")`` for ``--steps`` steps; the
per-step loss that gradspark logs (logger ``gradspark.trainer``) is recorded
with its time since ``fit`` started. The target is sync mode's final loss
without a straggler, plus 1%; a configuration's time-to-target is the first
moment its logged loss is at or below the target (end to end: it includes the
one blockifying pass every fit makes, the same for all).

The straggler is gradspark's test-only fault plan (``GRADSPARK_FAULTS``):
partition 1 sleeps ``--straggler-seconds`` before every batch, in sync mode
(each step's task of that partition) and async mode (that worker's every
mini-batch) alike.

Each configuration runs ``--repeats`` times; the median is printed, with the
ratio to sync mode under the same straggler condition (below 1: async reaches
the target sooner). A configuration that never reaches the target shows "-".

    .venv/bin/python benchmarks/async_vs_sync.py
    .venv/bin/python benchmarks/async_vs_sync.py --rows 50000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession, functions as F  # noqa: E402
from pyspark.ml.feature import VectorAssembler  # noqa: E402

from gradspark import SGDLogisticRegression  # noqa: E402
from gradspark.testing.faults import ENVIRONMENT_VARIABLE  # noqa: E402

CONFIGS = [("sync", {}), ("async s=0", dict(mode="async", maxStaleness=0)),
           ("async s=2", dict(mode="async", maxStaleness=2)),
           ("async s=-1", dict(mode="async", maxStaleness=-1))]


class StepLog(logging.Handler):
    """Collects (seconds since reset, loss) from the trainer's per-step log records."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.reset()

    def reset(self) -> None:
        self.start, self.points = time.monotonic(), []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.endswith("loss %.10g"):
            self.points.append((time.monotonic() - self.start, float(record.args[-1])))


def make_data(spark, rows: int, cols: int, partitions: int):
    df = spark.range(rows, numPartitions=partitions)
    for j in range(cols):
        df = df.withColumn(f"x{j}", F.randn(seed=j))
    margin = sum(F.col(f"x{j}") * (1.0 if j % 2 else -0.5) for j in range(cols))
    df = df.withColumn("label", (F.rand(seed=99) < 1 / (1 + F.exp(-margin))).cast("double"))
    assembled = VectorAssembler(inputCols=[f"x{j}" for j in range(cols)],
                                outputCol="features").transform(df)
    return assembled.select("features", "label").cache()


def time_to(points, target):
    return next((t for t, loss in points if loss <= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cols", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--straggler-seconds", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = make_data(spark, args.rows, args.cols, 2)
    df.count()
    log = StepLog()
    trainer_log = logging.getLogger("gradspark.trainer")
    trainer_log.addHandler(log)
    trainer_log.setLevel(logging.INFO)
    base = dict(optimizer="adam", stepSize=0.05, tol=0.0, maxIter=args.steps,
                parameterServerHost="127.0.0.1")
    SGDLogisticRegression(**dict(base, maxIter=2)).fit(df)  # warm up workers and the JVM

    runs = {}
    for straggler in (False, True):
        if straggler:
            os.environ[ENVIRONMENT_VARIABLE] = json.dumps(
                {"slow_partition": 1, "slow_seconds": args.straggler_seconds})
        for name, extra in CONFIGS:
            for _ in range(args.repeats):
                log.reset()
                SGDLogisticRegression(**base, **extra).fit(df)
                runs.setdefault((straggler, name), []).append(list(log.points))
        os.environ.pop(ENVIRONMENT_VARIABLE, None)
    spark.stop()

    target = 1.01 * statistics.median(r[-1][1] for r in runs[(False, "sync")])
    print(f"\n{args.rows} x {args.cols} dense, local[2] (2 workers), adam, {args.steps} steps; "
          f"target loss {target:.6f} (sync's final + 1%); straggler sleeps "
          f"{args.straggler_seconds} s per batch; median of {args.repeats}")
    print(f"{'straggler':<10}{'mode':<12}{'to target s':>12}{'ratio vs sync':>15}"
          f"{'final loss':>12}{'fit s':>8}")
    report = []
    for straggler in (False, True):
        sync_time = None
        for name, _ in CONFIGS:
            points = runs[(straggler, name)]
            reached = [time_to(p, target) for p in points]
            median = statistics.median(reached) if None not in reached else None
            sync_time = median if name == "sync" else sync_time
            ratio = median / sync_time if median is not None and sync_time else None
            final = statistics.median(p[-1][1] for p in points)
            total = statistics.median(p[-1][0] for p in points)
            print(f"{'yes' if straggler else 'no':<10}{name:<12}"
                  f"{'-' if median is None else f'{median:.2f}':>12}"
                  f"{'-' if ratio is None else f'{ratio:.2f}x':>15}{final:>12.6f}{total:>8.2f}")
            report.append(dict(straggler=straggler, mode=name, time_to_target=median,
                               ratio_vs_sync=ratio, final_loss=final, fit_seconds=total))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "target": target, "rows": report}, out, indent=2)


if __name__ == "__main__":
    main()
