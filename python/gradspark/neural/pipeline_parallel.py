"""``strategy="pipeline"``: the model's layers split into stages, one per rank of a grid
row, micro-batches flowing through them.

Built on ``torch.distributed.pipelining``: an ``nn.Sequential`` is cut between
its children as it is (:func:`sequential_stage`); any other model is traced by
``pipeline()`` (``torch.export``) and cut at the named submodules, its
training-mode ops fixed by the trace (dropout and batch norm then validate as
they train). Each rank builds its stage, and a GPipe or 1F1B schedule (``pipelineSchedule``) runs
``microBatches`` micro-batches per optimizer step. A rank holds its stage's
parameters and optimizer state only; their names are the unsplit model's, so
checkpoints and the returned model's state dict key them as a single process
would.

Where the cuts go: ``pipelineSplit`` names the submodules that begin stages
2, 3, ...; left empty, :func:`balanced_split` cuts the model's blocks (its
children, with ``nn.Sequential``/``nn.ModuleList`` containers opened) where
the running parameter count passes 1/S, 2/S, ... of the total.

Fixed shapes: a stage allocates its receive buffers from the first batch's
shapes, so every step runs one padded batch of :func:`padded_batch_rows` rows
(the largest batch a row of ranks ever trains on, rounded up to a multiple of
``microBatches``). The target the schedule carries is each row's index into
the step's labels, -1 for padding; :class:`IndexedLoss` drops the padding and
weighs each micro-batch's mean loss by its real rows, so the gradient is the
one of the whole batch's mean loss, as in one process. (Layers that mix rows,
such as BatchNorm, do see the zero padding rows.)

With ``meshShape=[R, S]`` the R rows are data-parallel replicas: each stage is
``fully_shard``-ed over its replicas (torchtitan's PP + FSDP; torch's stages
reduce the gradients once per step, after the last micro-batch).
"""

from __future__ import annotations

import logging
import math
from typing import Dict, List, Sequence

import numpy as np

from gradspark.neural.parallelism import Replicated
from gradspark.neural.spec import TorchTrainingError, loss_of

logger = logging.getLogger(__name__)

SCHEDULES = ("gpipe", "1f1b")


def _training_dependent():
    import torch

    return (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._NormBase)


def group_batch_sizes(sizes: Sequence[int], members: Sequence[int], steps: int) -> np.ndarray:
    """Rows a batch group of ``members`` (ranks, with partition ``sizes``) trains on at
    each step of an epoch (the schedule of :mod:`gradspark.neural.rank_loop`)."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    step = np.arange(steps)
    total = np.zeros(steps, np.int64)
    for member in members:
        first = (step - offsets[member]) % steps
        total += np.maximum(0, -(-(sizes[member] - first) // steps))
    return total


def padded_batch_rows(sizes: Sequence[int], grid: List[List[int]], steps: int,
                      micro_batches: int) -> int:
    """The pipeline's one batch shape: the largest row batch, up to a multiple of
    ``micro_batches`` (at least one row per micro-batch)."""
    largest = max(int(group_batch_sizes(sizes, row, steps).max()) for row in grid)
    return micro_batches * max(1, math.ceil(largest / micro_batches))


def _blocks(module) -> List[tuple]:
    """(name, parameter count) of the model's blocks in registration order: its children,
    containers opened."""
    import torch

    out = []

    def visit(prefix, parent):
        for name, child in parent.named_children():
            full = f"{prefix}{name}"
            if isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList)):
                visit(f"{full}.", child)
            else:
                out.append((full, sum(p.numel() for p in child.parameters())))

    visit("", module)
    return out


def balanced_split(module, stages: int) -> List[str]:
    """The blocks that begin stages 2..S, cut where the running parameter count is
    nearest to k/S of the total (each stage at least one block; the model's forward
    must run its blocks in registration order, which the trace checks)."""
    blocks = _blocks(module)
    if len(blocks) < stages:
        raise TorchTrainingError(
            f"strategy='pipeline' with {stages} stages: the model has only {len(blocks)} "
            f"blocks to cut between ({[b[0] for b in blocks]}); give pipelineSplit or "
            f"fewer stages")
    counts = np.array([count for _, count in blocks], np.float64)
    before = np.concatenate([[0.0], np.cumsum(counts)[:-1]])  # parameters before block i
    cuts: List[int] = []
    for k in range(1, stages):
        low = cuts[-1] + 1 if cuts else 1
        high = len(blocks) - (stages - k)  # leave a block for every later stage
        target = counts.sum() * k / stages
        distance = np.abs(before[low:high + 1] - target)
        # on a tie, the later block: a parameter-free block (an activation) stays with
        # the layer before it
        cuts.append(high - int(np.argmin(distance[::-1])))
    return [blocks[i][0] for i in cuts]


def sequential_stage(module, split: Sequence[str], index: int):
    """Stage ``index`` of an ``nn.Sequential`` cut before the children named in ``split``:
    a Sequential of those children under their own names (so parameter names stay the
    model's), no tracing, and ``eval()`` works as in the model."""
    import torch

    names = list(module._modules)
    bounds = [0, *[names.index(name) for name in split], len(names)]
    stage = torch.nn.Sequential()
    for name in names[bounds[index]:bounds[index + 1]]:
        stage.add_module(name, module._modules[name])
    return stage


def resolve_split(spec, module, stages: int) -> List[str]:
    """``pipelineSplit``, or the balanced one; TorchTrainingError naming what does not fit
    the model (checked in one process before the ranks meet)."""
    split = list(spec.pipeline_split) or (balanced_split(module, stages) if stages > 1
                                          else [])
    if len(split) != stages - 1:
        raise TorchTrainingError(f"pipelineSplit names {len(split)} cut(s) {split}, but "
                                 f"the mesh has {stages} stages: name {stages - 1}")
    names = dict(module.named_modules())
    missing = [name for name in split if name not in names]
    if missing:
        raise TorchTrainingError(f"pipelineSplit names {missing}, which the model does "
                                 f"not have; its modules: {[n for n in names if n][:20]}")
    return split


class IndexedLoss:
    """The schedule's loss function: ``target`` holds indices into the step's labels
    (-1: padding); each micro-batch's mean loss is weighted by its real rows times
    ``weight``, so the micro-batches' losses sum to ``weight`` times the batch's total."""

    def __init__(self, spec) -> None:
        self.spec = spec
        self.labels = None
        self.weight = 0.0

    def __call__(self, output, index):
        real = index >= 0
        count = int(real.sum())
        if not count:
            return output.sum() * 0.0
        loss = loss_of(self.spec, output[real], self.labels[index[real]])
        return loss * (count * self.weight)


class Pipelined(Replicated):
    """Pipeline stages over a grid row; FSDP over the rows (the replicas)."""

    name = "pipeline"

    def __init__(self, spec, grid, padded_rows: int, width: int) -> None:
        super().__init__(spec, grid)
        self.padded_rows, self.width = padded_rows, width
        self.schedule = self.stage = self.loss = self.mesh = self.device = None

    @property
    def owns_loss(self) -> bool:
        return self.grid.column == self.grid.parallel - 1

    @property
    def batch_process_group(self):
        return self.mesh.get_group(1)

    def wrap(self, module, device):
        import torch
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
        from torch.distributed.fsdp import fully_shard

        stages, index = self.grid.parallel, self.grid.column
        self.device = device
        self.mesh = self.grid.device_mesh(device.type)
        split = resolve_split(self.spec, module, stages)
        if isinstance(module, torch.nn.Sequential) and all(name in module._modules
                                                           for name in split):
            self.module = model = sequential_stage(module, split, index).to(device)
        else:
            self.module = model = self._traced_stage(module, split, device)
        if self.grid.replicas > 1:
            # FSDP over the replicas (torchtitan's PP + FSDP): the stage reduces the
            # gradients once per step. (DDP's reducer fails on a pipeline stage's second
            # step in torch 2.13: it sees each parameter ready once per micro-batch.)
            fully_shard(self.module, mesh=self.mesh[self.mesh.mesh_dim_names[0]])
        self.stage = PipelineStage(model, index, stages, device, group=self.batch_process_group)
        self.loss = IndexedLoss(self.spec)
        schedule = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[self.spec.pipeline_schedule]
        self.schedule = schedule(self.stage, self.spec.micro_batches, loss_fn=self.loss,
                                 scale_grads=False)
        return model

    def _traced_stage(self, module, split: List[str], device):
        """This rank's stage of a model cut by torch.export (any forward pass)."""
        import torch
        from torch.distributed.pipelining import SplitPoint, pipeline

        micro = self.padded_rows // self.spec.micro_batches
        example = torch.zeros(micro, self.width, device=device)
        try:
            pipe = pipeline(module, mb_args=(example,),
                            split_spec={name: SplitPoint.BEGINNING for name in split})
        except Exception as error:
            raise TorchTrainingError(f"strategy='pipeline' could not trace the model with "
                                     f"torch.export to cut it at {split}: "
                                     f"{type(error).__name__}: {error}") from error
        stages = self.grid.parallel
        if pipe.num_stages != stages:
            raise TorchTrainingError(f"cutting the model at {split} gave {pipe.num_stages} "
                                     f"stages, not {stages}: the cuts must be submodules "
                                     f"the forward pass runs in that order")
        if self.spec.validation_tol is not None and any(
                isinstance(m, _training_dependent()) for m in module.modules()):
            logger.warning("strategy='pipeline' traced the model in training mode: its "
                           "dropout and batch-norm layers validate as they train. An "
                           "nn.Sequential model is cut without tracing and validates in "
                           "eval mode")
        return pipe.get_stage_module(self.grid.column).to(device)

    def _run(self, X, y, scale: float, evaluate: bool):
        import torch

        rows = len(y)
        if rows > self.padded_rows:  # a validation chunk is cut to this size by the loop
            raise AssertionError(f"{rows} rows exceed the pipeline's {self.padded_rows}")
        index = torch.full((self.padded_rows,), -1, dtype=torch.int64, device=self.device)
        index[:rows] = torch.arange(rows, device=self.device)
        # (the schedule also calls the loss once while it infers shapes: the returned
        # per-micro-batch losses, not the calls, are what the step computed)
        self.loss.labels, self.loss.weight = y, scale / max(rows, 1)
        args, kwargs, losses = (), {}, []
        if self.stage.is_first:
            padded = torch.zeros((self.padded_rows, *X.shape[1:]), dtype=X.dtype,
                                 device=self.device)
            padded[:rows] = X[:rows]
            args = (padded,)
        if self.stage.is_last:
            kwargs = {"target": index, "losses": losses}
        run = self.schedule.eval if evaluate else self.schedule.step
        try:
            run(*args, **kwargs)
        except RuntimeError as error:  # torch's stage error hides its cause's text
            cause = error.__cause__
            raise TorchTrainingError(
                f"pipeline stage {self.grid.column}: {str(error).strip()}"
                + (f"\ncaused by {type(cause).__name__}: {cause}" if cause else "")) from error
        if not self.owns_loss:
            return None
        total = float(sum(loss.detach().double() for loss in losses))
        return torch.tensor(total / scale if scale else 0.0)

    def train_step(self, model, X, y, scale: float):
        return self._run(X, y, scale, evaluate=False)

    def evaluate(self, model, X, y):
        return self._run(X, y, 1.0, evaluate=True)

    @property
    def chunk_rows(self) -> int:
        return self.padded_rows

    def _gather(self, value):
        import torch.distributed as dist

        parts: List = [None] * self.grid.parallel
        dist.all_gather_object(parts, value, group=self.batch_process_group)
        return parts

    @staticmethod
    def _full():
        """Whole tensors on every rank (a replica-sharded stage gathers them; rank 0 alone
        would be the only one to get them with cpu_offload)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True)

    def full_state(self, model, optimizer):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.module, optimizer,
                                                      options=self._full())
        parts = self._gather((_to_cpu(model_state), _to_cpu(optimizer_state)))
        merged_model: Dict = {}
        merged_optimizer: Dict = {"state": {}, "param_groups": []}
        for stage_model, stage_optimizer in parts:
            merged_model.update(stage_model)
            merged_optimizer["state"].update(stage_optimizer["state"])
            groups = merged_optimizer["param_groups"]
            for i, group in enumerate(stage_optimizer["param_groups"]):
                if i < len(groups):
                    groups[i]["params"] = groups[i]["params"] + list(group["params"])
                else:
                    groups.append(dict(group, params=list(group["params"])))
        return merged_model, merged_optimizer

    def load(self, model, optimizer, model_state, optimizer_state) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        mine = set(self.module.state_dict())
        missing = sorted(mine - set(model_state))
        if missing:
            raise TorchTrainingError(f"the checkpoint has no {missing[:5]}: it was written "
                                     f"for another model")
        optimizer_state = {
            "state": {k: v for k, v in optimizer_state["state"].items() if k in mine},
            "param_groups": [dict(g, params=[p for p in g["params"] if p in mine])
                             for g in optimizer_state["param_groups"]]}
        set_state_dict(self.module, optimizer,
                       model_state_dict={k: v for k, v in model_state.items() if k in mine},
                       optim_state_dict=optimizer_state, options=self._full())

    @staticmethod
    def _flat():
        """The optimizer state keyed by parameter name (``state.<name>.exp_avg``,
        ``param_groups.<name>.lr``): the stages' key sets are then disjoint. Left
        nested, every stage writes ``param_groups.0`` with its own parameter list, DCP
        keeps one of them, and the other stage resumes with a broken param group."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(flatten_optimizer_state_dict=True)

    def sharded_state(self, optimizer):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.module, optimizer,
                                                      options=self._flat())
        return {"model": model_state, "optimizer": optimizer_state}

    def load_sharded(self, optimizer, state):
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.module, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"], options=self._flat())

    def model_state(self, model):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        merged: Dict = {}
        state = get_model_state_dict(self.module, options=self._full())
        for part in self._gather(_to_cpu(state)):
            merged.update(part)
        return merged


def _to_cpu(state):
    """A copy of a (nested) state dict with every tensor on the CPU."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.detach().cpu().clone()
    if isinstance(state, dict):
        return {k: _to_cpu(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_to_cpu(v) for v in state)
    return state
