"""What TorchEstimator costs over the same training loop run by hand.

One run, the same data (synthetic, ROWS x 64 float32, 10 classes), the same
MLP, optimizer and global batch, three ways:

* ``single``: one process, a plain loop over shuffled mini-batches;
* ``mp-gloo``: torch.multiprocessing, 2 ranks, DDP over gloo, each rank
  holding half the rows (the hand-written equivalent of 2 Spark workers);
* ``TorchEstimator``: numWorkers=2 on local[2].

Per-epoch times are medians over EPOCHS epochs; the TorchEstimator fit time
also counts what only it pays (repartition, Arrow conversion, barrier
stage, rendezvous, returning the weights). Prints ratios against mp-gloo.

    python benchmarks/torch_overhead.py [--rows 200000] [--epochs 3]
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


def gloo_rank(rank: int, world: int, rows: int, epochs: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    X, y = make_data(rows)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    times = epochs_of(model, X[rank::world], y[rank::world], BATCH // world, epochs, rank)
    dist.destroy_process_group()
    results.put((rank, times))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_spark(rows: int, epochs: int):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
    estimator = TorchEstimator(make_model, torch.nn.CrossEntropyLoss(), numWorkers=2,
                               batchSize=BATCH, epochs=epochs, labelDtype="int64")
    estimator.fit(df.limit(1000))  # warm the Python workers and torch imports
    started = time.perf_counter()
    model = estimator.fit(df)
    wall = time.perf_counter() - started
    spark.stop()
    return model.summary.epochSeconds, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    X, y = make_data(args.rows)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    single = epochs_of(make_model(), X, y, BATCH, args.epochs, 0)

    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    started = time.perf_counter()
    mp.start_processes(gloo_rank, args=(2, args.rows, args.epochs, free_port(), results),
                       nprocs=2, start_method="spawn")
    gloo_wall = time.perf_counter() - started
    gloo = dict(results.get() for _ in range(2))
    gloo_epoch = statistics.median(max(a, b) for a, b in zip(gloo[0], gloo[1]))

    spark_epochs, spark_wall = run_spark(args.rows, args.epochs)
    spark_epoch = statistics.median(spark_epochs)
    single_epoch = statistics.median(single)

    print(f"{args.rows} x {FEATURES}, MLP 64-128-10, Adam, global batch {BATCH}, "
          f"{args.epochs} epochs, medians")
    print(f"{'':34s}{'epoch s':>10s}{'vs mp-gloo':>12s}")
    print(f"{'single process (1 thread)':34s}{single_epoch:10.3f}{single_epoch / gloo_epoch:12.2f}")
    print(f"{'mp-gloo, 2 ranks':34s}{gloo_epoch:10.3f}{1.0:12.2f}")
    print(f"{'TorchEstimator, 2 ranks (in loop)':34s}{spark_epoch:10.3f}"
          f"{spark_epoch / gloo_epoch:12.2f}")
    print(f"whole run: mp-gloo {gloo_wall:.2f} s (incl. spawn), TorchEstimator fit "
          f"{spark_wall:.2f} s; fit overhead beyond its epochs "
          f"{spark_wall - sum(spark_epochs):.2f} s, ratio of whole runs "
          f"{spark_wall / gloo_wall:.2f}")


if __name__ == "__main__":
    main()
