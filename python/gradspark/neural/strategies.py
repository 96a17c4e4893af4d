"""The ``strategy`` Param: which class holds the model on a rank.

``ddp`` and ``fsdp`` (HSDP on a 2-D mesh): :mod:`gradspark.neural.parallelism`;
``tensor``: :mod:`gradspark.neural.tensor_parallel`; ``pipeline``:
:mod:`gradspark.neural.pipeline_parallel`. All answer the training loop's
questions the same way (:class:`gradspark.neural.parallelism.Replicated`).
"""

from __future__ import annotations

from gradspark.neural.mesh import RankGrid
from gradspark.neural.parallelism import FullySharded, Replicated
from gradspark.neural.pipeline_parallel import Pipelined
from gradspark.neural.spec import TorchTrainSpec
from gradspark.neural.tensor_parallel import TensorParallel

STRATEGIES = ("ddp", "fsdp", "tensor", "pipeline")


def parallelism(spec: TorchTrainSpec, grid: RankGrid, width: int = 0,
                padded_rows: int = 0) -> Replicated:
    """The strategy object for ``spec.strategy``. The pipeline needs the features'
    ``width`` and its fixed batch shape, ``padded_rows``
    (:func:`gradspark.neural.pipeline_parallel.padded_batch_rows`)."""
    if spec.strategy == "fsdp":
        return FullySharded(spec, grid)
    if spec.strategy == "tensor":
        return TensorParallel(spec, grid)
    if spec.strategy == "pipeline":
        return Pipelined(spec, grid, padded_rows, width)
    if spec.strategy == "ddp":
        return Replicated(spec, grid)
    raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {spec.strategy!r}")
