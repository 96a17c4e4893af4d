"""How TorchEstimator's ranks hold the model, data parallel: DDP, FSDP and HSDP; the base
of every strategy (:mod:`gradspark.neural.strategies` picks one).

``strategy="ddp"``: every rank holds the whole module, its gradients and its
optimizer state; gradients are averaged with all-reduce.

``strategy="fsdp"``: torch's fully-sharded data parallel (FSDP2,
``torch.distributed.fsdp.fully_shard``, on gloo/CPU and NCCL/GPU): each
child module that has parameters, then the root, is sharded over the ranks,
so a rank holds 1/N of the parameters, gradients and optimizer state, and
gathers a layer's parameters only while it runs. Gradients are reduce-
scattered and averaged over the ranks as DDP's are, so the optimizer steps
are the same (tested equal to DDP's). With ``meshShape=[R, S]`` it is HSDP:
sharded over the S ranks of a host group, replicated over R groups.

``strategy="tensor"`` (:mod:`gradspark.neural.tensor_parallel`) and
``strategy="pipeline"`` (:mod:`gradspark.neural.pipeline_parallel`) split one
copy of the model over a row of the rank grid (:mod:`gradspark.neural.mesh`);
the rows are data-parallel replicas.

Every strategy answers the same questions for the training loop
(:mod:`gradspark.neural.rank_loop`): what this rank holds (``module``), one
forward/backward on a batch (``train_step``), a loss without gradients
(``evaluate``), and the state to checkpoint or return. The returned model
holds the *full* state dict in every case (gathered onto rank 0's CPU), so it
transforms without torch.distributed. Checkpoints hold either that full state
(``checkpointFormat="full"``, one file rank 0 writes) or each rank's shards
(``"sharded"``: :mod:`gradspark.checkpoints.distributed`), keyed by the
parameters' names in the unsplit model, so DCP reshards them on load.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from gradspark.neural.mesh import RankGrid
from gradspark.neural.spec import TorchTrainSpec, batch_loss, user_call

def _tensor_bytes(value) -> int:
    local = value.to_local() if hasattr(value, "to_local") else value
    return local.numel() * local.element_size()


class Replicated:
    """DDP: the whole module on every rank."""

    name = "ddp"

    def __init__(self, spec: Optional[TorchTrainSpec], grid: RankGrid) -> None:
        self.spec, self.grid = spec, grid
        self.module = None  # what this rank holds, once wrapped

    @property
    def owns_loss(self) -> bool:
        """Whether this rank's loss counts in the epoch's sum: one rank per batch group."""
        return True

    @property
    def batch_process_group(self):
        """The process group of this rank's batch group (None: the rank alone)."""
        return None

    def wrap(self, module, device):
        """The model to train (every rank calls it); sets :attr:`module`."""
        from torch.nn.parallel import DistributedDataParallel

        self.module = module
        return DistributedDataParallel(
            module, device_ids=[device.index] if device.type == "cuda" else None)

    def train_step(self, model, X, y, scale: float):
        """Forward and backward on a batch, the mean loss's gradient scaled by ``scale``;
        the mean loss (detached), or None on a rank that does not own it."""
        loss = batch_loss(self.spec, model, X, y)
        (loss * scale).backward()
        return loss.detach()

    def evaluate(self, model, X, y):
        """The mean loss of a batch without gradients (None: not this rank's to count, or
        no rows: the forward pass still runs, for the collectives in it)."""
        if not len(y):
            user_call("model forward", self.module, X)
            return None
        return batch_loss(self.spec, self.module, X, y)

    @property
    def chunk_rows(self) -> int:
        """Rows per forward pass when validating."""
        return self.spec.batch_size

    def full_state(self, model, optimizer) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(model state, optimizer state) to checkpoint; every rank calls it."""
        return self.module.state_dict(), optimizer.state_dict()

    def load(self, model, optimizer, model_state, optimizer_state) -> None:
        self.module.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)

    def sharded_state(self, optimizer) -> Dict[str, Any]:
        """This rank's part of the model and optimizer state, keyed by parameter name
        (DTensor shards under FSDP and tensor parallelism, a stage's tensors under the
        pipeline, whole tensors under DDP), for ``torch.distributed.checkpoint``; every
        rank calls it."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.module, optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def load_sharded(self, optimizer, state: Dict[str, Any]) -> None:
        """Load what :meth:`sharded_state` returned, once filled from a checkpoint."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.module, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])

    def model_state(self, model) -> Dict[str, Any]:
        """The full module state on the CPU; every rank calls it."""
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    def bytes_per_rank(self, optimizer) -> Dict[str, int]:
        """What this rank holds: parameters and optimizer state, in bytes."""
        parameters = sum(_tensor_bytes(p) for p in self.module.parameters())
        state = sum(_tensor_bytes(v) for per_param in optimizer.state.values()
                    for v in per_param.values() if hasattr(v, "element_size") and v.dim())
        return {"parameterBytes": parameters, "optimizerStateBytes": state}


class FullySharded(Replicated):
    """FSDP2: parameters, gradients and optimizer state split over the ranks (HSDP on a
    2-D mesh: split within a row, replicated over the rows)."""

    name = "fsdp"

    def _mesh(self, device):
        mesh = self.grid.device_mesh(device.type)
        return mesh if self.grid.replicas > 1 else mesh[mesh.mesh_dim_names[1]]

    def wrap(self, module, device):
        from torch.distributed.fsdp import fully_shard

        mesh = self._mesh(device)
        # Children first, then the root: a child's parameters are gathered only while
        # it runs (the root's own parameters, if any, stay in the root's group).
        for child in list(module.children()):
            if any(True for _ in child.parameters()):
                fully_shard(child, mesh=mesh)
        fully_shard(module, mesh=mesh)
        self.module = module
        return module

    @staticmethod
    def _options(**extra):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, **extra)

    def full_state(self, model, optimizer):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        return get_state_dict(self.module, optimizer, options=self._options(cpu_offload=True))

    def load(self, model, optimizer, model_state, optimizer_state) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.module, optimizer, model_state_dict=model_state,
                       optim_state_dict=optimizer_state, options=self._options())

    def model_state(self, model):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.module, options=self._options(cpu_offload=True))
