"""``TorchEstimator``'s and ``TorchModel``'s Params: MLlib's column mixins plus the training
loop's settings (workers, GPUs, batches, epochs, strategy, checkpoints)."""

from __future__ import annotations

import logging

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasFeaturesCol, HasLabelCol, HasPredictionCol, HasSeed
from pyspark.ml.param.shared import HasRawPredictionCol

from gradspark.params import HasCheckpoints, HasTensorboard, HasValidation, _one_of
from gradspark.neural.parallelism import STRATEGIES

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
