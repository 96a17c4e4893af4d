"""``TorchEstimator``: PyTorch DistributedDataParallel in one Spark barrier stage.

``fit`` repartitions the data to ``numWorkers`` partitions and runs one
barrier task per partition (``mapInArrow(..., barrier=True)``, so rows reach
Python as Arrow batches). The tasks form a ``torch.distributed`` process
group (:mod:`gradspark.neural.process_group`) and train with the batch schedule
of :mod:`gradspark.neural.ddp`; rank 0's weights come back to the driver
as a :class:`TorchModel`, a real ``pyspark.ml.Model``.

The barrier stage feeds a one-partition exchange, which makes it a shuffle
map stage: Spark retries a failed *map* barrier stage as a whole (it gives up
on a failed barrier result stage), and with ``checkpointDir`` the retry
resumes from the newest epoch checkpoint.
"""

from __future__ import annotations

import io
import json
import logging
import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np
import pandas as pd
from pyspark import cloudpickle
from pyspark.ml import Estimator, Model
from pyspark.ml.functions import array_to_vector
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasFeaturesCol, HasLabelCol, HasPredictionCol, HasSeed
from pyspark.ml.param.shared import HasRawPredictionCol
from pyspark.ml.util import (
    DefaultParamsReader,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gradspark.checkpoints.epochs import EpochCheckpoints, normalize_directory
from gradspark.connect import context_of, ship
from gradspark.data.columnar import features_as_array, features_matrix, training_columns
from gradspark.data.validation import InvalidDataError
from gradspark.testing.faults import fault_plan
from gradspark.integrations.tensorboard import tensorboard_run, write_torch_curves
from gradspark.params import HasCheckpoints, HasTensorboard, HasValidation, _one_of
from gradspark.persistence import DataFrameWriter
from gradspark.rpc.endpoint import driver_endpoint
from gradspark.rpc.security import spark_encrypts
from gradspark.rpc import ParameterServer
from gradspark.report import LossCurve
from gradspark.stages.slots import require_task_slots
from gradspark.neural.parallelism import STRATEGIES
from gradspark.neural.progress import ProgressReports
from gradspark.neural.ddp import (
    RESULT_SCHEMA,
    TorchTrainingError,
    TorchTrainSpec,
    partition_trainer,
)

logger = logging.getLogger(__name__)

LABEL_DTYPES = ("float32", "int64")
CHECKPOINT_UNITS = ("epoch", "step")
CHECKPOINT_FORMATS = ("auto", "full", "sharded")


class TorchParams(HasFeaturesCol, HasLabelCol, HasPredictionCol, HasRawPredictionCol,
                  HasSeed, HasCheckpoints, HasValidation, HasTensorboard):
    numWorkers: Param[int] = Param(
        Params._dummy(), "numWorkers",
        "number of barrier tasks (DDP ranks); the data is repartitioned to this many",
        typeConverter=TypeConverters.toInt)
    useGpu: Param[bool] = Param(
        Params._dummy(), "useGpu",
        "train with NCCL on the GPU Spark assigns each task (spark.task.resource.gpu.amount);"
        " gloo on the CPU otherwise",
        typeConverter=TypeConverters.toBoolean)
    batchSize: Param[int] = Param(
        Params._dummy(), "batchSize",
        "global mini-batch size per optimizer step, split over the ranks",
        typeConverter=TypeConverters.toInt)
    epochs: Param[int] = Param(Params._dummy(), "epochs", "passes over the training data",
                               typeConverter=TypeConverters.toInt)
    learningRate: Param[float] = Param(
        Params._dummy(), "learningRate",
        "learning rate of the default optimizer (Adam); ignored with an optimizer_fn",
        typeConverter=TypeConverters.toFloat)
    labelDtype: Param[str] = Param(
        Params._dummy(), "labelDtype",
        "tensor type of the label: float32 (regression, BCE) or int64 (class indices, "
        "e.g. for CrossEntropyLoss)",
        typeConverter=_one_of("labelDtype", LABEL_DTYPES))
    inferenceBatchSize: Param[int] = Param(
        Params._dummy(), "inferenceBatchSize", "rows per forward pass in transform",
        typeConverter=TypeConverters.toInt)
    checkpointUnit: Param[str] = Param(
        Params._dummy(), "checkpointUnit",
        "what checkpointInterval counts: 'epoch' or 'step' (optimizer steps; a mid-epoch "
        "checkpoint records each rank's position in its shuffled rows and its RNG state, so "
        "a killed run resumes at the next unseen batch)",
        typeConverter=_one_of("checkpointUnit", CHECKPOINT_UNITS))
    strategy: Param[str] = Param(
        Params._dummy(), "strategy",
        "how the ranks hold the model: 'ddp' (replicated, gradients all-reduced) or 'fsdp' "
        "(torch's fully-sharded data parallel: each rank holds 1/numWorkers of the "
        "parameters, gradients and optimizer state)",
        typeConverter=_one_of("strategy", STRATEGIES))
    checkpointFormat: Param[str] = Param(
        Params._dummy(), "checkpointFormat",
        "how checkpoints are written: 'full' (rank 0 writes the whole state in one file), "
        "'sharded' (torch.distributed.checkpoint: every rank writes its own shard, nothing "
        "is gathered; the directory must be reachable from every executor) or 'auto' "
        "(sharded with strategy='fsdp', full with 'ddp'); both load into any numWorkers",
        typeConverter=_one_of("checkpointFormat", CHECKPOINT_FORMATS))
    progressInterval: Param[int] = Param(
        Params._dummy(), "progressInterval",
        "rank 0 reports its loss, rows/s and the time left to the driver every this many "
        "steps (and at every epoch end) while the stage runs; 0: at epoch ends only, -1: "
        "never",
        typeConverter=TypeConverters.toInt)

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(numWorkers=1, useGpu=False, batchSize=64, epochs=10,
                         learningRate=1e-3, labelDtype="float32", inferenceBatchSize=1024,
                         seed=0, checkpointDir="", checkpointInterval=1, keepCheckpoints=2,
                         resume=True, checkpointUnit="epoch", progressInterval=50,
                         strategy="ddp", checkpointFormat="auto", tensorboardDir="")

    def getNumWorkers(self) -> int:
        return self.getOrDefault(self.numWorkers)

    def getUseGpu(self) -> bool:
        return self.getOrDefault(self.useGpu)

    def getBatchSize(self) -> int:
        return self.getOrDefault(self.batchSize)

    def getEpochs(self) -> int:
        return self.getOrDefault(self.epochs)

    def getLearningRate(self) -> float:
        return self.getOrDefault(self.learningRate)

    def getLabelDtype(self) -> str:
        return self.getOrDefault(self.labelDtype)

    def getInferenceBatchSize(self) -> int:
        return self.getOrDefault(self.inferenceBatchSize)

    def getCheckpointUnit(self) -> str:
        return self.getOrDefault(self.checkpointUnit)

    def getStrategy(self) -> str:
        return self.getOrDefault(self.strategy)

    def getCheckpointFormat(self) -> str:
        return self.getOrDefault(self.checkpointFormat)

    def _resolved_checkpoint_format(self) -> str:
        """'full' or 'sharded': what ``checkpointFormat`` means for this ``strategy``."""
        chosen = self.getCheckpointFormat()
        if chosen == "auto":
            return "sharded" if self.getStrategy() == "fsdp" else "full"
        return chosen

    def getProgressInterval(self) -> int:
        return self.getOrDefault(self.progressInterval)


@dataclass
class TorchTrainingSummary(LossCurve):
    """Per-epoch mean training loss over all rows, and how the run went;
    ``saveLossPlot(path)`` draws it (matplotlib)."""

    lossHistory: List[float]
    epochs: int
    stepsPerEpoch: int
    numWorkers: int
    numInstances: int
    resumedFromEpoch: int
    epochSeconds: List[float] = field(default_factory=list)
    wallTime: float = 0.0
    rankPids: List[int] = field(default_factory=list)  # one Python worker per rank
    # validationIndicatorCol: held-out loss before training and after each epoch
    validationHistory: List[float] = field(default_factory=list)
    bestEpoch: Optional[int] = None  # the epoch whose parameters the model holds
    resumedFromStep: int = 0  # steps into epoch resumedFromEpoch + 1 (mid-epoch checkpoint)
    rowsPerEpoch: List[int] = field(default_factory=list)  # rows trained on, all ranks
    progressReports: int = 0  # live reports that reached the driver during the stage
    strategy: str = "ddp"
    # What rank 0 held at the end (FSDP: its shards), in bytes
    parameterBytesPerRank: int = 0
    optimizerStateBytesPerRank: int = 0
    checkpointFormat: Optional[str] = None  # "full" or "sharded"; None without checkpointDir
    checkpointSeconds: List[float] = field(default_factory=list)  # each write, on rank 0

    @property
    def objectiveHistory(self) -> List[float]:
        return self.lossHistory


class DefaultAdam:
    """The default optimizer_fn: ``torch.optim.Adam(parameters, lr)``."""

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def __call__(self, parameters):
        import torch

        return torch.optim.Adam(parameters, lr=self.lr)


def _set_params(instance: Params, kwargs: Dict[str, Any]) -> None:
    instance._set(**{k: v for k, v in kwargs.items() if v is not None})


def _worker_traceback(error: Exception) -> str:
    """The Python traceback of the failed task, out of Spark's error text."""
    text = str(error)
    match = re.search(r"Traceback \(most recent call last\):.*?(?=\n\s*(?:SQLSTATE|\tat |$))",
                      text, re.S)
    return match.group(0) if match else text[:4000]


class TorchEstimator(Estimator, TorchParams, MLReadable, MLWritable):
    """Train a PyTorch module on a DataFrame with DDP across Spark barrier tasks.

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
        Any Param: ``numWorkers``, ``useGpu``, ``strategy`` (``"ddp"`` or ``"fsdp"``),
        ``batchSize`` (global), ``epochs``,
        ``labelDtype``, ``featuresCol``, ``labelCol``, ``predictionCol``,
        ``rawPredictionCol``, ``seed``, ``checkpointDir`` (local or mounted
        path, ``hdfs://``, ``s3://``, ``gs://``; reachable from the executors),
        ``checkpointInterval`` (epochs, or optimizer steps with
        ``checkpointUnit="step"``: mid-epoch checkpoints that resume at the next
        unseen batch), ``checkpointFormat`` (``"full"``, ``"sharded"``:
        ``torch.distributed.checkpoint`` shards written by every rank, or ``"auto"``:
        sharded under FSDP), ``keepCheckpoints``, ``resume``,
        ``validationIndicatorCol`` (boolean column of held-out rows: early stopping by
        MLlib's GBT rule with ``validationTol``, the best epoch's parameters kept).

    Features are a vector or numeric-array column, read as float32. With
    ``numWorkers`` ranks and the same ``seed`` and ``batchSize``, training
    takes the same optimizer steps as one process would on the same global
    batches (see :mod:`gradspark.neural.ddp`).
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
        stage = (columns.repartition(self.getNumWorkers())
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
        return _CallablesWriter(self, {"model_fn": self.model_fn, "loss_fn": self.loss_fn,
                                       "optimizer_fn": self.optimizer_fn})

    @classmethod
    def read(cls) -> MLReader:
        return _CallablesReader(cls)


class TorchModel(Model, TorchParams, MLReadable, MLWritable):
    """A trained module; ``transform`` appends its predictions.

    One output per row: ``predictionCol`` is that value. Several outputs
    (class scores): ``predictionCol`` is the argmax and ``rawPredictionCol``
    (if not empty) the output vector, as MLlib classifiers do.
    """

    def __init__(self, model_fn: Optional[Callable[[], Any]] = None,
                 state: bytes = b"", num_features: int = 0) -> None:
        super().__init__()
        self.model_fn, self.state, self.num_features = model_fn, state, num_features
        self._summary: Optional[TorchTrainingSummary] = None

    @property
    def hasSummary(self) -> bool:
        return self._summary is not None

    @property
    def summary(self) -> TorchTrainingSummary:
        if self._summary is None:
            raise RuntimeError("no training summary: this model was loaded, not fitted here")
        return self._summary

    def copy(self, extra=None) -> "TorchModel":
        that = super().copy(extra)
        that._summary = self._summary
        return that

    def module(self):
        """The trained ``torch.nn.Module``, rebuilt on the driver (eval mode)."""
        return _load_module(self.model_fn, self.state)

    def _transform(self, dataset: DataFrame) -> DataFrame:
        features = features_as_array(dataset, self.getFeaturesCol())
        probe = self.module()
        import torch

        with torch.no_grad():
            width = int(np.prod(probe(torch.zeros(1, self.num_features)).shape[1:]))
        shipped = ship(dataset, (cloudpickle.dumps(self.model_fn), self.state))
        predict = _predict_udf(shipped, self.getFeaturesCol(), self.getInferenceBatchSize(),
                               width > 1)
        packed = "__gradspark_torch"
        out = dataset.withColumn(packed, predict(features))
        if width > 1 and self.getRawPredictionCol():
            out = out.withColumn(self.getRawPredictionCol(),
                                 array_to_vector(F.col(f"{packed}.raw")))
        if self.getPredictionCol():
            out = out.withColumn(self.getPredictionCol(), F.col(f"{packed}.prediction"))
        return out.drop(packed)

    def write(self) -> MLWriter:
        return _CallablesWriter(self, {"model_fn": self.model_fn}, state=self.state,
                                extra={"numFeatures": self.num_features})

    @classmethod
    def read(cls) -> MLReader:
        return _CallablesReader(cls)


def _load_module(model_fn, state: bytes):
    import torch

    module = model_fn()
    module.load_state_dict(torch.load(io.BytesIO(state), map_location="cpu", weights_only=True))
    return module.eval()


def _predict_udf(shipped, features_col: str, batch_rows: int, several_outputs: bool):
    from pyspark.sql.functions import pandas_udf

    # Iterator of batches: the module is rebuilt once per task, not per batch.
    @pandas_udf("raw array<double>, prediction double")
    def predict(series: Iterator[pd.Series]) -> Iterator[pd.DataFrame]:
        import pyarrow as pa
        import torch
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None:  # one task per core: don't oversubscribe them
            torch.set_num_threads(max(1, context.cpus()))
        fn_bytes, state = shipped.value
        module = _load_module(cloudpickle.loads(fn_bytes), state)
        for batch in series:
            valid = batch.notna().to_numpy()
            raw = np.full(len(batch), None, dtype=object)
            prediction = np.full(len(batch), np.nan)
            if valid.any():
                X = features_matrix(pa.array(batch[valid].tolist(), pa.list_(pa.float32())),
                                    features_col)
                outputs = []
                with torch.no_grad():
                    for start in range(0, len(X), batch_rows):
                        chunk = torch.from_numpy(X[start:start + batch_rows])
                        outputs.append(module(chunk).reshape(len(chunk), -1).double().numpy())
                scores = np.concatenate(outputs)
                for position, row in zip(np.flatnonzero(valid), scores):
                    raw[position] = row
                prediction[valid] = (scores.argmax(axis=1) if several_outputs
                                     else scores[:, 0])
            yield pd.DataFrame({"raw": raw, "prediction": prediction})

    return predict


# -- persistence: Params as metadata JSON, callables and weights as one Parquet row --

class _CallablesWriter(DataFrameWriter):
    def __init__(self, instance: Params, callables: Dict[str, Any], state: bytes = b"",
                 extra: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.instance, self.callables, self.state = instance, callables, state
        self.extra = extra or {}

    def saveImpl(self, path: str) -> None:
        self.save_metadata(self.instance, path, extra=self.extra)
        row = {name: cloudpickle.dumps(fn) for name, fn in self.callables.items()}
        row["state"] = self.state
        schema = ", ".join(f"{name} binary" for name in row)
        self.save_data(self.sparkSession.createDataFrame([tuple(row.values())], schema), path)


class _CallablesReader(MLReader):
    def __init__(self, cls) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        spark = self.sparkSession or SparkSession.getActiveSession()
        metadata = DefaultParamsReader.loadMetadata(path, spark)
        data = spark.read.parquet(f"{path}/data").first().asDict()
        fns = {k: cloudpickle.loads(v) for k, v in data.items() if k != "state"}
        if self.cls is TorchModel:
            instance = TorchModel(fns["model_fn"], bytes(data["state"]),
                                  metadata["numFeatures"])
        else:
            instance = self.cls(**fns)
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        return instance
