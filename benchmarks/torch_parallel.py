"""Step time and memory per rank of TorchEstimator's strategies, side by side.

One run, one synthetic data set (ROWS x 64 float32, 10 classes), one MLP per
``--shapes`` entry (``WIDTHxLAYERS``: LAYERS hidden Linear(WIDTH, WIDTH) layers),
Adam, global batch ``--batch``; for each shape:

* on ``local[2]`` (two ranks): ``ddp``, ``fsdp``, ``tensor`` (each hidden pair
  colwise/rowwise) and ``pipeline`` (two stages, 1F1B, ``--micro-batches``);
* on ``local[4]`` (four ranks; on a 2-core machine the ranks share cores, so
  only ratios within this group mean anything): ``ddp`` and the 2-D meshes
  ``tensor [2, 2]`` and ``fsdp [2, 2]`` (HSDP).

Per strategy: the median step time over the epochs after the first (the first
holds the stage's start), its ratio to DDP's in the same group, the parameter and
optimizer-state MB each rank holds (``summary.parameterBytesByRank``), and each
rank's peak RSS (``summary.peakMemoryBytesByRank``; Python workers are not reused
here, so it is that fit's peak, the ~0.4 GB of the Python/torch runtime included).

    python benchmarks/torch_parallel.py [--rows 4096] [--batch 256] [--epochs 3]
        [--shapes 2048x4 1024x8] [--skip-four]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np
import torch

FEATURES = 64


class MLP:
    """Picklable model factory: Linear(64, W), LAYERS x (ReLU, Linear(W, W)), Linear(W, 10)."""

    def __init__(self, width: int, layers: int) -> None:
        self.width, self.layers = width, layers

    def __call__(self) -> torch.nn.Module:
        modules = [torch.nn.Linear(FEATURES, self.width)]
        for _ in range(self.layers):
            modules += [torch.nn.ReLU(), torch.nn.Linear(self.width, self.width)]
        modules += [torch.nn.ReLU(), torch.nn.Linear(self.width, 10)]
        return torch.nn.Sequential(*modules)


def frame(spark, rows: int):
    from pyspark.ml.linalg import Vectors

    g = np.random.default_rng(0)
    X = g.normal(size=(rows, FEATURES)).astype(np.float32)
    y = (X[:, :10] @ g.normal(size=(10, 10))).argmax(axis=1)
    return spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                                 ["features", "label"]).repartition(4).cache()


def session(master: str):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.worker.reuse", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(df, model_fn, workers: int, strategy: str, mesh, args) -> dict:
    from gradspark import TorchEstimator

    extra = {"microBatches": args.micro_batches} if strategy == "pipeline" else {}
    model = TorchEstimator(model_fn, torch.nn.CrossEntropyLoss(), numWorkers=workers,
                           batchSize=args.batch, epochs=args.epochs, labelDtype="int64",
                           learningRate=1e-3, strategy=strategy, meshShape=mesh,
                           progressInterval=-1, **extra).fit(df)
    summary = model.summary
    steps = summary.stepsPerEpoch
    return {"step": statistics.median(t / steps for t in summary.epochSeconds[1:]),
            "loss": summary.lossHistory[-1], "mesh": summary.meshShape,
            "parameters": [b / 2**20 for b in summary.parameterBytesByRank],
            "optimizer": [b / 2**20 for b in summary.optimizerStateBytesByRank],
            "peak": [b / 2**20 for b in summary.peakMemoryBytesByRank]}


def per_rank(values) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def report(title: str, runs: dict) -> None:
    baseline = runs["ddp"]["step"]
    print(f"\n{title}")
    print("| strategy | mesh | median step s | / ddp | parameters MB per rank | "
          "optimizer MB per rank | peak RSS MB per rank | final loss |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, run in runs.items():
        print(f"| {name} | {run['mesh']} | {run['step']:.3f} | {run['step'] / baseline:.2f}x | "
              f"{per_rank(run['parameters'])} | {per_rank(run['optimizer'])} | "
              f"{per_rank(run['peak'])} | {run['loss']:.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--shapes", nargs="+", default=["2048x4", "1024x8"])
    parser.add_argument("--skip-four", action="store_true", help="two ranks only")
    args = parser.parse_args()
    print(f"load average before the start: {os.getloadavg()[0]:.2f}, cores: {os.cpu_count()}")
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes]
    groups = [("local[2]", 2, [("ddp", "ddp", []), ("fsdp", "fsdp", []),
                               ("tensor", "tensor", []), ("pipeline", "pipeline", [])])]
    if not args.skip_four:
        groups.append(("local[4]", 4, [("ddp", "ddp", []),
                                       ("data x tensor", "tensor", [2, 2]),
                                       ("hsdp", "fsdp", [2, 2])]))
    for master, workers, strategies in groups:
        spark = session(master)
        df = frame(spark, args.rows)
        for width, layers in shapes:
            model_fn = MLP(width, layers)
            parameters = sum(p.numel() for p in model_fn().parameters())
            runs = {name: measure(df, model_fn, workers, strategy, mesh, args)
                    for name, strategy, mesh in strategies}
            report(f"{master}, {workers} ranks: MLP {width}x{layers} ({parameters / 1e6:.1f} M "
                   f"parameters), {args.rows} rows, batch {args.batch}", runs)
        spark.stop()


if __name__ == "__main__":
    main()
