"""``TorchEstimator``: PyTorch DistributedDataParallel in one Spark barrier stage.

``fit`` repartitions the data to ``numWorkers`` partitions (each rank's rows in
one order on every run and attempt: ``spread_over_ranks``) and runs one
barrier task per partition (``mapInArrow(..., barrier=True)``, so rows reach
Python as Arrow batches). The tasks form a ``torch.distributed`` process
group (:mod:`gradspark.neural.process_group`) and train with the batch schedule
of :mod:`gradspark.neural.rank_loop`; rank 0's weights come back to the driver
as a :class:`TorchModel`, a real ``pyspark.ml.Model``.

The barrier stage feeds a one-partition exchange, which makes it a shuffle
map stage: Spark retries a failed *map* barrier stage as a whole (it gives up
on a failed barrier result stage), and with ``checkpointDir`` the retry
resumes from the newest epoch checkpoint.
"""

from __future__ import annotations

import json
import logging
import dataclasses
import re
import time
from typing import Any, Callable, Dict, List, Optional

from pyspark.ml import Estimator
from pyspark.ml.param import Params
from pyspark.ml.util import (
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)
from pyspark.sql import DataFrame

from gradspark.checkpoints.epochs import EpochCheckpoints, normalize_directory
from gradspark.connect import context_of
from gradspark.data.columnar import spread_over_ranks, training_columns
from gradspark.data.validation import InvalidDataError
from gradspark.testing.faults import fault_plan
from gradspark.integrations.tensorboard import tensorboard_run, write_torch_curves
from gradspark.rpc.endpoint import driver_endpoint
from gradspark.rpc.security import spark_encrypts
from gradspark.rpc import ParameterServer
from gradspark.stages.slots import require_task_slots
from gradspark.neural.mesh import mesh_shape
from gradspark.neural.progress import ProgressReports
from gradspark.neural.rank_loop import partition_trainer
from gradspark.neural.spec import RESULT_SCHEMA, TorchTrainingError, TorchTrainSpec
from gradspark.estimators.torch_model import (CallablesReader, CallablesWriter, TorchModel,
                                              TorchTrainingSummary)
from gradspark.estimators.torch_params import TorchParams

logger = logging.getLogger(__name__)







class DefaultAdam:
    """The default optimizer_fn: ``torch.optim.Adam(parameters, lr)``."""

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def __call__(self, parameters):
        import torch

        return torch.optim.Adam(parameters, lr=self.lr)


def _set_params(instance: Params, kwargs: Dict[str, Any]) -> None:
    instance._set(**{k: v for k, v in kwargs.items() if v is not None})


def _bytes_by_rank(rows) -> Dict[str, List[int]]:
    """Every rank's parameter and optimizer-state bytes and peak memory, in rank order."""
    infos = [json.loads(r.info) for r in sorted(rows, key=lambda r: r.rank)]
    return {"parameterBytesByRank": [i["parameterBytes"] for i in infos],
            "optimizerStateBytesByRank": [i["optimizerStateBytes"] for i in infos],
            "peakMemoryBytesByRank": [i["peakMemory"] for i in infos]}


def _worker_traceback(error: Exception) -> str:
    """The Python traceback of the failed task, out of Spark's error text."""
    text = str(error)
    match = re.search(r"Traceback \(most recent call last\):.*?(?=\n\s*(?:SQLSTATE|\tat |$))",
                      text, re.S)
    return match.group(0) if match else text[:4000]


class TorchEstimator(Estimator, TorchParams, MLReadable, MLWritable):
    """Train a PyTorch module on a DataFrame across Spark barrier tasks: data parallel
    (DDP, FSDP, HSDP), tensor parallel, pipeline parallel, or a 2-D mix.

    Parameters
    ----------
    model_fn : callable () -> torch.nn.Module
        Builds the (untrained) module. Called on every rank after seeding
        torch with ``seed``, and again to rebuild a loaded model, so it must
        be picklable by cloudpickle and importable on the executors.
    loss_fn : callable (output, target) -> scalar tensor
        The *mean* loss over a batch, e.g. ``torch.nn.CrossEntropyLoss()``.
    optimizer_fn : callable (parameters) -> torch.optim.Optimizer, optional
        Default: Adam with ``learningRate``.
    **params
        Any Param: ``numWorkers``, ``useGpu``, ``strategy`` (``"ddp"``, ``"fsdp"``,
        ``"tensor"`` or ``"pipeline"``), ``meshShape`` (``[replicas, parallel]``),
        ``tensorParallelPlan``, ``pipelineSplit``, ``pipelineSchedule``, ``microBatches``,
        ``batchSize`` (global), ``epochs``,
        ``labelDtype``, ``featuresCol``, ``labelCol``, ``predictionCol``,
        ``rawPredictionCol``, ``seed``, ``checkpointDir`` (local or mounted
        path, ``hdfs://``, ``s3://``, ``gs://``; reachable from the executors),
        ``checkpointInterval`` (epochs, or optimizer steps with
        ``checkpointUnit="step"``: mid-epoch checkpoints that resume at the next
        unseen batch), ``checkpointFormat`` (``"full"``, ``"sharded"``:
        ``torch.distributed.checkpoint`` shards written by every rank, or ``"auto"``:
        sharded unless ``strategy="ddp"``), ``keepCheckpoints``, ``resume``,
        ``validationIndicatorCol`` (boolean column of held-out rows: early stopping by
        MLlib's GBT rule with ``validationTol``, the best epoch's parameters kept).

    Features are a vector or numeric-array column, read as float32. With
    ``numWorkers`` ranks and the same ``seed`` and ``batchSize``, training
    takes the same optimizer steps as one process would on the same global
    batches (see :mod:`gradspark.neural.rank_loop`).
    """

    def __init__(self, model_fn: Optional[Callable[[], Any]] = None,
                 loss_fn: Optional[Callable[[Any, Any], Any]] = None,
                 optimizer_fn: Optional[Callable[[Any], Any]] = None, **params: Any) -> None:
        super().__init__()
        self.model_fn, self.loss_fn, self.optimizer_fn = model_fn, loss_fn, optimizer_fn
        _set_params(self, params)

    def setParams(self, **params: Any) -> "TorchEstimator":
        _set_params(self, params)
        return self

    def _validate(self) -> None:
        if self.model_fn is None or self.loss_fn is None:
            raise ValueError("TorchEstimator needs model_fn and loss_fn")
        for name, low in (("numWorkers", 1), ("batchSize", 1), ("epochs", 0),
                          ("checkpointInterval", 1), ("keepCheckpoints", 1),
                          ("inferenceBatchSize", 1)):
            value = self.getOrDefault(name)
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        mesh_shape(self.getStrategy(), self.getMeshShape(), self.getNumWorkers())
        if self.getMicroBatches() < 1:
            raise ValueError(f"microBatches must be >= 1, got {self.getMicroBatches()}")
        for name, strategy in (("pipelineSplit", "pipeline"), ("pipelineSchedule", "pipeline"),
                               ("microBatches", "pipeline"), ("tensorParallelPlan", "tensor")):
            if self.isSet(name) and self.getStrategy() != strategy:
                raise ValueError(f"{name} is set but strategy={self.getStrategy()!r}: it "
                                 f"applies to strategy={strategy!r} only")

    def _fingerprint(self) -> Dict[str, Any]:
        # numWorkers is left out on purpose: a run may resume on a cluster of
        # another size (same maths, other float summation order).
        fingerprint = {"estimator": "TorchEstimator", "batchSize": self.getBatchSize(),
                       "seed": self.getSeed(), "labelDtype": self.getLabelDtype()}
        if self.getStrategy() != "ddp":  # the optimizer state's format differs
            fingerprint["strategy"] = self.getStrategy()
        if self.getValidationIndicatorCol():  # (absent otherwise: older checkpoints resume)
            fingerprint["validation"] = [self.getValidationIndicatorCol(),
                                         self.getValidationTol()]
        return fingerprint

    def _prepare_checkpoints(self) -> Optional[str]:
        """The checkpoint directory, checked (or cleared) before the stage starts."""
        if not self.getCheckpointDir():
            return None
        directory = normalize_directory(self.getCheckpointDir())
        store = EpochCheckpoints(directory, self.getKeepCheckpoints())
        if not self.getResume():
            store.clear()
            return directory
        state = store.load_latest()
        if state is not None:
            mine = self._fingerprint()
            # (rows and features are the ranks' to check: the driver does not count them)
            keys = set(mine) | set(state["fingerprint"]) - {"rows", "features"}
            theirs = {k: state["fingerprint"].get(k) for k in keys}
            if theirs != {k: mine.get(k) for k in keys}:
                changed = sorted(k for k in keys if mine.get(k) != theirs[k])
                raise ValueError(
                    f"cannot resume from {directory}: its checkpoint was written with other "
                    f"{', '.join(changed)} ({theirs}); use another checkpointDir or "
                    f"resume=False")
            ranks = len(state.get("layout", []))
            if state.get("step") and ranks != self.getNumWorkers():
                raise ValueError(
                    f"cannot resume from {directory}: its newest checkpoint is "
                    f"{state['step']} steps into epoch {state['epoch'] + 1} and holds the "
                    f"positions of {ranks} ranks; resume with numWorkers={ranks} (epoch "
                    f"checkpoints resume on any number), or resume=False")
        return directory

    def _spec(self, checkpoint_dir: Optional[str]) -> TorchTrainSpec:
        plan = fault_plan()
        return TorchTrainSpec(
            model_fn=self.model_fn, loss_fn=self.loss_fn,
            optimizer_fn=self.optimizer_fn or DefaultAdam(self.getLearningRate()),
            features_col=self.getFeaturesCol(), label_col=self.getLabelCol(),
            label_dtype=self.getLabelDtype(), batch_size=self.getBatchSize(),
            epochs=self.getEpochs(), seed=self.getSeed(), use_gpu=self.getUseGpu(),
            checkpoint_dir=checkpoint_dir, checkpoint_interval=self.getCheckpointInterval(),
            checkpoint_unit=self.getCheckpointUnit(), strategy=self.getStrategy(),
            checkpoint_format=self._resolved_checkpoint_format(),
            keep_checkpoints=self.getKeepCheckpoints(), fingerprint=self._fingerprint(),
            validation_tol=(self.getValidationTol() if self.getValidationIndicatorCol()
                            else None),
            fail_rank=plan.fail_partition if plan else None,
            fail_epoch=plan.fail_step if plan and plan.fail_partition is not None else None,
            fail_batch=plan.fail_batch if plan else None,
            fail_kill=bool(plan and plan.kill),
            mesh_shape=tuple(self.getMeshShape()),
            tensor_plan=tuple(sorted(self.getTensorParallelPlan().items())),
            pipeline_split=tuple(self.getPipelineSplit()),
            pipeline_schedule=self.getPipelineSchedule(), micro_batches=self.getMicroBatches(),
        )

    def _progress_channel(self, context, spec: TorchTrainSpec):
        """(handler, server) taking rank 0's live reports, and the spec that points at it;
        (None, None) with ``progressInterval=-1``."""
        if self.getProgressInterval() < 0:
            return None, None, spec
        reports = ProgressReports()
        bind, advertise = driver_endpoint(context)
        server = ParameterServer(reports, bind, 1, advertise=advertise,
                                 encrypt=spark_encrypts(context))
        return reports, server, dataclasses.replace(
            spec, progress_address=server.address, progress_secret=server.secret,
            progress_interval=self.getProgressInterval())

    def _fit(self, dataset: DataFrame) -> "TorchModel":
        self._validate()
        context = context_of(dataset)
        # GPUs held by the training stage only, when executors own GPUs but tasks ask
        # for none (stage-level scheduling; None: every task already holds one, or CPU)
        profile = require_task_slots(context, self.getNumWorkers(), self.getUseGpu())
        reports, server, spec = self._progress_channel(
            context, self._spec(self._prepare_checkpoints()))
        columns = training_columns(dataset, self.getFeaturesCol(), self.getLabelCol(),
                                   self.getValidationIndicatorCol())
        started = time.perf_counter()
        stage = (spread_over_ranks(columns, self.getNumWorkers())
                 .mapInArrow(partition_trainer(spec), RESULT_SCHEMA, barrier=True,
                             profile=profile)
                 .repartition(1))
        try:
            rows = stage.collect()
        except Exception as error:
            raise TorchTrainingError(
                f"TorchEstimator training failed on the executors:\n{_worker_traceback(error)}"
            ) from error
        finally:
            if server is not None:
                reports.close()
                server.close()
        wall = time.perf_counter() - started
        if not rows:  # Spark skips the stage's tasks altogether on empty input
            raise InvalidDataError("the training DataFrame is empty")
        first = next(r for r in rows if r.rank == 0)
        info = json.loads(first.info)
        if "error" in info:
            raise InvalidDataError(info["error"])
        if "user_error" in info:
            raise TorchTrainingError(f"TorchEstimator: a user function failed on the "
                                     f"executors:\n{info['user_error']}")
        model = TorchModel(self.model_fn, bytes(first.state), info["width"])
        model._summary = TorchTrainingSummary(
            lossHistory=list(first.history), epochs=self.getEpochs(),
            stepsPerEpoch=info["steps"], numWorkers=len(rows), numInstances=info["rows"],
            resumedFromEpoch=info["start"], epochSeconds=info["timings"], wallTime=wall,
            rankPids=[json.loads(r.info)["pid"] for r in sorted(rows, key=lambda r: r.rank)],
            validationHistory=info["validation"],
            bestEpoch=info["best_epoch"] if info["validation"] else None,
            resumedFromStep=info["start_step"], rowsPerEpoch=info["rows_per_epoch"],
            progressReports=len(reports.reports) if reports is not None else 0,
            strategy=info["strategy"], parameterBytesPerRank=info["parameterBytes"],
            optimizerStateBytesPerRank=info["optimizerStateBytes"],
            meshShape=info["mesh"], **_bytes_by_rank(rows),
            checkpointFormat=self._resolved_checkpoint_format() if self.getCheckpointDir()
            else None, checkpointSeconds=info["checkpoint_seconds"])
        logger.info("TorchEstimator: %d ranks, %d epochs (from %d), final loss %s, %.1f s",
                    len(rows), self.getEpochs(), info["start"],
                    first.history[-1] if first.history else None, wall)
        if self.getTensorboardDir():
            with tensorboard_run(self.getTensorboardDir(), f"{self.uid}-{int(time.time())}",
                                 dataset.sparkSession) as board:
                write_torch_curves(board, reports.reports if reports is not None else [],
                                   model._summary)
        self._copyValues(model)
        return model

    def copy(self, extra=None) -> "TorchEstimator":
        return super().copy(extra)  # the *_fn attributes travel with copy.copy

    def write(self) -> MLWriter:
        return CallablesWriter(self, {"model_fn": self.model_fn, "loss_fn": self.loss_fn,
                                       "optimizer_fn": self.optimizer_fn})

    @classmethod
    def read(cls) -> MLReader:
        return CallablesReader(cls)








# -- persistence: Params as metadata JSON, callables and weights as one Parquet row --



