"""How TorchEstimator's ranks hold the model: replicated (DDP) or fully sharded (FSDP).

``strategy="ddp"``: every rank holds the whole module, its gradients and its
optimizer state; gradients are averaged with all-reduce.

``strategy="fsdp"``: torch's fully-sharded data parallel (FSDP2,
``torch.distributed.fsdp.fully_shard``, on gloo/CPU and NCCL/GPU): each
child module that has parameters, then the root, is sharded over the ranks,
so a rank holds 1/N of the parameters, gradients and optimizer state, and
gathers a layer's parameters only while it runs. Gradients are reduce-
scattered and averaged over the ranks as DDP's are, so the optimizer steps
are the same (tested equal to DDP's).

The returned model holds the *full* state dict in both cases (for FSDP
gathered with ``torch.distributed.checkpoint.state_dict``, every rank taking
part, onto rank 0's CPU), so it transforms without torch.distributed.
Checkpoints hold either that full state (``checkpointFormat="full"``, one
file rank 0 writes) or each rank's shards (``"sharded"``, the default under
FSDP: :mod:`gradspark.checkpoints.distributed`); both resume on any number of
ranks.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

STRATEGIES = ("ddp", "fsdp")


def _tensor_bytes(value) -> int:
    local = value.to_local() if hasattr(value, "to_local") else value
    return local.numel() * local.element_size()


class Replicated:
    """DDP: the whole module on every rank."""

    name = "ddp"

    def wrap(self, module, device, use_gpu: bool, world: int):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module, device_ids=[device.index] if use_gpu else None)

    def full_state(self, model, module, optimizer) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(model state, optimizer state) to checkpoint; every rank calls it."""
        return module.state_dict(), optimizer.state_dict()

    def load(self, model, module, optimizer, model_state, optimizer_state) -> None:
        module.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)

    def sharded_state(self, module, optimizer) -> Dict[str, Any]:
        """This rank's part of the model and optimizer state, keyed by parameter name
        (DTensor shards under FSDP, whole tensors under DDP), for
        ``torch.distributed.checkpoint``; every rank calls it."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(module, optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def load_sharded(self, module, optimizer, state: Dict[str, Any]) -> None:
        """Load what :meth:`sharded_state` returned, once filled from a checkpoint."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(module, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])

    def model_state(self, model, module) -> Dict[str, Any]:
        """The full module state on the CPU; every rank calls it."""
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

    def bytes_per_rank(self, module, optimizer) -> Dict[str, int]:
        """What this rank holds: parameters and optimizer state, in bytes."""
        parameters = sum(_tensor_bytes(p) for p in module.parameters())
        state = sum(_tensor_bytes(v) for per_param in optimizer.state.values()
                    for v in per_param.values() if hasattr(v, "element_size") and v.dim())
        return {"parameterBytes": parameters, "optimizerStateBytes": state}


def _fresh_mesh_name() -> str:
    """A mesh dimension name no earlier process group in this process used.

    Spark reuses Python workers, so one process can be rank 1 in one fit and rank 0
    in the next. torch's DTensor caches (sharding propagation, redistribution) key on
    the DeviceMesh, whose equality ignores which rank holds it: an equal mesh from an
    earlier fit comes back with that fit's coordinate, and the parameters' shard
    offsets (what torch.distributed.checkpoint writes and reads) name the other
    rank's half. A name of its own per process group keeps those caches apart.
    """
    import uuid

    import torch.distributed as dist

    name = [uuid.uuid4().hex]
    dist.broadcast_object_list(name, src=0)
    return f"fsdp-{name[0]}"


class FullySharded(Replicated):
    """FSDP2: parameters, gradients and optimizer state split over the ranks."""

    name = "fsdp"

    def wrap(self, module, device, use_gpu: bool, world: int):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,), mesh_dim_names=(_fresh_mesh_name(),))
        # Children first, then the root: a child's parameters are gathered only while
        # it runs (the root's own parameters, if any, stay in the root's group).
        for child in list(module.children()):
            if any(True for _ in child.parameters()):
                fully_shard(child, mesh=mesh)
        fully_shard(module, mesh=mesh)
        return module

    @staticmethod
    def _options(**extra):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, **extra)

    def full_state(self, model, module, optimizer):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        return get_state_dict(module, optimizer, options=self._options(cpu_offload=True))

    def load(self, model, module, optimizer, model_state, optimizer_state) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(module, optimizer, model_state_dict=model_state,
                       optim_state_dict=optimizer_state, options=self._options())

    def model_state(self, model, module):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(module, options=self._options(cpu_offload=True))


def parallelism(strategy: str) -> Replicated:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    return FullySharded() if strategy == "fsdp" else Replicated()
