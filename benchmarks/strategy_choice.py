"""Does ``executionStrategy="auto"`` pick the faster path for a full-batch L-BFGS fit?

One SparkSession (``local[2]``). Per shape, one cached DataFrame, and the same
L-BFGS fit (``regParam=1e-4, standardization=False, maxIter=--iterations,
tol=0``) run three ways: ``executionStrategy="resident"`` (Python workers keep
the blocks; a step is one message round), ``"jobPerStep"`` (JVM kernels; a
step is one Spark job) and ``"auto"``. Whole ``fit`` wall time, median of
``--repeats`` after one warm-up fit of each strategy on the first shape; the
objectives of the three must agree (they are the same L-BFGS on the same
sums, so they agree to rounding).

Shapes: ``--sparse GENERATOR:ROWS:BITS`` (:mod:`gradspark.testing.ctr_data`'s
rows hashed into ``2^BITS`` buckets, one partition per 100,000 rows, at least
4) and ``--dense ROWS:COLS`` (``sync_vs_mllib.make_data``'s correlated
Gaussian rows, 4 partitions). Printed per shape: the blocks per worker that
``auto`` saw (from its log record), each strategy's seconds, ``auto``'s
choice, and the ratio of the slower forced strategy to the faster one; a
``*`` marks a shape where ``auto`` did not pick the faster one by more than
10%.

    .venv/bin/python benchmarks/strategy_choice.py
    .venv/bin/python benchmarks/strategy_choice.py --sparse tail:800000:22 --dense --repeats 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import time
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PARAMS = dict(regParam=1e-4, standardization=False, tol=0.0)
STRATEGIES = ("resident", "jobPerStep", "auto")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--sparse", nargs="*", default=[
        "ctr:200000:20", "ctr:800000:22", "ctr:2000000:22", "tail:200000:22",
        "tail:800000:22", "tail:2000000:20"])
    parser.add_argument("--dense", nargs="*", default=["250000:100", "1000000:100"])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--driver-memory", default="14g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


class PlanRecords(logging.Handler):
    """Keeps the fit plan's log records: they say what ``auto`` chose and why."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def fit(df, strategy: str, iterations: int):
    from gradspark import SGDLogisticRegression

    start = time.perf_counter()
    model = SGDLogisticRegression(maxIter=iterations, executionStrategy=strategy,
                                  **PARAMS).fit(df)
    return time.perf_counter() - start, model


def run_shape(name: str, df, args, records: PlanRecords) -> Dict[str, object]:
    row: Dict[str, object] = {"shape": name}
    objectives = {}
    for strategy in STRATEGIES:
        times = []
        for _ in range(args.repeats):
            del records.messages[:]
            seconds, model = fit(df, strategy, args.iterations)
            times.append(seconds)
        row[strategy] = statistics.median(times)
        objectives[strategy] = model.summary.objectiveHistory[-1]
        if strategy == "auto":
            row["autoChose"] = model.summary.extra["executionStrategy"]
            why = next((m for m in records.messages if " kernels, " in m), "")
            found = re.search(r"([\d.]+) (MiB|GiB) (?:of (?:\w+ )?blocks )?per", why)
            row["mibPerWorker"] = (float(found.group(1)) * (1024 if found.group(2) == "GiB"
                                                            else 1) if found else None)
            row["why"] = why
    spread = max(objectives.values()) - min(objectives.values())
    row["objective"] = objectives["auto"]
    row["objectiveSpread"] = spread
    faster = min(("resident", "jobPerStep"), key=lambda s: row[s])
    slower = "jobPerStep" if faster == "resident" else "resident"
    row["faster"] = faster
    row["ratio"] = row[slower] / row[faster]
    row["autoRight"] = row["autoChose"] == faster or row["ratio"] < 1.1
    print(json.dumps(row), flush=True)
    return row


def report(rows: List[Dict[str, object]], iterations: int) -> None:
    print(f"\nL-BFGS, maxIter={iterations}, tol=0: whole fit seconds (medians)\n")
    print("| shape | MiB per worker | resident s | jobPerStep s | auto s | auto chose "
          "| slower / faster |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        mark = "" if r["autoRight"] else " *"
        mib = "?" if r["mibPerWorker"] is None else f"{r['mibPerWorker']:.0f}"
        print(f"| {r['shape']} | {mib} | {r['resident']:.2f} | {r['jobPerStep']:.2f} "
              f"| {r['auto']:.2f} | {r['autoChose']}{mark} | {r['ratio']:.2f}x "
              f"({r['faster']} faster) |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from gradspark.testing.ctr_data import ctr_frame
    from sync_vs_mllib import make_data

    spark = (SparkSession.builder.master("local[2]")
             .appName("gradspark strategy choice benchmark")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    records = PlanRecords()
    plan_logger = logging.getLogger("gradspark.fit.plan")
    plan_logger.addHandler(records)
    plan_logger.setLevel(logging.INFO)
    print(f"load average before start: {os.getloadavg()[0]:.2f}", flush=True)

    shapes = []
    for spec in args.sparse:
        generator, rows, bits = spec.split(":")
        shapes.append((f"{generator} {int(rows):,} x 2^{bits}", lambda g=generator, r=int(rows),
                       b=int(bits): ctr_frame(spark, r, 1 << b, max(4, r // 100_000),
                                              args.seed, generator=g)))
    for spec in args.dense:
        rows, cols = (int(v) for v in spec.split(":"))
        shapes.append((f"dense {rows:,} x {cols}", lambda r=rows, c=cols: make_data(
            spark, r, c, 4, args.seed, 0.5)))
    results = []
    for index, (name, build) in enumerate(shapes):
        df = build()
        if index == 0:
            for strategy in STRATEGIES:  # warm-up: JIT, Python workers, the kernels jar
                fit(df, strategy, args.iterations)
        results.append(run_shape(name, df, args, records))
        df.unpersist()
    report(results, args.iterations)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
