"""Params shared by gradspark estimators and models.

Where ``pyspark.ml`` already defines a Param (``maxIter``, ``regParam``, ...)
the estimators take MLlib's own mixin, so names, docs, type converters and
defaults match MLlib exactly; the mixins below add only what MLlib lacks.
"""

from __future__ import annotations

import zlib

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasSeed, HasStepSize

from gradspark.comm.compression import COMPRESSIONS

OPTIMIZERS = ("lbfgs", "sgd", "adagrad", "adam", "ftrl")
FIRST_ORDER = "'sgd', 'adagrad', 'adam' or 'ftrl'"  # for messages
PARAMETER_SPACES = ("auto", "standardized", "raw")
SCHEDULES = ("constant", "inverse_time", "inverse_sqrt", "cosine")
MODES = ("sync", "async")
STALE_GRADIENT_POLICIES = ("none", "scale", "compensate")
ENGINES = ("auto", "python", "jvm")
STRATEGIES = ("auto", "jobPerStep", "resident")
TOPOLOGIES = ("star", "tree")
BATCH_SIZINGS = ("fixed", "throughput")


def _one_of(name: str, allowed: tuple[str, ...]):
    def convert(value):
        value = TypeConverters.toString(value)
        if value not in allowed:
            raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        return value

    return convert


class HasMiniBatchFraction(Params):
    miniBatchFraction: Param[float] = Param(
        Params._dummy(),
        "miniBatchFraction",
        "fraction of rows sampled (Bernoulli, reproducible from seed and step) "
        "for each gradient step, in (0, 1]",
        typeConverter=TypeConverters.toFloat,
    )

    def getMiniBatchFraction(self) -> float:
        return self.getOrDefault(self.miniBatchFraction)


class HasOptimizer(Params):
    optimizer: Param[str] = Param(
        Params._dummy(),
        "optimizer",
        "driver-side optimizer: " + ", ".join(OPTIMIZERS)
        + " (lbfgs is full-batch only)",
        typeConverter=_one_of("optimizer", OPTIMIZERS),
    )
    learningRateSchedule: Param[str] = Param(
        Params._dummy(),
        "learningRateSchedule",
        "step size schedule for first-order optimizers: " + ", ".join(SCHEDULES),
        typeConverter=_one_of("learningRateSchedule", SCHEDULES),
    )
    momentum: Param[float] = Param(
        Params._dummy(),
        "momentum",
        "heavy-ball momentum for optimizer='sgd', in [0, 1)",
        typeConverter=TypeConverters.toFloat,
    )
    nesterov: Param[bool] = Param(
        Params._dummy(),
        "nesterov",
        "use Nesterov momentum with optimizer='sgd'",
        typeConverter=TypeConverters.toBoolean,
    )
    parameterSpace: Param[str] = Param(
        Params._dummy(),
        "parameterSpace",
        "the coordinates the optimizer moves (the objective is the same): 'standardized' "
        "(MLlib's: coefficients of centered, unit-variance features), 'raw' (coefficients "
        "of the input features as they are), or 'auto': raw for first-order optimizers on "
        "sparse data (fewer than half the entries stored), standardized otherwise",
        typeConverter=_one_of("parameterSpace", PARAMETER_SPACES),
    )

    def getOptimizer(self) -> str:
        return self.getOrDefault(self.optimizer)

    def getLearningRateSchedule(self) -> str:
        return self.getOrDefault(self.learningRateSchedule)

    def getMomentum(self) -> float:
        return self.getOrDefault(self.momentum)

    def getNesterov(self) -> bool:
        return self.getOrDefault(self.nesterov)

    def getParameterSpace(self) -> str:
        return self.getOrDefault(self.parameterSpace)


class HasMode(Params):
    mode: Param[str] = Param(
        Params._dummy(),
        "mode",
        "training mode: 'sync' (bulk-synchronous, one treeAggregate per step) or 'async' "
        "(workers push gradients to a parameter server on the driver, bounded staleness)",
        typeConverter=_one_of("mode", MODES),
    )
    maxStaleness: Param[int] = Param(
        Params._dummy(),
        "maxStaleness",
        "async mode: how many steps a worker may run ahead of the slowest one (SSP); "
        "0 is bulk-synchronous, -1 removes the bound (Hogwild-style)",
        typeConverter=TypeConverters.toInt,
    )
    workerTimeout: Param[float] = Param(
        Params._dummy(),
        "workerTimeout",
        "async mode: seconds a worker may go unheard of (not started, lost, hung) before "
        "it stops holding the others back; it rejoins when it comes back",
        typeConverter=TypeConverters.toFloat,
    )
    parameterServerHost: Param[str] = Param(
        Params._dummy(),
        "parameterServerHost",
        "async mode: the driver address the parameter server binds, reachable from the "
        "executors; empty uses spark.driver.host",
        typeConverter=TypeConverters.toString,
    )

    parameterServers: Param[int] = Param(
        Params._dummy(),
        "parameterServers",
        "0: one parameter server in the driver (async mode) or none (sync); N >= 1: the "
        "weights and optimizer state split by key range over N server shards hosted in the "
        "workers' executor tasks, the driver keeping only the clock and the checkpoints "
        "(first-order optimizers, uncentered parameters; sync mode runs them "
        "bulk-synchronously, async with maxStaleness)",
        typeConverter=TypeConverters.toInt,
    )

    staleGradientPolicy: Param[str] = Param(
        Params._dummy(),
        "staleGradientPolicy",
        "async mode: what the server does with a gradient computed tau updates ago: "
        "'none' (apply it as is), 'scale' (learning rate / (1 + tau), DynSGD) or "
        "'compensate' (g + delayCompensation * g * g * (w_now - w_pulled), DC-ASGD)",
        typeConverter=_one_of("staleGradientPolicy", STALE_GRADIENT_POLICIES),
    )
    delayCompensation: Param[float] = Param(
        Params._dummy(),
        "delayCompensation",
        "staleGradientPolicy='compensate': lambda, the weight of the diagonal Hessian "
        "approximation g * g (>= 0); with adaptiveCompensation it is lambda_0 in "
        "lambda_0 / sqrt(mean square of g)",
        typeConverter=TypeConverters.toFloat,
    )
    adaptiveCompensation: Param[bool] = Param(
        Params._dummy(),
        "adaptiveCompensation",
        "staleGradientPolicy='compensate': DC-ASGD-a, lambda per coordinate divided by "
        "the root of a moving mean square of its gradients (decay 0.95)",
        typeConverter=TypeConverters.toBoolean,
    )

    def getMode(self) -> str:
        return self.getOrDefault(self.mode)

    def getStaleGradientPolicy(self) -> str:
        return self.getOrDefault(self.staleGradientPolicy)

    def getDelayCompensation(self) -> float:
        return self.getOrDefault(self.delayCompensation)

    def getAdaptiveCompensation(self) -> bool:
        return self.getOrDefault(self.adaptiveCompensation)

    def getParameterServers(self) -> int:
        return self.getOrDefault(self.parameterServers)

    def getMaxStaleness(self) -> int:
        return self.getOrDefault(self.maxStaleness)

    def getWorkerTimeout(self) -> float:
        return self.getOrDefault(self.workerTimeout)

    def getParameterServerHost(self) -> str:
        return self.getOrDefault(self.parameterServerHost)


class HasEngine(Params):
    engine: Param[str] = Param(
        Params._dummy(),
        "engine",
        "where sync mode's gradient kernels run: 'python' (numpy in Python workers), "
        "'jvm' (Scala kernels over blocks cached in the JVM; needs the gradspark kernels "
        "jar) or 'auto'",
        typeConverter=_one_of("engine", ENGINES),
    )
    executionStrategy: Param[str] = Param(
        Params._dummy(),
        "executionStrategy",
        "how sync mode runs a step: 'jobPerStep' (a broadcast and a treeAggregate job per "
        "step), 'resident' (one long-running stage keeps the blocks in Python workers' "
        "memory; a step is one message round with the driver; python engine only) or "
        "'auto'",
        typeConverter=_one_of("executionStrategy", STRATEGIES),
    )

    aggregationTopology: Param[str] = Param(
        Params._dummy(),
        "aggregationTopology",
        "resident strategy: 'star' (every worker answers the driver) or 'tree' (workers "
        "combine their sums in a tree of fan-in ceil(workers ** (1 / aggregationDepth)), "
        "as treeAggregate, so the driver exchanges one message per step; a barrier "
        "stage). jobPerStep always uses treeAggregate",
        typeConverter=_one_of("aggregationTopology", TOPOLOGIES),
    )

    def getEngine(self) -> str:
        return self.getOrDefault(self.engine)

    def getExecutionStrategy(self) -> str:
        return self.getOrDefault(self.executionStrategy)

    def getAggregationTopology(self) -> str:
        return self.getOrDefault(self.aggregationTopology)


class HasCommunication(Params):
    """What workers send and how often (:mod:`gradspark.comm`, README "Communication")."""

    compression: Param[str] = Param(
        Params._dummy(),
        "compression",
        "what workers do to the gradients they send (async mode, resident workers; fp16 "
        "also for the numpy engine's partition sums with jobPerStep): 'none' (exact; "
        "sparse vectors go as index/value pairs when smaller), 'fp16' (scaled float16, a "
        "quarter of the bytes) or 'topk' (the compressionRatio largest values); lossy ones "
        "keep an error-feedback residual per long-running worker",
        typeConverter=_one_of("compression", COMPRESSIONS),
    )
    compressionRatio: Param[float] = Param(
        Params._dummy(),
        "compressionRatio",
        "compression='topk': fraction of a gradient's values sent each step, in (0, 1]",
        typeConverter=TypeConverters.toFloat,
    )
    errorFeedback: Param[bool] = Param(
        Params._dummy(),
        "errorFeedback",
        "lossy compression: add what a message left out to the worker's next one, so no "
        "gradient is lost, only delayed (without it top-k stalls)",
        typeConverter=TypeConverters.toBoolean,
    )
    localSteps: Param[int] = Param(
        Params._dummy(),
        "localSteps",
        "sync mode: steps each resident worker takes on its own rows between exchanges "
        "(local SGD / periodic model averaging); 1 is ordinary sync",
        typeConverter=TypeConverters.toInt,
    )
    workerQuorum: Param[float] = Param(
        Params._dummy(),
        "workerQuorum",
        "sync mode, resident workers (star): fraction of workers a step waits for; the "
        "slowest ones' answers are dropped for that step (backup workers), so a straggler "
        "does not set the pace; 1.0 waits for all (exact full-batch steps)",
        typeConverter=TypeConverters.toFloat,
    )

    batchSizing: Param[str] = Param(
        Params._dummy(),
        "batchSizing",
        "sync mini-batches on resident workers (star): 'fixed' (every row drawn with "
        "probability miniBatchFraction) or 'throughput' (each worker's share of the batch "
        "follows its measured rows/s, the global batch keeping its size; a worker's sums "
        "are weighted by its rows' inverse inclusion probability, so gradients stay "
        "unbiased)",
        typeConverter=_one_of("batchSizing", BATCH_SIZINGS),
    )

    sparsePull: Param[bool] = Param(
        Params._dummy(),
        "sparsePull",
        "resident (star) and async workers on sparse data: pull only the weights of the "
        "features their next step's rows touch, and push their gradient over the same "
        "keys, whenever that is fewer bytes than the whole vector (exact either way)",
        typeConverter=TypeConverters.toBoolean,
    )

    def getCompression(self) -> str:
        return self.getOrDefault(self.compression)

    def getSparsePull(self) -> bool:
        return self.getOrDefault(self.sparsePull)

    def getCompressionRatio(self) -> float:
        return self.getOrDefault(self.compressionRatio)

    def getErrorFeedback(self) -> bool:
        return self.getOrDefault(self.errorFeedback)

    def getLocalSteps(self) -> int:
        return self.getOrDefault(self.localSteps)

    def getWorkerQuorum(self) -> float:
        return self.getOrDefault(self.workerQuorum)

    def getBatchSizing(self) -> str:
        return self.getOrDefault(self.batchSizing)

    def needsResidentWorkers(self) -> str:
        """Why sync mode must keep resident workers for these Params ('' if it need not)."""
        if self.getMode() != "sync":
            return ""
        reasons = []
        if self.getCompression() != "none":
            reasons.append(f"compression={self.getCompression()!r}")
        if self.getLocalSteps() > 1:
            reasons.append(f"localSteps={self.getLocalSteps()}")
        if self.getWorkerQuorum() < 1.0:
            reasons.append(f"workerQuorum={self.getWorkerQuorum()}")
        if self.getBatchSizing() != "fixed":
            reasons.append(f"batchSizing={self.getBatchSizing()!r}")
        return ", ".join(reasons)


class HasBlockSize(Params):
    blockSize: Param[int] = Param(
        Params._dummy(),
        "blockSize",
        "rows per cached block; gradients are computed one block (matrix) at a time",
        typeConverter=TypeConverters.toInt,
    )

    def getBlockSize(self) -> int:
        return self.getOrDefault(self.blockSize)


class HasCheckpoints(Params):
    checkpointDir: Param[str] = Param(
        Params._dummy(),
        "checkpointDir",
        "directory (any Hadoop file system: file://, hdfs://, s3a://) for training "
        "checkpoints; empty disables checkpointing",
        typeConverter=TypeConverters.toString,
    )
    checkpointInterval: Param[int] = Param(
        Params._dummy(),
        "checkpointInterval",
        "write a checkpoint every this many steps (epochs for TorchEstimator), >= 1, "
        "when checkpointDir is set",
        typeConverter=TypeConverters.toInt,
    )
    keepCheckpoints: Param[int] = Param(
        Params._dummy(),
        "keepCheckpoints",
        "how many of the newest checkpoints to keep (>= 1)",
        typeConverter=TypeConverters.toInt,
    )
    resume: Param[bool] = Param(
        Params._dummy(),
        "resume",
        "resume from the newest checkpoint in checkpointDir made by the same estimator, "
        "Params and data",
        typeConverter=TypeConverters.toBoolean,
    )

    def getCheckpointDir(self) -> str:
        return self.getOrDefault(self.checkpointDir)

    def getCheckpointInterval(self) -> int:
        return self.getOrDefault(self.checkpointInterval)

    def getKeepCheckpoints(self) -> int:
        return self.getOrDefault(self.keepCheckpoints)

    def getResume(self) -> bool:
        return self.getOrDefault(self.resume)


class HasCheckpointData(Params):
    checkpointData: Param[bool] = Param(
        Params._dummy(),
        "checkpointData",
        "also write the cached training blocks as a reliable RDD checkpoint, so blocks "
        "lost with an executor are re-read, not recomputed from the input's lineage",
        typeConverter=TypeConverters.toBoolean,
    )

    def getCheckpointData(self) -> bool:
        return self.getOrDefault(self.checkpointData)


class HasTensorboard(Params):
    tensorboardDir: Param[str] = Param(
        Params._dummy(),
        "tensorboardDir",
        "directory (local, or any Hadoop file system: hdfs://, s3a://) for TensorBoard "
        "event files: per-step loss and learning rate, async staleness and worker "
        "throughput, one run per fit; empty disables them (needs gradspark[tensorboard])",
        typeConverter=TypeConverters.toString,
    )

    def getTensorboardDir(self) -> str:
        return self.getOrDefault(self.tensorboardDir)


class HasInitialModel(Params):
    initialModel: Param = Param(
        Params._dummy(),
        "initialModel",
        "a fitted model of the same estimator to continue from (warm start): fitted in "
        "this session on the same data and Params, sync mode, the fit takes maxIter more "
        "steps with its optimizer state; otherwise it starts from its coefficients. Not "
        "saved with the estimator",
    )

    def getInitialModel(self):
        return self.getOrDefault(self.initialModel)

    def setInitialModel(self, value) -> "HasInitialModel":
        return self._set(initialModel=value)


class HasValidation(Params):
    validationIndicatorCol: Param[str] = Param(
        Params._dummy(),
        "validationIndicatorCol",
        "boolean column: rows where it is true are held out and their loss is measured "
        "after every step; training stops when it stops improving (validationTol) and the "
        "model of the best step is kept. Empty: no validation",
        typeConverter=TypeConverters.toString,
    )
    validationTol: Param[float] = Param(
        Params._dummy(),
        "validationTol",
        "stop when the validation loss improves by less than validationTol * "
        "max(loss, 0.01) (MLlib's GBT rule)",
        typeConverter=TypeConverters.toFloat,
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(validationIndicatorCol="", validationTol=0.01)

    def getValidationIndicatorCol(self) -> str:
        return self.getOrDefault(self.validationIndicatorCol)

    def getValidationTol(self) -> float:
        return self.getOrDefault(self.validationTol)

    def setValidationIndicatorCol(self, value: str) -> "HasValidation":
        return self._set(validationIndicatorCol=value)

    def setValidationTol(self, value: float) -> "HasValidation":
        return self._set(validationTol=value)


class SGDParams(
    HasStepSize,
    HasMiniBatchFraction,
    HasOptimizer,
    HasMode,
    HasEngine,
    HasCommunication,
    HasBlockSize,
    HasCheckpoints,
    HasCheckpointData,
    HasTensorboard,
    HasSeed,
):
    """gradspark's own Params, common to every linear estimator and its model. The
    Params MLlib defines (``maxIter``, ``regParam``, the columns, ...) come from MLlib's
    own mixin of each estimator (``pyspark.ml.classification._LogisticRegressionParams``
    and its kin), so their names, docs, converters and defaults are MLlib's."""

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(
            stepSize=0.1,
            miniBatchFraction=1.0,
            optimizer="lbfgs",
            learningRateSchedule="constant",
            momentum=0.0,
            nesterov=False,
            parameterSpace="auto",
            mode="sync",
            maxStaleness=2,
            parameterServers=0,
            staleGradientPolicy="none",
            delayCompensation=0.04,
            adaptiveCompensation=False,
            workerTimeout=300.0,
            parameterServerHost="",
            engine="auto",
            executionStrategy="auto",
            aggregationTopology="star",
            compression="none",
            compressionRatio=0.01,
            errorFeedback=True,
            localSteps=1,
            workerQuorum=1.0,
            batchSizing="fixed",
            sparsePull=True,
            blockSize=4096,
            checkpointDir="",
            checkpointInterval=10,
            keepCheckpoints=3,
            resume=True,
            checkpointData=False,
            tensorboardDir="",
            # pyspark's default seed is hash(class name), which changes with
            # PYTHONHASHSEED from process to process; a CRC is stable.
            seed=zlib.crc32(type(self).__name__.encode()),
        )
