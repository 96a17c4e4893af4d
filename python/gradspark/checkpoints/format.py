"""The bytes of one checkpoint: a magic line, a SHA-256 of the payload, the payload.

The payload is an ``.npz`` archive (numpy's own format, no pickle): every
array of the state plus one JSON document for the scalars, so a checkpoint
can be read without executing anything it contains.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from typing import Any, Dict

import numpy as np

MAGIC = b"GRADSPARK-CHECKPOINT-1\n"


class CheckpointWriteError(IOError):
    """A checkpoint could not be written: the fit stops, naming the path and the cause
    (training on without the checkpoints the user asked for would lose work silently)."""


class CorruptCheckpointError(ValueError):
    """A checkpoint whose bytes do not match its checksum, or that cannot be parsed."""


@dataclass
class TrainingState:
    """Everything needed to continue a fit exactly where it stopped."""

    step: int  # the next step to run
    theta: np.ndarray
    optimizer_state: Dict[str, np.ndarray] = field(default_factory=dict)
    history: np.ndarray = field(default_factory=lambda: np.zeros(0))
    converged: bool = False
    meta: Dict[str, Any] = field(default_factory=dict)  # fingerprint, Params, optimizer name

    def to_bytes(self) -> bytes:
        arrays = {"theta": self.theta, "history": np.asarray(self.history, dtype=np.float64)}
        arrays.update({f"opt.{k}": v for k, v in self.optimizer_state.items()})
        doc = {"step": int(self.step), "converged": bool(self.converged), "meta": self.meta}
        arrays["doc"] = np.frombuffer(json.dumps(doc, sort_keys=True).encode(), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        payload = buffer.getvalue()
        return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload

    @classmethod
    def from_bytes(cls, data: bytes) -> "TrainingState":
        header = len(MAGIC) + 65
        if not data.startswith(MAGIC) or len(data) < header:
            raise CorruptCheckpointError("not a gradspark checkpoint (bad header)")
        digest, payload = data[len(MAGIC): header - 1].decode(errors="replace"), data[header:]
        if hashlib.sha256(payload).hexdigest() != digest:
            raise CorruptCheckpointError("checksum mismatch (truncated or corrupted)")
        try:
            with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
            doc = json.loads(arrays.pop("doc").tobytes().decode())
        except Exception as exc:  # checksum matched but the content is unreadable
            raise CorruptCheckpointError(f"unreadable payload: {exc}") from exc
        return cls(
            step=int(doc["step"]),
            theta=arrays.pop("theta"),
            history=arrays.pop("history"),
            optimizer_state={k[4:]: v for k, v in arrays.items() if k.startswith("opt.")},
            converged=bool(doc["converged"]),
            meta=doc["meta"],
        )
