"""Carrying out a :class:`~gradspark.fit.plan.FitPlan`: the engine it names, built whole,
and the trainer it names, run.

Nothing here reads Params: everything the engine and the trainer need is in
the plan (or handed over by the estimator: the objective, the start, the
checkpoints).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import numpy as np

from gradspark.comm.compression import Compression
from gradspark.data.frames import FrameTrainingData
from gradspark.engine.frame_jobs import FrameGradientEngine
from gradspark.engine.jvm import JvmGradientEngine
from gradspark.engine.python import PythonGradientEngine
from gradspark.engine.resident import ResidentGradientEngine
from gradspark.fit.driver_blas import single_threaded_blas
from gradspark.fit.plan import FitPlan
from gradspark.losses import Loss
from gradspark.trainer import LinearObjective, TrainingResult, train_async, train_sync
from gradspark.trainer.local_sgd import LocalSGDResponse, train_local_sgd
from gradspark.trainer.sharded import train_sharded
from gradspark.trainer.early_stopping import EarlyStopping


def gradient_engine(plan: FitPlan, data, objective: LinearObjective):
    """The engine for ``objective`` (built without one), whole; a resident one is
    started by ``with engine:`` around the training (see :func:`train`)."""
    loss, depth, resident = objective.loss, plan.aggregation_depth, plan.workers
    if plan.kernels == "jvm":
        return JvmGradientEngine(data, loss, depth, plan.local_features)
    if plan.resident:
        # Local SGD's workers answer with local steps; lossy answers are decoded with
        # the objective's own scaling (GradientResponse).
        layout = dataclasses.replace(objective, engine=None)
        respond = (LocalSGDResponse.of(objective, plan.config, plan.faults)
                   if plan.trainer == "localSGD" else None)
        return ResidentGradientEngine(
            data.block_source(), loss, data.num_features, objective.num_outputs,
            resident.mini_batch_fraction, resident.seed, resident.host,
            resident.worker_timeout, resident.topology, depth,
            compression=plan.compression, quorum=resident.quorum,
            sparse_pull=resident.sparse_pull, batch_sizing=resident.batch_sizing,
            respond=respond, objective=layout if plan.compression.lossy else None,
            faults=plan.faults)
    # (async mode's workers compress their own pushes; this engine is unused there)
    compression = plan.compression if plan.strategy == "jobPerStep" else Compression()
    return python_job_engine(data, loss, depth, compression, plan.faults)


def job_engine(plan: FitPlan, data, loss: Loss):
    """A job-per-step engine over ``data``'s blocks, for the plan's data path."""
    depth = plan.aggregation_depth
    if plan.data.jvm:
        return JvmGradientEngine(data, loss, depth, plan.local_features)
    return python_job_engine(data, loss, depth, Compression(), plan.faults)


def evaluation_engine(plan: FitPlan, data, engine, loss: Loss):
    """An engine that sums every row once per call, outside any resident stage: the
    fit's own when it runs a job per step, else a job-per-step one over the same blocks."""
    if plan.strategy == "jobPerStep":
        return engine
    return job_engine(plan, data, loss)


def python_job_engine(data, loss: Loss, depth: int, compression: Compression = Compression(),
                      faults=None):
    """The numpy job-per-step engine for the data's kind: RDD jobs, or ``mapInArrow`` jobs
    over a block frame (Spark Connect)."""
    if isinstance(data, FrameTrainingData):
        return FrameGradientEngine(data.block_source(), loss, depth, compression, faults)
    return PythonGradientEngine(data.python_blocks(), loss, depth, compression, faults)


def train(plan: FitPlan, objective: LinearObjective, theta0: np.ndarray, data, engine,
          checkpoints, start=None, held_out: Optional[LinearObjective] = None,
          validation_tol: float = 0.0) -> TrainingResult:
    """Run the plan's trainer from ``theta0`` (or ``start``, a state to continue), with
    the driver's BLAS on one thread (:mod:`gradspark.fit.driver_blas` says why)."""
    with single_threaded_blas():
        return _train(plan, objective, theta0, data, engine, checkpoints, start, held_out,
                      validation_tol)


def _train(plan: FitPlan, objective: LinearObjective, theta0: np.ndarray, data, engine,
           checkpoints, start, held_out: Optional[LinearObjective],
           validation_tol: float) -> TrainingResult:
    config = plan.config
    if plan.trainer == "sharded":
        return train_sharded(objective, theta0, config, data.block_source(),
                             plan.workers.parameter_servers, checkpoints)
    if plan.trainer == "async":
        return train_async(objective, theta0, config, data.block_source(), checkpoints)
    if plan.trainer == "localSGD":
        with engine:
            return train_local_sgd(objective, theta0, config, engine, checkpoints)
    early_stopping = None
    if held_out is not None:
        early_stopping = EarlyStopping(lambda theta: held_out.data_term(theta)[0],
                                       validation_tol)
    with engine if plan.resident else contextlib.nullcontext():
        return train_sync(objective, theta0, config, checkpoints, start, early_stopping)
