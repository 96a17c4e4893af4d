"""Params of what workers send and when: compression, local steps, quorum, batch sizing, sparse pulls."""

from __future__ import annotations

from pyspark.ml.param import Param, Params, TypeConverters

from gradspark.comm.compression import COMPRESSIONS
from gradspark.params.choices import BATCH_SIZINGS, _one_of


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
