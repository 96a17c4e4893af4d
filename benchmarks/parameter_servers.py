"""Sparse pull/push and sharded parameter servers on wide hashed data: bytes and time per step.

The CTR-shaped set of ``benchmarks/wide_sparse.py`` (``--rows`` rows, 30
hashed categorical fields, ``2^w`` buckets per ``--widths`` entry), cached
once per width; every fit trains on it with the same Params: mini-batch Adam
(``stepSize=0.01, miniBatchFraction=0.01, maxIter=--steps``, ``regParam=1e-4,
standardization=False``), bulk-synchronous, same seed, so all of them must
end with the same weights. The runs:

* ``driver, dense``: the parameter server in the driver, every worker pulling
  the whole weight vector each step (``mode="async", maxStaleness=0,
  sparsePull=False``): the baseline, and what every fit did before.
* ``driver, sparse``: the same server, workers pulling only the weights of
  the features their mini-batch touches and pushing over the same keys.
* ``N shards``: ``parameterServers=N`` (1, 2, 4): weights and Adam's state
  split by key range over shards in the workers' tasks; the driver keeps the
  clock. Its bytes per step are the clock's; the shard states it passes on
  (at the start and the end) are listed apart.

Per run: the median over ``--repeats`` fits of seconds per step (the
trainer's wall time / steps), bytes per step through the driver and through
the shards (sent + received, every frame: header, payload, tag), and the
largest coefficient difference from the baseline. Ratios are baseline /
run: above 1 means faster than the dense exchange.

    .venv/bin/python benchmarks/parameter_servers.py                  # 2^22 and 2^24
    .venv/bin/python benchmarks/parameter_servers.py --rows 100000 --widths 20 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from gradspark.testing.ctr_data import ctr_frame  # the data of wide_sparse.py

PARAMS = dict(optimizer="adam", stepSize=0.01, miniBatchFraction=0.01, regParam=1e-4,
              standardization=False, tol=0.0, seed=11)
RUNS = [
    ("driver, dense", dict(mode="async", maxStaleness=0, sparsePull=False)),
    ("driver, sparse", dict(mode="async", maxStaleness=0)),
    ("1 shard", dict(parameterServers=1)),
    ("2 shards", dict(parameterServers=2)),
    ("4 shards", dict(parameterServers=4)),
]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--widths", type=int, nargs="+", default=[22, 24],
                        help="log2 of the hashing space")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30, help="maxIter of every fit")
    parser.add_argument("--repeats", type=int, default=2, help="fits per run (median)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="14g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


def fit(df, steps: int, extra: Dict[str, object]):
    from gradspark import SGDLogisticRegression

    model = SGDLogisticRegression(maxIter=steps, **PARAMS, **extra).fit(df)
    summary = model.summary
    figures = dict(summary.extra)
    figures["secondsPerStep"] = figures["wallTime"] / max(summary.totalIterations, 1)
    return np.r_[model.coefficients.toArray(), model.intercept], figures


def run(df, args, name: str, extra: Dict[str, object], baseline) -> Dict[str, object]:
    fits = [fit(df, args.steps, extra) for _ in range(args.repeats)]
    weights, figures = fits[-1]
    # Sharded: the driver's clock messages, without the shard states passed on at the ends.
    prefix = "driverStepB" if "shardBytesSent" in figures else "b"
    driver = (figures[f"{prefix}ytesSentPerStep"], figures[f"{prefix}ytesReceivedPerStep"])
    row = {
        "run": name,
        "secondsPerStep": statistics.median(f["secondsPerStep"] for _, f in fits),
        "driverBytesSentPerStep": driver[0],
        "driverBytesReceivedPerStep": driver[1],
        "shardBytesSentPerStep": figures.get("shardBytesSentPerStep", 0.0),
        "shardBytesReceivedPerStep": figures.get("shardBytesReceivedPerStep", 0.0),
        "stateBytesThroughDriver": figures.get("stateBytesSent", 0)
        + figures.get("stateBytesReceived", 0),
        "finalObjective": figures["finalObjective"],
        "trainedFeatures": figures["trainedFeatures"],
        "weights": weights,
    }
    row["maxDifference"] = 0.0 if baseline is None else \
        float(np.max(np.abs(weights - baseline)))
    print(json.dumps({k: v for k, v in row.items() if k != "weights"}), flush=True)
    return row


def run_width(spark, args, exponent: int) -> List[Dict[str, object]]:
    width = 1 << exponent
    print(f"\n== 2^{exponent} = {width:,} buckets: generating {args.rows:,} rows ...", flush=True)
    df = ctr_frame(spark, args.rows, width, args.partitions, args.seed)
    fit(df, 2, dict(RUNS[0][1]))  # warm-up: Python workers, JIT-free numpy paths
    rows: List[Dict[str, object]] = []
    for name, extra in RUNS:
        rows.append(run(df, args, name, extra, rows[0]["weights"] if rows else None))
        rows[-1]["exponent"] = exponent
    base = rows[0]["secondsPerStep"]
    for row in rows:
        row["speedup"] = base / row["secondsPerStep"]
        del row["weights"]
    df.unpersist()
    return rows


def kb(value: float) -> str:
    return f"{value / 1024:,.1f}"


def report(rows: List[Dict[str, object]]) -> None:
    print("\n| features | run | s/step | vs dense | driver KiB/step out / in | "
          "shards KiB/step out / in | shard states via driver MiB | max |w - dense w| |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| 2^{r['exponent']} ({r['trainedFeatures']:,} trained) | {r['run']} | "
              f"{r['secondsPerStep']:.3f} | {r['speedup']:.2f}x | "
              f"{kb(r['driverBytesSentPerStep'])} / {kb(r['driverBytesReceivedPerStep'])} | "
              f"{kb(r['shardBytesSentPerStep'])} / {kb(r['shardBytesReceivedPerStep'])} | "
              f"{r['stateBytesThroughDriver'] / 2**20:,.1f} | {r['maxDifference']:.1e} |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master)
             .appName("gradspark parameter-server benchmark")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"load average before start: {os.getloadavg()[0]:.2f}", flush=True)
    rows = [row for e in args.widths for row in run_width(spark, args, e)]
    report(rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
