"""``TorchEstimator``'s and ``TorchModel``'s Params: MLlib's column mixins plus the training
loop's settings (workers, GPUs, batches, epochs, strategy, checkpoints)."""

from __future__ import annotations

import json
import logging
from typing import Dict, List

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasFeaturesCol, HasLabelCol, HasPredictionCol, HasSeed
from pyspark.ml.param.shared import HasRawPredictionCol

from gradspark.params import HasCheckpoints, HasTensorboard, HasValidation, _one_of
from gradspark.neural.strategies import STRATEGIES
from gradspark.neural.pipeline_parallel import SCHEDULES
from gradspark.neural.tensor_parallel import PLAN_STYLES

logger = logging.getLogger(__name__)


LABEL_DTYPES = ("float32", "int64")


CHECKPOINT_UNITS = ("epoch", "step")


CHECKPOINT_FORMATS = ("auto", "full", "sharded")


def _tensor_plan(value) -> Dict[str, str]:
    """``tensorParallelPlan``: a dict (or its JSON text) of module name -> colwise/rowwise."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if not isinstance(value, dict):
        raise TypeError(f"tensorParallelPlan must be a dict of module name -> one of "
                        f"{list(PLAN_STYLES)}, got {type(value).__name__}")
    plan = {str(k): str(v) for k, v in value.items()}
    wrong = {k: v for k, v in plan.items() if v not in PLAN_STYLES}
    if wrong:
        raise ValueError(f"tensorParallelPlan: {wrong} is not one of {list(PLAN_STYLES)}")
    return plan


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
        "how the ranks hold the model: 'ddp' (replicated, gradients all-reduced), 'fsdp' "
        "(torch's fully-sharded data parallel: each rank holds 1/numWorkers of the "
        "parameters, gradients and optimizer state; HSDP with a 2-D meshShape), 'tensor' "
        "(each split nn.Linear's matrices divided over the ranks, tensorParallelPlan) or "
        "'pipeline' (the layers cut into stages, one per rank, micro-batches flowing "
        "through them: pipelineSplit, pipelineSchedule, microBatches)",
        typeConverter=_one_of("strategy", STRATEGIES))
    checkpointFormat: Param[str] = Param(
        Params._dummy(), "checkpointFormat",
        "how checkpoints are written: 'full' (rank 0 writes the whole state in one file), "
        "'sharded' (torch.distributed.checkpoint: every rank writes its own shard, nothing "
        "is gathered; the directory must be reachable from every executor) or 'auto' "
        "(full with strategy='ddp', sharded otherwise); both load into any numWorkers and "
        "meshShape",
        typeConverter=_one_of("checkpointFormat", CHECKPOINT_FORMATS))
    progressInterval: Param[int] = Param(
        Params._dummy(), "progressInterval",
        "rank 0 reports its loss, rows/s and the time left to the driver every this many "
        "steps (and at every epoch end) while the stage runs; 0: at epoch ends only, -1: "
        "never",
        typeConverter=TypeConverters.toInt)

    meshShape: Param[List[int]] = Param(
        Params._dummy(), "meshShape",
        "[replicas, parallel]: the ranks as a grid whose rows are data-parallel replicas "
        "and whose columns split one copy of the model (fsdp: shard, tensor: split layers, "
        "pipeline: stages); rows stay inside a host where possible. Empty: [1, "
        "numWorkers] (ddp: [numWorkers, 1])",
        typeConverter=TypeConverters.toListInt)
    tensorParallelPlan: Param[Dict[str, str]] = Param(
        Params._dummy(), "tensorParallelPlan",
        "strategy='tensor': module name -> 'colwise' or 'rowwise' (nn.Linear, "
        "nn.Embedding), as torch's parallelize_module; empty: every Linear -> Linear "
        "block (an MLP) colwise then rowwise",
        typeConverter=_tensor_plan)
    pipelineSplit: Param[List[str]] = Param(
        Params._dummy(), "pipelineSplit",
        "strategy='pipeline': the submodules that begin stages 2, 3, ... (one fewer than "
        "the stages); empty: cut where the parameter count is balanced",
        typeConverter=TypeConverters.toListString)
    pipelineSchedule: Param[str] = Param(
        Params._dummy(), "pipelineSchedule",
        "strategy='pipeline': 'gpipe' (all forwards, then all backwards) or '1f1b' (one "
        "forward, one backward: fewer activations held)",
        typeConverter=_one_of("pipelineSchedule", SCHEDULES))
    microBatches: Param[int] = Param(
        Params._dummy(), "microBatches",
        "strategy='pipeline': micro-batches per optimizer step", typeConverter=TypeConverters.toInt)

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(numWorkers=1, useGpu=False, batchSize=64, epochs=10,
                         learningRate=1e-3, labelDtype="float32", inferenceBatchSize=1024,
                         seed=0, checkpointDir="", checkpointInterval=1, keepCheckpoints=2,
                         resume=True, checkpointUnit="epoch", progressInterval=50,
                         strategy="ddp", checkpointFormat="auto", tensorboardDir="",
                         meshShape=[], tensorParallelPlan={}, pipelineSplit=[],
                         pipelineSchedule="1f1b", microBatches=4)

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

    def getMeshShape(self) -> List[int]:
        return self.getOrDefault(self.meshShape)

    def getTensorParallelPlan(self) -> Dict[str, str]:
        return self.getOrDefault(self.tensorParallelPlan)

    def getPipelineSplit(self) -> List[str]:
        return self.getOrDefault(self.pipelineSplit)

    def getPipelineSchedule(self) -> str:
        return self.getOrDefault(self.pipelineSchedule)

    def getMicroBatches(self) -> int:
        return self.getOrDefault(self.microBatches)

    def getCheckpointFormat(self) -> str:
        return self.getOrDefault(self.checkpointFormat)

    def _resolved_checkpoint_format(self) -> str:
        """'full' or 'sharded': what ``checkpointFormat`` means for this ``strategy``."""
        chosen = self.getCheckpointFormat()
        if chosen == "auto":
            return "full" if self.getStrategy() == "ddp" else "sharded"
        return chosen

    def getProgressInterval(self) -> int:
        return self.getOrDefault(self.progressInterval)
