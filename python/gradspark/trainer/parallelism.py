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

Checkpoints and the returned model hold the *full* state dict in both cases
(for FSDP gathered with ``torch.distributed.checkpoint.state_dict``, every
rank taking part, onto rank 0's CPU), so a checkpoint resumes on any number
of ranks and the model transforms without torch.distributed.
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

    def model_state(self, model, module) -> Dict[str, Any]:
        """The full module state on the CPU; every rank calls it."""
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

    def bytes_per_rank(self, module, optimizer) -> Dict[str, int]:
        """What this rank holds: parameters and optimizer state, in bytes."""
        parameters = sum(_tensor_bytes(p) for p in module.parameters())
        state = sum(_tensor_bytes(v) for per_param in optimizer.state.values()
                    for v in per_param.values() if hasattr(v, "element_size") and v.dim())
        return {"parameterBytes": parameters, "optimizerStateBytes": state}


class FullySharded(Replicated):
    """FSDP2: parameters, gradients and optimizer state split over the ranks."""

    name = "fsdp"

    def wrap(self, module, device, use_gpu: bool, world: int):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,))
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
