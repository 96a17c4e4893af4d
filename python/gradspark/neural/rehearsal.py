"""One forward/backward in one process before the ranks meet: user functions and the
parallelism plan checked where an error ends the stage at once."""

from __future__ import annotations

from typing import Optional

import numpy as np

from gradspark.neural.mesh import RankGrid
from gradspark.neural.spec import (TorchTrainSpec, TorchTrainingError, batch_loss,
                                   label_tensor, user_call)


def rehearse(spec: TorchTrainSpec, X: np.ndarray, y: np.ndarray, width: int,
             grid: RankGrid) -> Optional[str]:
    """One forward/backward on a few rows, and the parallelism plan checked against the
    model, outside any process group.

    Most mistakes in user functions (wrong shapes or dtypes, a loss that
    raises) and plans that do not fit the model show here; reported through
    allGather, they end the stage on every rank at once rather than in a
    failure Spark retries. Returns the error text, or None.
    """
    from gradspark.neural.pipeline_parallel import resolve_split
    from gradspark.neural.tensor_parallel import resolve_plan

    import torch

    try:
        rows = min(len(X), 8)
        features = torch.as_tensor(X[:rows] if rows else np.zeros((1, width), np.float32))
        labels = label_tensor(torch, y[:rows] if rows else np.zeros(1), spec, "cpu")
        module = user_call("model_fn", spec.model_fn)
        optimizer = user_call("optimizer_fn", spec.optimizer_fn, module.parameters())
        batch_loss(spec, module, features, labels).backward()
        optimizer.zero_grad(set_to_none=True)
        if spec.strategy == "tensor":
            resolve_plan(spec, module)
        elif spec.strategy == "pipeline":
            resolve_split(spec, module, grid.parallel)
        return None
    except TorchTrainingError as error:
        return str(error)
