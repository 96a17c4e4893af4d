"""Checkpoints of a torch training run (at epoch ends or mid-epoch), written from an executor.

The linear trainers checkpoint from the driver through Hadoop's FileSystem
(:mod:`gradspark.checkpoints.store`); a barrier stage's rank 0 has no JVM at
hand, so these go through ``pyarrow.fs`` instead, which speaks the same
schemes that matter (local and mounted paths, ``hdfs://``, ``s3://``,
``gs://``). The directory must be reachable from every executor that may run
rank 0: a retried stage can land on another host.

Files are ``epoch-000007.pt`` (after 7 epochs) or ``epoch-000007-step-000012.pt``
(12 steps into the 8th): a ``torch.save`` of a dict with the model and
optimizer state, the position, the loss history and the run's fingerprint
(mid-epoch, also each rank's RNG state and partial sums).
Each is written under a temporary name and moved into place, so a killed task
never leaves a half-written file under a checkpoint name.
"""

from __future__ import annotations

import io
import os
import re
import uuid
from typing import Any, Dict, List, Optional, Tuple

import pyarrow.fs as pafs

_NAME = re.compile(r"^epoch-(\d{6})(?:-step-(\d{6}))?\.pt$")
Position = Tuple[int, int]  # (epochs done, steps done in the next epoch)


def normalize_directory(directory: str) -> str:
    """Absolute URI for a path given on the driver (relative paths are the driver's)."""
    if "://" in directory:
        return directory.rstrip("/")
    return os.path.abspath(directory)


class EpochCheckpoints:
    """Write, find and prune epoch checkpoints under one directory."""

    def __init__(self, directory: str, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keepCheckpoints must be >= 1, got {keep}")
        self.keep = keep
        self.fs, self.root = pafs.FileSystem.from_uri(normalize_directory(directory))
        self.fs.create_dir(self.root, recursive=True)

    def positions(self) -> List[Position]:
        """Positions that have a checkpoint, oldest first."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        found = (_NAME.match(os.path.basename(i.path)) for i in infos)
        return sorted((int(m.group(1)), int(m.group(2) or 0)) for m in found if m)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _file(self, position: Position) -> str:
        epoch, step = position
        return self._path(f"epoch-{epoch:06d}.pt" if not step else
                          f"epoch-{epoch:06d}-step-{step:06d}.pt")

    def clear(self) -> None:
        for position in self.positions():
            self.fs.delete_file(self._file(position))

    def save(self, epoch: int, state: Dict[str, Any], step: int = 0) -> None:
        """Write the checkpoint of ``epoch`` epochs and ``step`` more steps."""
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        temporary = self._path(f".tmp-{uuid.uuid4().hex}")
        with self.fs.open_output_stream(temporary) as out:
            out.write(buffer.getvalue())
        self.fs.move(temporary, self._file((epoch, step)))
        for old in self.positions()[:-self.keep]:
            self.fs.delete_file(self._file(old))

    def load_latest(self) -> Optional[Dict[str, Any]]:
        """The newest checkpoint's state, or None when there is none."""
        import torch

        positions = self.positions()
        if not positions:
            return None
        with self.fs.open_input_stream(self._file(positions[-1])) as stream:
            data = stream.read()
        # Tensors and plain containers only: weights_only refuses anything that
        # would run code on load.
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
