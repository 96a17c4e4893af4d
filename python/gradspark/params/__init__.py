"""Params shared by gradspark estimators and models, grouped by meaning.

Where ``pyspark.ml`` already defines a Param (``maxIter``, ``regParam``, ...)
the estimators take MLlib's own mixin, so names, docs, type converters and
defaults match MLlib exactly; the mixins below add only what MLlib lacks.
"""

from __future__ import annotations

import zlib

from pyspark.ml.param.shared import HasSeed

from gradspark.params.choices import (BATCH_SIZINGS, ENGINES, FIRST_ORDER, MODES, OPTIMIZERS,
                                      PARAMETER_SPACES, SCHEDULES, STALE_GRADIENT_POLICIES,
                                      STRATEGIES, TOPOLOGIES, _one_of)
from gradspark.params.communication import HasCommunication
from gradspark.params.execution import (HasBlockSize, HasEngine, HasMode, HasParameterServers,
                                        HasStaleGradients)
from gradspark.params.lifecycle import (HasCheckpointData, HasCheckpoints, HasInitialModel,
                                        HasTensorboard, HasValidation)
from gradspark.params.optimization import HasMiniBatchFraction, HasOptimizer

__all__ = [
    "BATCH_SIZINGS", "ENGINES", "FIRST_ORDER", "MODES", "OPTIMIZERS", "PARAMETER_SPACES",
    "SCHEDULES", "STALE_GRADIENT_POLICIES", "STRATEGIES", "TOPOLOGIES", "_one_of",
    "HasBlockSize", "HasCheckpointData", "HasCheckpoints", "HasCommunication", "HasEngine",
    "HasInitialModel", "HasMiniBatchFraction", "HasMode", "HasOptimizer", "HasParameterServers",
    "HasStaleGradients", "HasTensorboard", "HasValidation", "SGDParams",
]


class SGDParams(
    HasMiniBatchFraction,
    HasOptimizer,
    HasMode,
    HasParameterServers,
    HasStaleGradients,
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
            miniBatchFraction=1.0,
            optimizer="lbfgs",
            learningRateSchedule="constant",
            momentum=0.0,
            nesterov=False,
            lazyUpdates=True,
            iterateAveraging="auto",
            parameterSpace="auto",
            preconditioning="auto",
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
