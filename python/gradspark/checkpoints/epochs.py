"""Checkpoints of a torch training run (at epoch ends or mid-epoch), written from an executor.

The linear trainers checkpoint from the driver through Hadoop's FileSystem
(:mod:`gradspark.checkpoints.store`); a barrier stage's rank 0 has no JVM at
hand, so these go through ``pyarrow.fs`` instead, which speaks the same
schemes that matter (local and mounted paths, ``hdfs://``, ``s3://``,
``gs://``). The directory must be reachable from every executor that may run
a rank (rank 0 for full checkpoints, every rank for sharded ones): a retried
stage can land on other hosts.

A checkpoint is named by its position: ``epoch-000007`` (after 7 epochs) or
``epoch-000007-step-000012`` (12 steps into the 8th). It holds the model and
optimizer state, the position, the loss history and the run's fingerprint
(mid-epoch, also each rank's RNG state and partial sums), in one of two
formats:

* ``<name>.pt`` (``checkpointFormat="full"``): one ``torch.save`` of all of it,
  which rank 0 writes under a temporary name and moves into place, so a
  killed task never leaves a half-written file under a checkpoint name;
* ``<name>.dcp/`` (``"sharded"``): a directory of
  ``torch.distributed.checkpoint`` files, one per rank, each written by its
  rank (:mod:`gradspark.checkpoints.distributed`), and ``state.pt`` with the rest,
  which rank 0 writes last: a directory without it is a torn write, never
  resumed from and pruned with the old checkpoints.
"""

from __future__ import annotations

import io
import os
import re
import uuid
from typing import Any, Dict, List, Optional, Tuple

import pyarrow.fs as pafs

_NAME = re.compile(r"^epoch-(\d{6})(?:-step-(\d{6}))?\.(pt|dcp)$")
_MARKER = "state.pt"  # in a sharded checkpoint's directory, written after every shard
Position = Tuple[int, int]  # (epochs done, steps done in the next epoch)


def normalize_directory(directory: str) -> str:
    """Absolute URI for a path given on the driver (relative paths are the driver's)."""
    if "://" in directory:
        return directory.rstrip("/")
    return os.path.abspath(directory)


def _name(position: Position, kind: str) -> str:
    epoch, step = position
    return (f"epoch-{epoch:06d}" + (f"-step-{step:06d}" if step else "")) + f".{kind}"


class EpochCheckpoints:
    """Write, find and prune epoch checkpoints under one directory."""

    def __init__(self, directory: str, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keepCheckpoints must be >= 1, got {keep}")
        self.keep = keep
        self.fs, self.root = pafs.FileSystem.from_uri(normalize_directory(directory))
        self.fs.create_dir(self.root, recursive=True)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _entries(self) -> List[Tuple[Position, str, bool]]:
        """(position, file or directory name, complete) of everything named like a
        checkpoint, oldest first."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        entries = []
        for info in infos:
            match = _NAME.match(info.base_name)
            if match:
                complete = match.group(3) == "pt" or self.fs.get_file_info(
                    f"{info.path}/{_MARKER}").type == pafs.FileType.File
                entries.append(((int(match.group(1)), int(match.group(2) or 0)),
                                info.base_name, complete))
        return sorted(entries)

    def positions(self) -> List[Position]:
        """Positions that have a complete checkpoint, oldest first."""
        return sorted({position for position, _, complete in self._entries() if complete})

    def _remove(self, name: str) -> None:
        if name.endswith(".dcp"):
            self.fs.delete_dir(self._path(name))
        else:
            self.fs.delete_file(self._path(name))

    def delete(self, position: Position) -> None:
        """Remove the checkpoint at ``position`` (either format, complete or torn)."""
        for found, name, _ in self._entries():
            if found == position:
                self._remove(name)

    def clear(self) -> None:
        for _, name, _ in self._entries():
            self._remove(name)

    def _prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints; torn ones go too."""
        entries = self._entries()  # one listing (and one marker lookup per directory)
        kept = set(sorted({position for position, _, complete in entries
                           if complete})[-self.keep:])
        for position, name, complete in entries:
            if position not in kept or not complete:
                self._remove(name)

    def _write(self, path: str, state: Dict[str, Any]) -> None:
        """``torch.save`` to a temporary name, then moved into place."""
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        temporary = self._path(f".tmp-{uuid.uuid4().hex}")
        with self.fs.open_output_stream(temporary) as out:
            out.write(buffer.getvalue())
        self.fs.move(temporary, path)

    def save(self, epoch: int, state: Dict[str, Any], step: int = 0) -> None:
        """Write the full checkpoint of ``epoch`` epochs and ``step`` more steps (rank 0)."""
        self.delete((epoch, step))  # the other format's, if the run switched
        self._write(self._path(_name((epoch, step), "pt")), state)
        self._prune()

    def save_sharded(self, epoch: int, state: Dict[str, Any], shards: Dict[str, Any],
                     rank: int, step: int = 0) -> None:
        """Write a sharded checkpoint: every rank its ``shards`` (a collective, all
        ranks call it), then rank 0 the rest of ``state`` as the marker."""
        import torch.distributed as dist

        from gradspark.checkpoints.distributed import save_shards

        directory = self._path(_name((epoch, step), "dcp"))
        if rank == 0:  # a torn attempt's files, or the other format's
            self.delete((epoch, step))
            self.fs.create_dir(directory, recursive=True)
        dist.barrier()
        save_shards(self.fs, directory, shards)  # returns once every rank has written
        if rank == 0:
            self._write(f"{directory}/{_MARKER}", state)
            self._prune()

    def load_latest(self) -> Optional[Dict[str, Any]]:
        """The newest checkpoint's state, or None when there is none. A sharded one's
        state holds ``"shards"`` (its directory, for :meth:`read_shards`) in place of
        ``"model"`` and ``"optimizer"``."""
        import torch

        complete = [(position, name) for position, name, done in self._entries() if done]
        if not complete:
            return None
        name = complete[-1][1]
        sharded = name.endswith(".dcp")
        path = self._path(f"{name}/{_MARKER}" if sharded else name)
        with self.fs.open_input_stream(path) as stream:
            data = stream.read()
        # Tensors and plain containers only: weights_only refuses anything that
        # would run code on load.
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if sharded:
            state["shards"] = self._path(name)
        return state

    def read_shards(self, state: Dict[str, Any], into: Dict[str, Any]) -> None:
        """Fill ``into`` (this rank's state dict) from the sharded checkpoint ``state``
        came from; every rank calls it."""
        from gradspark.checkpoints.distributed import load_shards

        load_shards(self.fs, state["shards"], into)
