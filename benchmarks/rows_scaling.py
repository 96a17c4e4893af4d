"""Wide sparse logistic regression by rows: is a fit's cost per row flat from 0.4 M
rows up, also when the cached blocks spill to disk, and how does MLlib compare?

:mod:`gradspark.testing.ctr_data`'s ``ctr`` rows (30 hashed fields, ~30
non-zeros per row) hashed into ``2^--bits`` buckets are written once to
Parquet under ``--data-dir`` (100,000 rows per file, generation not timed);
each ``--rows`` size reads the first of those files, so every size is a
prefix of the same data. Every fit reads them back, as a batch job reads
its features table: ``SGDLogisticRegression`` with ``regParam=1e-4,
standardization=False, maxIter=--iterations, tol=0`` (L-BFGS, ``engine="auto"``)
and, at the ``--mllib-rows`` sizes, MLlib's ``LogisticRegression`` with the
same Params, and gradspark again timed to MLlib's objective (the fewest
iterations that reach it, as ``wide_sparse.py`` times it). Reported per size:
the whole fit's seconds and microseconds per
row, its data pass and steps from the fit's log records, the cached blocks'
memory and disk bytes (Spark's storage info, read while the fit runs), and
the driver process's peak resident memory (it should follow the width, not
the rows).

``--spill-rows``: one more fit in a new SparkContext whose storage memory
(``spark.memory.fraction=--spill-fraction``) is smaller than its blocks, so
that ``MEMORY_AND_DISK`` writes part of them to disk.

    .venv/bin/python benchmarks/rows_scaling.py
    .venv/bin/python benchmarks/rows_scaling.py --rows 400000 1000000 --mllib-rows 1000000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

PARAMS = dict(regParam=1e-4, standardization=False, tol=0.0)
ROWS_PER_PARTITION = 100_000


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+",
                        default=[400_000, 1_000_000, 2_000_000, 4_000_000])
    parser.add_argument("--mllib-rows", type=int, nargs="*", default=[400_000, 4_000_000])
    parser.add_argument("--spill-rows", type=int, default=4_000_000)
    parser.add_argument("--spill-fraction", type=float, default=0.04)
    parser.add_argument("--bits", type=int, default=22)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--data-dir", default="/tmp/gradspark-rows-scaling")
    parser.add_argument("--driver-memory", default="14g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    return parser.parse_args(argv)


def session(args, memory_fraction: Optional[float] = None):
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("gradspark rows scaling")
               .config("spark.driver.memory", args.driver_memory)
               .config("spark.ui.showConsoleProgress", "false"))
    if memory_fraction is not None:
        builder = builder.config("spark.memory.fraction", str(memory_fraction))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def dataset(spark, args, rows: int) -> List[str]:
    """The Parquet files of the first ``rows`` ctr rows: the largest size is written once
    (100,000 rows per file, each its own seeded partition) and a smaller size reads the
    first of its files, so every size is a prefix of the same data."""
    import glob

    from gradspark.testing.ctr_data import sparse_rows

    largest = max(args.rows + [args.spill_rows])
    path = os.path.join(args.data_dir, f"ctr-{largest}-{args.bits}-{args.seed}.parquet")
    if not os.path.exists(os.path.join(path, "_SUCCESS")):
        parts = largest // ROWS_PER_PARTITION
        width, seed = 1 << args.bits, args.seed
        rdd = spark.sparkContext.parallelize(range(parts), parts).flatMap(
            lambda p: sparse_rows("ctr", p, ROWS_PER_PARTITION, width, seed))
        print(f"writing {largest:,} rows to {path} ...", flush=True)
        rdd.toDF(["label", "features"]).write.mode("overwrite").parquet(path)
    files = sorted(glob.glob(os.path.join(path, "part-*.parquet")))
    if len(files) * ROWS_PER_PARTITION != largest:
        raise RuntimeError(f"{path} has {len(files)} files; expected one per "
                           f"{ROWS_PER_PARTITION:,} rows")
    return files[:max(rows // ROWS_PER_PARTITION, 1)]


class Phases(logging.Handler):
    """Times of the fit's log records: data pass end, training start and end."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.marks: Dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for key, text in (("cached", "cached "), ("planned", "kernels, "),
                          ("trained", "L-BFGS stopped")):
            if text in message and key not in self.marks:
                self.marks[key] = time.perf_counter()


class StoragePeak:
    """The cached gradspark blocks' largest memory and disk bytes while a fit runs."""

    def __init__(self, sc) -> None:
        self.sc, self.memory, self.disk = sc, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            try:
                infos = [i for i in self.sc._jsc.sc().getRDDStorageInfo()
                         if "gradspark" in i.name()]
            except Exception:  # the context is busy or stopping: try again
                continue
            self.memory = max(self.memory, sum(i.memSize() for i in infos))
            self.disk = max(self.disk, sum(i.diskSize() for i in infos))

    def __enter__(self) -> "StoragePeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def gradspark_fit(spark, files: List[str], args,
                  max_iter: Optional[int] = None) -> Dict[str, object]:
    from gradspark import SGDLogisticRegression

    df = spark.read.parquet(*files).select("features", "label")
    phases = Phases()
    logger = logging.getLogger("gradspark")
    logger.addHandler(phases)
    logger.setLevel(logging.INFO)
    try:
        with StoragePeak(spark.sparkContext) as storage:
            start = time.perf_counter()
            model = SGDLogisticRegression(maxIter=max_iter or args.iterations,
                                          **PARAMS).fit(df)
            seconds = time.perf_counter() - start
    finally:
        logger.removeHandler(phases)
    marks, extra = phases.marks, model.summary.extra
    evaluations = extra["gradientEvaluations"]
    return {
        "seconds": seconds,
        "dataPassSeconds": marks.get("cached", start) - start,
        "stepSeconds": ((marks["trained"] - marks["planned"]) / evaluations
                        if "trained" in marks and "planned" in marks else None),
        "evaluations": evaluations,
        "objective": model.summary.objectiveHistory[-1],
        "history": list(model.summary.objectiveHistory),
        "iterations": model.summary.totalIterations,
        "preconditioning": extra["preconditioning"],
        "strategy": extra["executionStrategy"],
        "trainedFeatures": extra.get("trainedFeatures"),
        "storageMemoryBytes": storage.memory,
        "storageDiskBytes": storage.disk,
        "driverPeakRssBytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def mllib_fit(spark, files: List[str], args) -> Dict[str, object]:
    from pyspark.ml.classification import LogisticRegression

    df = spark.read.parquet(*files).select("features", "label")
    start = time.perf_counter()
    model = LogisticRegression(maxIter=args.iterations, **PARAMS).fit(df)
    return {"seconds": time.perf_counter() - start,
            "objective": model.summary.objectiveHistory[-1]}


def to_mllib_objective(spark, files: List[str], args, history: List[float],
                       target: float) -> Optional[Dict[str, object]]:
    """gradspark timed to MLlib's objective, as ``wide_sparse.py`` times it: a fit of the
    fewest iterations whose objective is at most MLlib's x (1 + 1e-5), found in the
    history of the ``--iterations`` fit (None when that fit ends above it)."""
    reached = [i for i, value in enumerate(history) if value <= target * (1 + 1e-5)]
    if not reached:
        return None
    return gradspark_fit(spark, files, args, max_iter=max(reached[0], 1))


def report(results: List[Dict[str, object]]) -> None:
    print("\n| rows | gradspark fit s | us per row | data pass s | step s | cached memory / "
          "disk MB | driver peak RSS MB | MLlib fit s | MLlib / gradspark | objective "
          "gradspark / MLlib |")
    print("| --- " * 10 + "|")
    for r in results:
        g, m = r["gradspark"], r.get("mllib")
        step = f"{g['stepSeconds']:.2f}" if g["stepSeconds"] is not None else "-"
        label = f"{r['rows']:,}" + (" (spill)" if r.get("spill") else "")
        print(f"| {label} | {g['seconds']:.1f} | {1e6 * g['seconds'] / r['rows']:.2f} | "
              f"{g['dataPassSeconds']:.1f} | {step} | {g['storageMemoryBytes'] / 1e6:,.0f} / "
              f"{g['storageDiskBytes'] / 1e6:,.0f} | {g['driverPeakRssBytes'] / 1e6:,.0f} | "
              + (f"{m['seconds']:.1f} | {m['seconds'] / g['seconds']:.2f}x | "
                 f"{g['objective']:.6f} / {m['objective']:.6f} |" if m else
                 f"- | - | {g['objective']:.6f} / - |"))
    reached = [r for r in results if r.get("toMllibObjective")]
    if reached:
        print("\nTo MLlib's objective (the fewest iterations that reach it):\n")
        print("| rows | MLlib fit s | gradspark fit s (iterations) | MLlib / gradspark | "
              "objective gradspark / MLlib |")
        print("| --- " * 5 + "|")
        for r in reached:
            g, m = r["toMllibObjective"], r["mllib"]
            print(f"| {r['rows']:,} | {m['seconds']:.1f} | {g['seconds']:.1f} "
                  f"({g['iterations']}, {g['preconditioning']}) | "
                  f"{m['seconds'] / g['seconds']:.2f}x | {g['objective']:.6f} / "
                  f"{m['objective']:.6f} |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = session(args)
    print(f"load average before start: {os.getloadavg()[0]:.2f}", flush=True)
    sizes = set(args.rows) | ({args.spill_rows} if args.spill_rows else set())
    paths = {rows: dataset(spark, args, rows) for rows in sorted(sizes)}
    warm_up = dataset(spark, args, ROWS_PER_PARTITION)  # the first file
    gradspark_fit(spark, warm_up, args)  # the kernels jar, JIT
    results = []
    for rows in args.rows:
        row = {"rows": rows, "gradspark": gradspark_fit(spark, paths[rows], args)}
        if rows in args.mllib_rows:
            row["mllib"] = mllib_fit(spark, paths[rows], args)
            row["toMllibObjective"] = to_mllib_objective(
                spark, paths[rows], args, row["gradspark"]["history"],
                row["mllib"]["objective"])
        print(json.dumps(row), flush=True)
        results.append(row)
    if args.spill_rows:
        spark.stop()
        spark = session(args, memory_fraction=args.spill_fraction)
        gradspark_fit(spark, warm_up, args)  # warm-up in the new context
        row = {"rows": args.spill_rows, "spill": True,
               "gradspark": gradspark_fit(spark, paths[args.spill_rows], args)}
        print(json.dumps(row), flush=True)
        results.append(row)
    report(results)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
