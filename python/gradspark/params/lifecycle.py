"""Params around a fit: checkpoints and resume, warm start, early stopping, TensorBoard."""

from __future__ import annotations

from pyspark.ml.param import Param, Params, TypeConverters



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
