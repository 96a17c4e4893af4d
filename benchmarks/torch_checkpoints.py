"""TorchEstimator checkpoints under FSDP: full (gathered to rank 0) against sharded (DCP).

One run, one local[2] session, the same cached data (ROWS x 64 float32, 10
classes) and the same wide MLP (64 -> HIDDEN -> HIDDEN -> 10, Adam), FSDP on
2 ranks, a checkpoint after every epoch, for each format:

* ``full``: every rank takes part in gathering the whole state to rank 0's
  CPU, which writes one file;
* ``sharded``: every rank writes its own shard (torch.distributed.checkpoint),
  rank 0 adds the metadata and the marker.

Per format: the median time of a checkpoint (rank 0's clock, from the start of
the gather/save to the file in place, over EPOCHS x REPEATS checkpoints),
what each rank wrote, and what rank 0 had to hold beyond its own shard (computed
from the state size: the full format gathers the other rank's half; not measured).
Prints the ratio sharded / full. The training itself is the same in both.

    python benchmarks/torch_checkpoints.py [--hidden 4096] [--epochs 3] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from pyspark.ml.functions import array_to_vector
from pyspark.sql import SparkSession

FEATURES = 64


class WideMLP:
    """model_fn: picklable, the width a parameter."""

    def __init__(self, hidden: int) -> None:
        self.hidden = hidden

    def __call__(self) -> torch.nn.Module:
        h = self.hidden
        return torch.nn.Sequential(torch.nn.Linear(FEATURES, h), torch.nn.ReLU(),
                                   torch.nn.Linear(h, h), torch.nn.ReLU(),
                                   torch.nn.Linear(h, 10))


def directory_bytes(path: str) -> dict:
    """Bytes of each file under ``path`` (relative names), checkpoints' own files only."""
    sizes = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            sizes[os.path.relpath(full, path)] = os.path.getsize(full)
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from gradspark import TorchEstimator

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    g = np.random.default_rng(0)
    X = g.normal(size=(args.rows, FEATURES)).astype(np.float32)
    y = (X[:, :10] @ g.normal(size=(10, 10))).argmax(axis=1)
    frame = spark.createDataFrame([(x.tolist(), float(t)) for x, t in zip(X, y)],
                                  ["features", "label"])
    data = frame.select(array_to_vector("features").alias("features"), "label").cache()
    data.count()

    model = WideMLP(args.hidden)()
    parameters = sum(p.numel() for p in model.parameters())
    state_bytes = 3 * parameters * 4  # parameters and Adam's two moments, float32
    print(f"FSDP, 2 ranks, local[2]: MLP 64-{args.hidden}-{args.hidden}-10, "
          f"{parameters / 1e6:.1f} M parameters, {state_bytes / 2**20:.0f} MiB of "
          f"parameters + Adam state; {args.rows} rows, a checkpoint after each of "
          f"{args.epochs} epochs, {args.repeats} fits per format")
    def fit(checkpoint_format, directory, epochs):
        return TorchEstimator(
            WideMLP(args.hidden), torch.nn.CrossEntropyLoss(), numWorkers=2, batchSize=256,
            epochs=epochs, labelDtype="int64", strategy="fsdp", checkpointDir=directory,
            checkpointFormat=checkpoint_format, keepCheckpoints=1,
            progressInterval=-1).fit(data)

    fit("full", "", 1)  # warm-up: Python workers started, torch imported
    seconds = {"full": [], "sharded": []}
    fits = {"full": [], "sharded": []}
    files = {}
    for _ in range(args.repeats):  # the formats interleaved, so drift hits both
        for checkpoint_format in seconds:
            directory = tempfile.mkdtemp(prefix=f"gradspark-ckpt-{checkpoint_format}-")
            started = time.perf_counter()
            fitted = fit(checkpoint_format, directory, args.epochs)
            fits[checkpoint_format].append(time.perf_counter() - started)
            seconds[checkpoint_format] += fitted.summary.checkpointSeconds
            files[checkpoint_format] = directory_bytes(directory)
            shutil.rmtree(directory)
    results = {name: (statistics.median(seconds[name]), statistics.median(fits[name]),
                      files[name]) for name in seconds}
    for name, times in seconds.items():
        print(f"  {name}: checkpoint seconds {[round(t, 3) for t in times]}")

    full_s = results["full"][0]
    print()
    print("| format | median checkpoint s | vs full | median fit s | files written "
          "| held by rank 0 beyond its shard (computed, not measured) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for checkpoint_format, (median, fit, files) in results.items():
        shards = {k: v for k, v in files.items() if k.endswith(".distcp")}
        if shards:
            written = ", ".join(f"{os.path.basename(k)} {v / 2**20:.1f} MiB"
                                for k, v in sorted(shards.items()))
            held = "0 (writes its own shard)"
        else:
            written = ", ".join(f"{os.path.basename(k)} {v / 2**20:.1f} MiB"
                                for k, v in files.items())
            held = f"{state_bytes / 2 / 2**20:.1f} MiB (the other rank's half)"
        print(f"| {checkpoint_format} | {median:.3f} | {median / full_s:.2f}x | {fit:.1f} "
              f"| {written} | {held} |")
    spark.stop()


if __name__ == "__main__":
    main()
