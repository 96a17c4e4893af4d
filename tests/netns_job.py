"""The driver of the netns test bed (tests/netns_bed.py): fits on the bed's
standalone cluster with Spark's RPC authenticated and encrypted, in phases the
attacker and the sniffer line up with.

    python netns_job.py --master spark://198.51.100.1:7077 --secret S --out DIR
        [--width 18] [--rows 4000] [--iters 30] [--repeats 1]

Phases (each fit's wall-clock window goes to DIR/phases.jsonl as it starts
and ends; an async phase's server port too, from its log line):

* ``async-sealed``/``async-clear``, ``sharded-sealed``/``sharded-clear``,
  ``repeats`` times, interleaved: the same fit with our channels encrypted
  (Spark's setting, the default here) and in clear
  (``spark.gradspark.network.crypto.enabled=false`` on the live conf);
* ``async-attacked``: the sealed async fit again, its batches slowed to outlast
  the handshake deadline, while the attacker floods its server with slow and
  garbage connections.

Writes DIR/result.json: per phase the model, per-step times and the
summary's guard counts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time

import numpy as np
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession

from gradspark import SGDLogisticRegression
from gradspark.testing.faults import ENVIRONMENT_VARIABLE

OVERRIDE = "spark.gradspark.network.crypto.enabled"


class PhaseLog(logging.Handler):
    """Appends each phase's window, and its driver server's port, to phases.jsonl."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path, self.phase, self.file_lock = path, None, threading.Lock()

    def write(self, **record) -> None:
        with self.file_lock, open(self.path, "a") as out:
            out.write(json.dumps(dict(record, time=time.time())) + "\n")

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"listening on \S+?:(\d+)", record.getMessage())
        if found and self.phase:
            self.write(phase=self.phase, port=int(found.group(1)))


def sparse_frame(spark, width: int, rows: int, seed: int = 3, nnz: int = 20):
    """Hashed binary rows: half of each row's features from 2,000 hot buckets, half from
    the whole space (a long tail); logistic labels."""
    g = np.random.default_rng(seed)
    hot = g.choice(width, size=2000, replace=False)
    truth = dict(zip(hot.tolist(), g.normal(size=hot.size).tolist()))
    data = []
    for _ in range(rows):
        idx = np.unique(np.concatenate([g.choice(hot, nnz // 2),
                                        g.integers(0, width, nnz // 2)]))
        margin = sum(truth.get(int(i), 0.0) for i in idx) * 0.5
        label = float(g.random() < 1 / (1 + np.exp(-margin)))
        data.append((Vectors.sparse(width, idx.tolist(), [1.0] * idx.size), label))
    return spark.createDataFrame(data, ["features", "label"]).repartition(2).cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--width", type=int, default=18)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    phases = PhaseLog(os.path.join(args.out, "phases.jsonl"))
    logging.getLogger("gradspark.rpc.server").addHandler(phases)
    logging.getLogger("gradspark.rpc.server").setLevel(logging.INFO)
    spark = (SparkSession.builder.master(args.master).appName("netns-bed")
             .config("spark.authenticate", "true")
             .config("spark.authenticate.secret", args.secret)
             .config("spark.network.crypto.enabled", "true")
             .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
             .config("spark.executor.memory", "1g").config("spark.cores.max", "2")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    conf = spark.sparkContext._jsc.sc().conf()
    df = sparse_frame(spark, 1 << args.width, args.rows)
    df.count()
    common = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.2, regParam=1e-4,
                  tol=0.0, seed=7, maxIter=args.iters, sparsePull=True, standardization=False)
    kinds = {"async": dict(mode="async", maxStaleness=0),
             "sharded": dict(parameterServers=2, maxStaleness=0)}
    results: dict = {}

    def fit(phase: str, sealed: bool, extra: dict) -> None:
        if sealed:
            conf.remove(OVERRIDE)
        else:
            conf.set(OVERRIDE, "false")
        phases.phase = phase
        phases.write(phase=phase, event="start")
        start = time.monotonic()
        model = SGDLogisticRegression(**common, **extra).fit(df)
        seconds = time.monotonic() - start
        phases.write(phase=phase, event="end")
        phases.phase = None
        summary = model.summary.extra
        entry = results.setdefault(phase, {"seconds_per_step": [], "bytes_per_step": []})
        entry["seconds_per_step"].append(summary["wallTime"] / args.iters)
        entry["bytes_per_step"].append(sum(np.sum(summary.get(key, 0)) for key in (
            "bytesSent", "bytesReceived", "shardBytesSent", "shardBytesReceived"))
            / args.iters)
        entry["fit_seconds"] = seconds
        entry["intercept"] = model.intercept
        entry["coefficient_digest"] = float(np.sum(model.coefficients.toArray() ** 2))
        entry["objective"] = list(model.summary.objectiveHistory)
        for key in ("channelsEncrypted", "framesRejected", "gradientsRejected",
                    "connectionsRefused"):
            entry[key] = summary.get(key)

    # Warm-up (not recorded): executors start their Python workers and imports.
    SGDLogisticRegression(**dict(common, maxIter=3), **kinds["sharded"]).fit(df)
    for _ in range(args.repeats):
        for kind, extra in kinds.items():
            fit(f"{kind}-sealed", True, extra)
            fit(f"{kind}-clear", False, extra)
    # Every batch sleeps 0.4 s (the math is unchanged at maxStaleness=0), so the attack
    # outlasts the server's 10 s handshake deadline while the fit trains.
    os.environ[ENVIRONMENT_VARIABLE] = json.dumps({"base_seconds": 0.4})
    fit("async-attacked", True, dict(kinds["async"]))
    del os.environ[ENVIRONMENT_VARIABLE]
    with open(os.path.join(args.out, "result.json"), "w") as out:
        json.dump(results, out)
    spark.stop()
    print("RESULT written", file=sys.stderr)


if __name__ == "__main__":
    main()
