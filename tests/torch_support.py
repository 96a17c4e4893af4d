"""Models, data and a reference loop shared by the torch tests and their cluster job.

The module is pickled by value, so executors need not import it from tests/.
"""

import sys

import numpy as np
import torch
from pyspark import cloudpickle
from pyspark.ml.linalg import Vectors
from sklearn.datasets import load_digits

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def digits_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def small_regressor() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def sgd(lr: float):
    def make(parameters):
        return torch.optim.SGD(parameters, lr=lr)

    return make


def digits(spark, rows=None):
    """(train DataFrame, test DataFrame, X_test, y_test) of scikit-learn's digits, scaled to [0, 1]."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    order = np.random.default_rng(0).permutation(len(X))[:rows]
    X, y = X[order], y[order]
    cut = int(0.8 * len(X))
    frame = [(Vectors.dense(x), float(t)) for x, t in zip(X, y)]
    train = spark.createDataFrame(frame[:cut], ["features", "label"])
    test = spark.createDataFrame(frame[cut:], ["features", "label"])
    return train, test, X[cut:], y[cut:]


def regression_arrays(rows: int = 301, seed: int = 3):
    g = np.random.default_rng(seed)
    X = g.normal(size=(rows, 5)).astype(np.float32)
    y = (np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * g.normal(size=rows)).astype(np.float32)
    return X, y


def full_batch_reference(model_fn, X, y, lr: float, epochs: int, seed: int,
                         dtype: torch.dtype = torch.float32):
    """One process, one full-batch SGD step per epoch, mean squared error. The initial
    weights are drawn in float32 as the estimator draws them, then cast to ``dtype``."""
    torch.manual_seed(seed)
    model = model_fn().to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    features = torch.from_numpy(X).to(dtype)
    target = torch.from_numpy(y).to(dtype).reshape(-1, 1)
    for _ in range(epochs):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(features), target).backward()
        optimizer.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def float32_drift_bound(model_fn, X, y, lr: float, epochs: int, seed: int) -> dict:
    """The exact (float64) full-batch trajectory, and how far float32 arithmetic may
    carry a run from it: float32 rounding, amplified by ``epochs`` steps of these
    dynamics, is measured as the distance of the single-process float32 run from the
    float64 one. A run that sums the same gradients in another order (ranks, threads)
    rounds differently but by the same amount, so it stays within a small multiple of
    that distance; 8x, floored at 64 float32 ulps of the value, leaves room for the
    spread between rounding patterns without admitting a wrong gradient (an error of
    one row's weight moves these parameters by ~1e-3)."""
    exact = full_batch_reference(model_fn, X, y, lr, epochs, seed, torch.float64)
    single = full_batch_reference(model_fn, X, y, lr, epochs, seed, torch.float32)
    drift = max(float(np.abs(single[k] - exact[k]).max()) for k in exact)
    eps32 = float(np.finfo(np.float32).eps)
    return {k: (v, 8 * drift + 64 * eps32 * np.abs(v)) for k, v in exact.items()}


def state_arrays(module) -> dict:
    return {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}


def shard_offsets_after_swapping_ranks(process: int, ports, results) -> None:
    """Two process groups in a row, this process rank ``process`` in the first and the
    other rank in the second (as a reused Spark worker can be); reports
    (group, rank, row offset of the rank's shard of an FSDP-wrapped Linear)."""
    import torch.distributed as dist
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    from gradspark.neural.mesh import RankGrid
    from gradspark.neural.parallelism import FullySharded

    for group, port in enumerate(ports):
        rank = process if group == 0 else 1 - process
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2)
        module = FullySharded(None, RankGrid("fsdp", [[0, 1]], rank)).wrap(
            torch.nn.Linear(4, 4), torch.device("cpu"))
        weight = module.weight
        _, offsets = compute_local_shape_and_global_offset(weight.shape, weight.device_mesh,
                                                           weight.placements)
        results.put((group, rank, offsets[0]))
        dist.destroy_process_group()


class ResidualBlock(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class ResidualNet(torch.nn.Module):
    """Not an nn.Sequential: a pipeline cuts it by tracing its forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(64, 24)
        self.blocks = torch.nn.ModuleList([ResidualBlock(24) for _ in range(3)])
        self.head = torch.nn.Linear(24, 10)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)
