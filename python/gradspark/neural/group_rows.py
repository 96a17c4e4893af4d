"""The rows a batch group trains on together, step by step.

A batch group (:attr:`gradspark.neural.mesh.RankGrid.batch_group`) is one rank
under ddp and fsdp, and a grid row under tensor and pipeline parallelism, whose
ranks all compute on one batch. Its rows are its members' partitions: gathered
once, before the first step, over the row's process group, so a step needs no
data exchange. Step ``s`` of an epoch takes, from every member ``m``, the rows
the batch schedule of :mod:`gradspark.neural.rank_loop` deals it
(``step_rows`` of ``m``'s shuffled order, seeded ``(seed, epoch, m)``), in
member order; the union over all groups is the single-process global batch.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from gradspark.neural.spec import DataLayout, TorchTrainSpec, label_tensor, step_rows


def gather_partitions(arrays: Tuple, members: Sequence[int], group) -> List[Tuple]:
    """Every member's ``arrays`` (this rank's are ``arrays``), in member order."""
    if len(members) == 1:
        return [arrays]
    import torch.distributed as dist

    parts: List = [None] * len(members)
    dist.all_gather_object(parts, arrays, group=group)
    return parts


class GroupRows:
    """The training rows of one batch group, on the device."""

    def __init__(self, spec: TorchTrainSpec, layout: DataLayout, members: Sequence[int],
                 parts: Sequence[Tuple[np.ndarray, np.ndarray]], device) -> None:
        import torch

        self.spec, self.layout, self.members, self.device = spec, layout, list(members), device
        self.features = [torch.as_tensor(X, device=device) for X, _ in parts]
        self.labels = [label_tensor(torch, y, spec, device) for _, y in parts]
        self.offsets = [sum(layout.sizes[:m]) for m in members]
        self.steps = 0
        self.orders: List[np.ndarray] = []

    def shuffle(self, epoch: int, steps: int) -> None:
        """The members' row orders for ``epoch``."""
        self.steps = steps
        self.orders = [np.random.default_rng([self.spec.seed, epoch, m]).permutation(len(f))
                       for m, f in zip(self.members, self.features)]

    def rows_of(self, member_index: int, step: int) -> np.ndarray:
        return step_rows(self.orders[member_index], self.offsets[member_index], self.steps,
                         step)

    def batch(self, step: int):
        """(features, labels) of the group's batch at ``step``; one zero row when the
        group has no row at this step (its collectives still run; the caller weighs it 0)."""
        import torch

        features, labels = [], []
        for i in range(len(self.members)):
            index = torch.as_tensor(self.rows_of(i, step), device=self.device)
            features.append(self.features[i][index])
            labels.append(self.labels[i][index])
        X, y = torch.cat(features), torch.cat(labels)
        if not len(y):
            X = torch.zeros((1, self.layout.width), dtype=torch.float32, device=self.device)
            y = label_tensor(torch, np.zeros(1), self.spec, self.device)
        return X, y


def held_out(spec: TorchTrainSpec, parts: Sequence[Tuple], device,
             width: int) -> Optional[Tuple]:
    """The group's held-out (features, labels), or None without validation."""
    import torch

    if spec.validation_tol is None:
        return None
    X = np.concatenate([p[2] for p in parts]) if parts else np.zeros((0, width), np.float32)
    y = np.concatenate([p[3] for p in parts])
    return torch.as_tensor(X, device=device), label_tensor(torch, y, spec, device)
