"""gradspark and MLlib on a Spark Connect session and on a classic one, same data.

The CTR-shaped set of ``benchmarks/wide_sparse.py`` (``--rows`` rows, 30
hashed fields in ``2^--width`` buckets) is written once to Parquet; then one
process per session kind (``classic``: ``builder.master("local[2]")``,
``connect``: ``builder.remote("local[2]")``, a local Connect server) reads
and caches it, and times, median of ``--repeats`` after a warm-up of each:

* ``mllib``: ``LogisticRegression(maxIter=--iterations, regParam=1e-4,
  standardization=False, tol=0)``;
* ``gradspark``: ``SGDLogisticRegression`` with the same Params (L-BFGS,
  ``executionStrategy="auto"``: resident workers on Connect, the JVM kernels
  or resident workers on classic);
* ``gradspark jobPerStep``: the same with one Spark job per step (Connect:
  a ``mapInArrow`` job with the weights in its closure; classic: a broadcast
  and a ``treeAggregate``, JVM kernels when they load);
* ``gradspark adam``: mini-batch Adam on resident workers with sparse pulls
  (``stepSize=0.05, miniBatchFraction=0.01, maxIter=--adam-steps``).

Ratios: MLlib / gradspark in the same session (above 1: gradspark faster),
and classic / Connect for each fit (above 1: faster on Connect).

    .venv/bin/python benchmarks/connect.py                      # 200,000 rows, 2^20
    .venv/bin/python benchmarks/connect.py --rows 50000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wide_sparse  # noqa: E402  (the data and Params of the MLlib comparison)

KINDS = ("classic", "connect")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--width", type=int, default=20, help="log2 of the hashing space")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=20, help="L-BFGS maxIter")
    parser.add_argument("--adam-steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2, help="timed fits (median)")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--session", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


def fits(args) -> Dict[str, dict]:
    from gradspark import SGDLogisticRegression
    from pyspark.ml.classification import LogisticRegression

    lbfgs = dict(maxIter=args.iterations, **wide_sparse.PARAMS)
    adam = dict(wide_sparse.PARAMS, optimizer="adam", stepSize=0.05, miniBatchFraction=0.01,
                maxIter=args.adam_steps, seed=args.seed)
    return {
        "mllib": lambda df: LogisticRegression(**lbfgs).fit(df),
        "gradspark": lambda df: SGDLogisticRegression(**lbfgs).fit(df),
        "gradspark jobPerStep": lambda df: SGDLogisticRegression(
            executionStrategy="jobPerStep", **lbfgs).fit(df),
        "gradspark adam": lambda df: SGDLogisticRegression(executionStrategy="resident",
                                                           **adam).fit(df),
    }


def run_session(args) -> Dict[str, dict]:
    """This process's fits, on one session of ``args.session``'s kind."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.config("spark.driver.memory", args.driver_memory)
               .config("spark.ui.showConsoleProgress", "false"))
    spark = (builder.remote("local[2]") if args.session == "connect"
             else builder.master("local[2]")).getOrCreate()
    try:
        df = spark.read.parquet(args.data).cache()
        df.count()
        out = {}
        for name, fit in fits(args).items():
            fit(df)  # warm-up: Python workers, the kernels jar, the JIT
            seconds, objectives, strategies = [], [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                model = fit(df)
                seconds.append(time.perf_counter() - start)
                objectives.append(model.summary.objectiveHistory[-1])
                extra = {} if name == "mllib" else model.summary.extra
                strategies.append(f"{extra.get('engine', 'jvm')} "
                                  f"{extra.get('executionStrategy', '')}")
            out[name] = {"seconds": statistics.median(seconds), "objective": objectives[-1],
                         "how": strategies[-1].strip()}
            print(f"{args.session} {name}: {out[name]}", file=sys.stderr, flush=True)
        return out
    finally:
        spark.stop()


def write_data(args, path: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    wide_sparse.make_data(spark, args.rows, 1 << args.width, args.partitions,
                          args.seed).write.parquet(path)
    spark.stop()


def report(results: Dict[str, Dict[str, dict]]) -> None:
    print("\n| fit | classic s | Connect s | classic / Connect | MLlib / fit (classic) "
          "| MLlib / fit (Connect) | how (Connect) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    classic, connect = results["classic"], results["connect"]
    for name in classic:
        a, b = classic[name]["seconds"], connect[name]["seconds"]
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x "
              f"| {classic['mllib']['seconds'] / a:.2f}x | {connect['mllib']['seconds'] / b:.2f}x "
              f"| {connect[name]['how']} |")
    gaps = {name: abs(connect[name]["objective"] - classic[name]["objective"])
            / classic[name]["objective"] for name in classic}
    print("\nrelative objective gap classic vs Connect: "
          + ", ".join(f"{name} {gap:.1e}" for name, gap in gaps.items()))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(wide_sparse)  # executors cannot import benchmarks/
    if args.session:
        print("RESULT " + json.dumps(run_session(args)), flush=True)
        return 0
    print(f"load average before start: {os.getloadavg()[0]:.2f}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "ctr.parquet")
        write_data(args, data)
        for kind in KINDS:  # one Spark driver per process
            proc = subprocess.run(
                [sys.executable, __file__, *(argv or sys.argv[1:]), "--session", kind,
                 "--data", data], capture_output=True, text=True)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                print(proc.stderr[-4000:], file=sys.stderr)
                return 1
            results[kind] = json.loads(lines[-1][len("RESULT "):])
    report(results)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
