"""``strategy="tensor"``: one layer's matrix products split over a row of ranks.

Built on ``torch.distributed.tensor.parallel.parallelize_module``: a plan maps
module names to ``"colwise"`` (an ``nn.Linear``'s output features, or an
``nn.Embedding``'s columns, split over the ranks) or ``"rowwise"`` (its input
features split; the partial products are all-reduced). A colwise layer
followed by a rowwise one needs no collective between them, so an MLP block
``Linear -> activation -> Linear`` costs one all-reduce forward and one
backward (Megatron-LM's split). Parameters and their optimizer state are
DTensors: each rank holds its half of every split layer.

``tensorParallelPlan`` gives the plan; left empty, :func:`default_plan` finds
the MLP blocks: every ``nn.Linear`` followed, after parameter-free modules
only, by another ``nn.Linear`` in the same parent becomes colwise and that
next one rowwise.

Every rank of a row takes the row's whole batch (the rows of all its ranks'
partitions) and computes the same loss; rank 0 of the row counts it. With
``meshShape=[R, T]`` the R rows are data-parallel replicas: the module is also
``fully_shard``-ed over them (torch's "2-D" FSDP + TP recipe), which averages
their gradients.
"""

from __future__ import annotations

from typing import Dict, Mapping

from gradspark.neural.parallelism import FullySharded
from gradspark.neural.spec import TorchTrainingError

PLAN_STYLES = ("colwise", "rowwise")


def default_plan(module) -> Dict[str, str]:
    """Colwise/rowwise for each ``Linear -> (parameter-free modules) -> Linear`` pair of
    siblings, by module name."""
    import torch

    plan: Dict[str, str] = {}
    for parent_name, parent in module.named_modules():
        pending = None  # a Linear waiting for its rowwise partner
        for name, child in parent.named_children():
            full = f"{parent_name}.{name}" if parent_name else name
            if isinstance(child, torch.nn.Linear):
                if pending is not None:
                    plan[pending], plan[full] = "colwise", "rowwise"
                    pending = None
                else:
                    pending = full
            elif any(True for _ in child.parameters()):
                pending = None
    return plan


def check_plan(module, plan: Mapping[str, str]) -> None:
    """TorchTrainingError naming the entry of ``plan`` that does not fit ``module``."""
    import torch

    modules = dict(module.named_modules())
    for name, style in plan.items():
        if style not in PLAN_STYLES:
            raise TorchTrainingError(f"tensorParallelPlan[{name!r}] is {style!r}; use one of "
                                     f"{list(PLAN_STYLES)}")
        if name not in modules:
            raise TorchTrainingError(f"tensorParallelPlan names {name!r}, which the model "
                                     f"does not have; its modules: "
                                     f"{[n for n in modules if n][:20]}")
        if not isinstance(modules[name], (torch.nn.Linear, torch.nn.Embedding)):
            raise TorchTrainingError(f"tensorParallelPlan[{name!r}]: only nn.Linear and "
                                     f"nn.Embedding split, it is a "
                                     f"{type(modules[name]).__name__}")


def resolve_plan(spec, module) -> Dict[str, str]:
    """``tensorParallelPlan``, or the default one; TorchTrainingError naming what does not
    fit the model (checked in one process before the ranks meet)."""
    plan = dict(spec.tensor_plan) or default_plan(module)
    if not plan:
        raise TorchTrainingError(
            "strategy='tensor' found no Linear -> Linear block to split in the model; "
            "give tensorParallelPlan, e.g. {'fc1': 'colwise', 'fc2': 'rowwise'}")
    check_plan(module, plan)
    return plan


class TensorParallel(FullySharded):
    """Tensor parallelism over a grid row; data parallel (FSDP) over the rows."""

    name = "tensor"

    @property
    def owns_loss(self) -> bool:
        return self.grid.column == 0

    @property
    def batch_process_group(self):
        return self.mesh.get_group(1)

    def wrap(self, module, device):
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)

        plan = resolve_plan(self.spec, module)
        mesh = self.mesh = self.grid.device_mesh(device.type)
        data, tensor = mesh.mesh_dim_names
        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        parallelize_module(module, mesh[tensor], {k: styles[v]() for k, v in plan.items()})
        if self.grid.replicas > 1:
            fully_shard(module, mesh=mesh[data])
        self.module = module
        return module

    def evaluate(self, model, X, y):
        loss = super().evaluate(model, X, y)
        return loss if self.owns_loss else None

    def train_step(self, model, X, y, scale: float):
        loss = super().train_step(model, X, y, scale)
        return loss if self.owns_loss else None
