"""``TorchModel``: a trained torch module scored by a pandas UDF, its training summary, and
the persistence both torch classes share (their callables pickled beside the Params)."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np
import pandas as pd
from pyspark import cloudpickle
from pyspark.ml import Model
from pyspark.ml.functions import array_to_vector
from pyspark.ml.param import Params
from pyspark.ml.util import (
    DefaultParamsReader,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gradspark.connect import ship
from gradspark.data.columnar import features_as_array, features_matrix
from gradspark.persistence import DataFrameWriter
from gradspark.report import LossCurve
from gradspark.estimators.torch_params import TorchParams

logger = logging.getLogger(__name__)


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
    # [replicas, parallel]: the rank grid (gradspark.neural.mesh)
    meshShape: List[int] = field(default_factory=list)
    # What every rank held at the end, in rank order (pipeline: its stage; tensor: its
    # half of each split layer), and its peak memory: CUDA memory allocated during the
    # fit on a GPU, the Python worker's peak RSS on the CPU (spark.python.worker.reuse
    # =false for a per-fit figure)
    parameterBytesByRank: List[int] = field(default_factory=list)
    optimizerStateBytesByRank: List[int] = field(default_factory=list)
    peakMemoryBytesByRank: List[int] = field(default_factory=list)
    checkpointSeconds: List[float] = field(default_factory=list)  # each write, on rank 0

    @property
    def objectiveHistory(self) -> List[float]:
        return self.lossHistory


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
        return CallablesWriter(self, {"model_fn": self.model_fn}, state=self.state,
                                extra={"numFeatures": self.num_features})

    @classmethod
    def read(cls) -> MLReader:
        return CallablesReader(cls)


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


class CallablesWriter(DataFrameWriter):
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


class CallablesReader(MLReader):
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
