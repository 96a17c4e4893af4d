"""What TorchEstimator costs over the same training loop run by hand.

One run, the same data (synthetic, ROWS x 64 float32, 10 classes), the same
MLP, optimizer and global batch, for each ``--strategies`` (ddp, fsdp):

* ``single``: one process, a plain loop over shuffled mini-batches;
* ``mp-gloo``: torch.multiprocessing, 2 ranks over gloo, each rank holding
  half the rows (the hand-written equivalent of 2 Spark workers);
* ``TorchDistributor``: pyspark's ``TorchDistributor(num_processes=2,
  local_mode=False)`` running that same per-rank function in a barrier stage
  of the same local[2] session (it starts ``torchrun`` in each task; the
  function makes its own data, as a TorchDistributor user's reads files);
* ``TorchEstimator``: numWorkers=2 on local[2], the data a cached DataFrame.

Per-epoch times are medians over EPOCHS epochs. "overhead" is a whole run's
wall time minus its (slowest rank's) epochs: process start, rendezvous, data
loading or Arrow conversion, returning the weights. Prints the whole-run and
overhead ratios of TorchEstimator against TorchDistributor and mp-gloo.

    python benchmarks/torch_overhead.py [--rows 200000] [--epochs 3] [--strategies ddp fsdp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BATCH = 256
FEATURES = 64


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def make_data(rows: int):
    g = np.random.default_rng(0)
    X = g.normal(size=(rows, FEATURES)).astype(np.float32)
    y = (X[:, :10] @ g.normal(size=(10, 10))).argmax(axis=1)
    return X, y


def epochs_of(model, X, y, batch: int, epochs: int, seed: int):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    features, labels = torch.from_numpy(X), torch.from_numpy(y)
    times = []
    for epoch in range(epochs):
        started = time.perf_counter()
        order = torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(len(X)))
        for start in range(0, len(X), batch):
            index = order[start:start + batch]
            optimizer.zero_grad()
            loss_fn(model(features[index]), labels[index]).backward()
            optimizer.step()
        times.append(time.perf_counter() - started)
    return times


def rank_loop(rows: int, epochs: int, strategy: str):
    """One rank's run once torch.distributed's environment is set: its epoch times."""
    from gradspark.neural.parallelism import parallelism

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    X, y = make_data(rows)
    torch.manual_seed(0)
    model = parallelism(strategy).wrap(make_model(), torch.device("cpu"), False, world)
    times = epochs_of(model, X[rank::world], y[rank::world], BATCH // world, epochs, rank)
    dist.barrier()  # FSDP's last collectives done on both ranks before the group goes
    dist.destroy_process_group()
    return times


def gloo_rank(rank: int, world: int, rows: int, epochs: int, port: int, strategy: str,
              results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    results.put((rank, rank_loop(rows, epochs, strategy)))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_spark(rows: int, epochs: int, strategies):
    """{strategy: ((epoch seconds, wall) of TorchEstimator, (same) of TorchDistributor)}."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    from gradspark import TorchEstimator

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    X, y = make_data(rows)
    df = spark.createDataFrame([(x.tolist(), float(t)) for x, t in zip(X, y)],
                               "features array<float>, label double").repartition(2).cache()
    df.count()
    out = {}
    for strategy in strategies:
        estimator = TorchEstimator(make_model, torch.nn.CrossEntropyLoss(), numWorkers=2,
                                   batchSize=BATCH, epochs=epochs, labelDtype="int64",
                                   strategy=strategy)
        estimator.fit(df.limit(1000))  # warm the Python workers and torch imports
        started = time.perf_counter()
        model = estimator.fit(df)
        ours = model.summary.epochSeconds, time.perf_counter() - started
        distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
        started = time.perf_counter()
        times = distributor.run(rank_loop, rows, epochs, strategy)  # rank 0's epochs
        out[strategy] = ours, (times, time.perf_counter() - started)
    spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--strategies", nargs="+", default=["ddp", "fsdp"])
    args = parser.parse_args()
    X, y = make_data(args.rows)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    single = statistics.median(epochs_of(make_model(), X, y, BATCH, args.epochs, 0))
    spark_runs = run_spark(args.rows, args.epochs, args.strategies)
    print(f"{args.rows} x {FEATURES}, MLP 64-128-10, Adam, global batch {BATCH}, "
          f"{args.epochs} epochs, medians; single process (1 thread): {single:.3f} s/epoch")
    print("| strategy | run | epoch s | whole run s | overhead s |")
    print("| --- | --- | --- | --- | --- |")
    for strategy in args.strategies:
        context = mp.get_context("spawn")
        results = context.SimpleQueue()
        started = time.perf_counter()
        mp.start_processes(gloo_rank, args=(2, args.rows, args.epochs, free_port(), strategy,
                                            results), nprocs=2, start_method="spawn")
        gloo_wall = time.perf_counter() - started
        gloo = dict(results.get() for _ in range(2))
        gloo_epochs = [max(a, b) for a, b in zip(gloo[0], gloo[1])]
        (ours, ours_wall), (theirs, theirs_wall) = spark_runs[strategy]
        runs = {"mp-gloo": (gloo_epochs, gloo_wall), "TorchDistributor": (theirs, theirs_wall),
                "TorchEstimator": (ours, ours_wall)}
        overhead = {name: wall - sum(epochs) for name, (epochs, wall) in runs.items()}
        for name, (epochs, wall) in runs.items():
            print(f"| {strategy} | {name} | {statistics.median(epochs):.3f} | {wall:.2f} | "
                  f"{overhead[name]:.2f} |")
        print(f"{strategy}: TorchEstimator / TorchDistributor: whole run "
              f"{ours_wall / theirs_wall:.2f}x, overhead "
              f"{overhead['TorchEstimator'] / overhead['TorchDistributor']:.2f}x; "
              f"/ mp-gloo: whole run {ours_wall / gloo_wall:.2f}x, overhead "
              f"{overhead['TorchEstimator'] / overhead['mp-gloo']:.2f}x")


if __name__ == "__main__":
    main()
