"""Checkpointing of one fit: when to write, and whether a checkpoint may be resumed."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Dict, Optional

import numpy as np

from gradspark.checkpoints.format import TrainingState
from gradspark.checkpoints.store import CheckpointFiles
from gradspark.data.statistics import DataStatistics

logger = logging.getLogger(__name__)

# Params that may change between the killed run and its resumption: they do not
# change the optimization path (maxIter may grow to train longer).
_RESUMABLE_CHANGES = frozenset({
    "maxIter", "checkpointDir", "checkpointInterval", "keepCheckpoints", "resume",
    "checkpointData", "workerTimeout", "parameterServerHost", "executionStrategy",
    "aggregationTopology", "sparsePull", "parameterServers",
    "predictionCol", "rawPredictionCol", "probabilityCol", "threshold",
})


_FINGERPRINT_GROUPS = 64


def data_fingerprint(schema_json: str, stats: DataStatistics) -> str:
    """Schema + row count + weighted column moments, hashed.

    The moments come from the statistics pass every fit already makes, so the
    fingerprint costs nothing extra. Each moment vector enters as 64 group sums
    (columns assigned to groups by a hash of their index) and the same sums
    with fixed pseudo-random position weights (so that moving a column changes
    them), rounded to 10 significant digits so that another summation order
    (another partitioning) still matches. Rounding every coordinate instead
    cost seconds per fit at 2^22 features, and with millions of coordinates
    some land on a rounding boundary and differ between partitionings.
    """
    def summary(values) -> list:
        v = np.atleast_1d(np.asarray(values, dtype=np.float64)).ravel()
        mixed = np.arange(v.size, dtype=np.uint64) * np.uint64(2654435761)
        group = (mixed >> np.uint64(7)) % np.uint64(_FINGERPRINT_GROUPS)
        position = (mixed % np.uint64(997)).astype(np.float64) + 1.0
        sums = np.concatenate([
            np.bincount(group, weights=v, minlength=_FINGERPRINT_GROUPS),
            np.bincount(group, weights=v * position, minlength=_FINGERPRINT_GROUPS)])
        return [float(f"{x:.10g}") for x in sums]

    doc = {
        "schema": schema_json,
        "count": stats.count,
        "features": int(np.size(stats.features.mean)),
        "weight_sum": summary(stats.weight_sum),
        "mean": summary(stats.features.mean),
        "m2": summary(stats.features.m2),
        "label_mean": summary(stats.label.mean),
        "label_m2": summary(stats.label.m2),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def params_signature(params: Dict[str, Any]) -> Dict[str, Any]:
    free = _RESUMABLE_CHANGES
    if params.get("learningRateSchedule") == "cosine":
        free = free - {"maxIter"}  # the cosine schedule anneals over maxIter steps
    return {k: v for k, v in sorted(params.items()) if k not in free}


def run_directory(checkpoint_dir: str, meta: Dict[str, Any]) -> str:
    """This fit's own subdirectory of ``checkpointDir``, named by what a checkpoint must
    match (estimator, data fingerprint, Params that change the path): the fits of a
    CrossValidator (other folds, other grid points) each get their own, so none refuses
    or overwrites another's, while a rerun of the same fit finds its checkpoints."""
    key = hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()
    return f"{checkpoint_dir.rstrip('/')}/{meta['estimator']}-{key[:16]}"


def training_meta(estimator: str, fingerprint: str, params: Dict[str, Any]) -> Dict[str, Any]:
    """What a saved state must match to be continued: estimator, data and Params."""
    return {"estimator": estimator, "fingerprint": fingerprint,
            "params": params_signature(params)}


class TrainingCheckpoints:
    """Writes a checkpoint every ``interval`` steps and finds the one to resume."""

    def __init__(
        self, store: CheckpointFiles, interval: int, meta: Dict[str, Any],
        resume: bool = True,
    ) -> None:
        """``meta``: :func:`training_meta` of the fit, which a checkpoint must match."""
        if interval < 1:
            raise ValueError(f"checkpointInterval must be >= 1 with a checkpointDir, got {interval}")
        self.store = store
        self.interval = interval
        self.resume = resume
        self.meta = meta

    def resume_state(self) -> Optional[TrainingState]:
        if not self.resume:
            return None
        found = self.store.latest()
        if found is None:
            return None
        step, state = found
        where = self.store.location
        if state.meta.get("estimator") != self.meta["estimator"]:
            raise ValueError(
                f"checkpointDir {where} holds a checkpoint of {state.meta.get('estimator')}, "
                f"not {self.meta['estimator']}; use another checkpointDir or resume=False"
            )
        if state.meta.get("fingerprint") != self.meta["fingerprint"]:
            raise ValueError(
                f"checkpointDir {where} holds a checkpoint for different training data "
                "(schema, row count or content changed); refusing to resume. Use another "
                "checkpointDir, or resume=False to start over"
            )
        if state.meta.get("params") != self.meta["params"]:
            old, new = state.meta.get("params", {}), self.meta["params"]
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            raise ValueError(
                f"checkpointDir {where} holds a checkpoint made with other Params "
                f"(changed: {changed}); refusing to resume. Use another checkpointDir, "
                "or resume=False to start over"
            )
        logger.warning("resuming %s from checkpoint step %d in %s",
                       self.meta["estimator"], step, where)
        self.store.adopt(step)
        return state

    def due(self, step: int) -> bool:
        return step % self.interval == 0

    def save(self, step: int, theta, optimizer_state, history, converged: bool = False) -> None:
        state = TrainingState(
            step=step, theta=np.asarray(theta, dtype=np.float64),
            optimizer_state=dict(optimizer_state), history=np.asarray(history, dtype=np.float64),
            converged=converged, meta=self.meta,
        )
        path = self.store.write(state)
        logger.info("checkpoint step %d written to %s", step, path)
