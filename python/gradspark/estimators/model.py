"""The fitted linear model's base class: predictions, summaries, MLlib export, persistence.

Each concrete model (``SGDLogisticRegressionModel``, ...) says only what
differs: its output columns (:meth:`_LinearModel._output_fns`), its summary
classes and MLlib's model class it exports to.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np
from pyspark.ml import Model
from pyspark.ml.linalg import DenseVector, Vector, VectorUDT
from pyspark.ml.util import DefaultParamsReader, MLReadable, MLReader, MLWritable, MLWriter
from pyspark.sql import DataFrame

from gradspark.accessors import MODEL_SETTERS, ParamAccessors
from gradspark.checkpoints import TrainingState
from gradspark.estimators.scoring import OutputFns, append_outputs
from gradspark.params import SGDParams
from gradspark.persistence import DataFrameWriter
from gradspark.summaries import PredictionSummary, TrainingSummary


class _LinearModel(Model, SGDParams, ParamAccessors, MLReadable, MLWritable):
    """A fitted linear model: coefficient matrix (d x k) and intercepts (k)."""

    _setter_params = MODEL_SETTERS

    _data_fields = ("coefficients", "intercepts", "aux")

    def __init__(
        self,
        coefficient_matrix: Optional[np.ndarray] = None,
        intercepts: Optional[np.ndarray] = None,
        aux: Optional[np.ndarray] = None,
    ) -> None:
        super().__init__()
        self._coefficient_matrix = (
            np.zeros((0, 1)) if coefficient_matrix is None else np.asarray(coefficient_matrix)
        )
        self._intercepts = np.zeros(1) if intercepts is None else np.asarray(intercepts)
        self._aux = np.zeros(0) if aux is None else np.asarray(aux)
        self._summary: Optional[PredictionSummary] = None
        # The state a fit in this session ended in, for initialModel (not saved).
        self._training_state: Optional[TrainingState] = None

    @property
    def numFeatures(self) -> int:
        return self._coefficient_matrix.shape[0]

    @property
    def hasSummary(self) -> bool:
        return self._summary is not None

    @property
    def summary(self) -> PredictionSummary:
        """The training history and MLlib's metrics on the training data (see
        :mod:`gradspark.summaries`); metrics are computed on first access."""
        if self._summary is None:
            raise RuntimeError(
                "no training summary: this model was loaded or copied, not fitted in this session"
            )
        return self._summary

    def copy(self, extra=None) -> "_LinearModel":
        that = super().copy(extra)
        that._summary = self._summary
        that._training_state = self._training_state
        return that

    # -- predictions -------------------------------------------------------
    def _output_fns(self) -> OutputFns:
        """``{role: (Spark type, fn(margins))}`` for each output column, keyed by the
        Param's name without ``Col`` (``prediction``, ``rawPrediction``, ...). ``fn``
        maps an ``n x k`` margin matrix to ``n`` values (or ``n`` vectors as rows); it
        must not refer to ``self``: it is shipped to the executors."""
        raise NotImplementedError

    def _transform(self, dataset: DataFrame) -> DataFrame:
        self._require_features(dataset)
        outputs = [(self.getOrDefault(f"{role}Col"), dtype, fn)
                   for role, (dtype, fn) in self._output_fns().items()]
        return append_outputs(dataset, self.getFeaturesCol(), self._coefficient_matrix,
                              self._intercepts, outputs)

    def _predict_one(self, role: str, features: Vector):
        if features.size != self.numFeatures:
            raise ValueError(f"the features vector has size {features.size}; this model "
                             f"was fitted on {self.numFeatures} features")
        dtype, fn = self._output_fns()[role]
        value = fn(self._margins_fn()(features)[None, :])[0]
        return DenseVector(value) if isinstance(dtype, VectorUDT) else float(value)

    def predict(self, value: Vector) -> float:
        """The prediction for one feature vector, as ``transform`` computes it."""
        return self._predict_one("prediction", value)

    # -- summaries -----------------------------------------------------------
    def _summary_on(self, dataset: DataFrame,
                    history: Optional[TrainingSummary] = None) -> PredictionSummary:
        """MLlib's summary of this model's predictions on ``dataset``; a training summary
        when given the fit's ``history``. Output columns left empty get a name here, as
        MLlib does for its summaries."""
        missing = [c for c in (self.getFeaturesCol(), self.getLabelCol())
                   if c not in dataset.columns]
        if missing:
            raise ValueError(f"column(s) {missing} not found; the DataFrame has columns "
                             f"{sorted(dataset.columns)}")
        model = self.copy()
        for role in self._output_fns():
            if not model.getOrDefault(f"{role}Col"):
                model._set(**{f"{role}Col": f"{role}_{self.uid}"})
        # A training summary's predictions are planned when first read (see
        # PredictionSummary); an evaluation's now, so bad columns raise in evaluate().
        predictions = model.transform(dataset) if history is None else \
            (lambda: model.transform(dataset))
        weight_col = self.getOrDefault(self.weightCol) if self.isDefined(self.weightCol) else ""
        columns = dict(predictions=predictions, labelCol=model.getLabelCol(),
                       predictionCol=model.getPredictionCol(),
                       featuresCol=model.getFeaturesCol(),
                       weightCol=weight_col if weight_col in dataset.columns else None)
        kind, trained = model._summary_kinds()
        columns.update(model._summary_columns())
        if history is None:
            return kind(**columns)
        return trained(history, **columns, **model._training_summary_columns())

    def _summary_kinds(self) -> Tuple[type, type]:
        """(evaluation summary class, training summary class) for this model."""
        raise NotImplementedError

    def _summary_columns(self) -> Dict[str, Any]:
        """Constructor arguments the model's summary classes take beyond the columns."""
        return {}

    def _training_summary_columns(self) -> Dict[str, Any]:
        """Constructor arguments only its training summary class takes."""
        return {}

    def evaluate(self, dataset: DataFrame) -> PredictionSummary:
        """MLlib's ``model.evaluate(df)``: the metrics of this model on ``dataset``."""
        return self._summary_on(dataset)

    def _margins_fn(self):
        coef, intercepts = self._coefficient_matrix, self._intercepts

        def margins(v) -> np.ndarray:
            if hasattr(v, "indices"):
                return v.values @ coef[v.indices] + intercepts
            return v.toArray() @ coef + intercepts

        return margins

    # -- export to MLlib's model classes ---------------------------------------
    _mllib_class: type  # pyspark.ml's model class (set by each model)
    _mllib_params: type  # MLlib's Params mixin of that class

    def _mllib_data(self) -> Tuple[tuple, Any]:
        """(row, StructType) of MLlib's ``data/`` Parquet for this model."""
        raise NotImplementedError

    def toMLlib(self, path: Optional[str] = None):
        """This model as pyspark.ml's own model class (``LogisticRegressionModel``, ...),
        scored by MLlib's JVM ``transform``; see :mod:`gradspark.estimators.mllib_export`
        (on a cluster, give a ``path`` on storage every executor reads)."""
        from gradspark.estimators.mllib_export import to_mllib

        return to_mllib(self, path)

    def saveAsMLlib(self, path: str, overwrite: bool = False) -> None:
        """Write this model in MLlib's layout, loadable by MLlib's reader (Scala, Java,
        pyspark, a Connect server without gradspark)."""
        from gradspark.estimators.mllib_export import save_as_mllib

        save_as_mllib(self, path, overwrite)

    # -- persistence -----------------------------------------------------
    def write(self) -> MLWriter:
        return _LinearModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _LinearModelReader(cls)

    def _require_features(self, dataset: DataFrame) -> None:
        fields = [f.name for f in dataset.schema.fields]
        if self.getFeaturesCol() not in fields:
            raise ValueError(
                f"features column {self.getFeaturesCol()!r} not found; the DataFrame has "
                f"columns {sorted(fields)}"
            )


class _LinearModelWriter(DataFrameWriter):
    def __init__(self, instance: _LinearModel) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        m = self.instance
        self.save_metadata(m, path, extra={"shape": list(m._coefficient_matrix.shape)})
        row = (
            m._coefficient_matrix.ravel().tolist(),
            m._intercepts.tolist(),
            m._aux.tolist(),
        )
        self.save_data(self.sparkSession.createDataFrame(
            [row], "coefficients array<double>, intercepts array<double>, aux array<double>"
        ), path)


class _LinearModelReader(MLReader):
    def __init__(self, cls) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> _LinearModel:
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        data = self.sparkSession.read.parquet(f"{path}/data").first()
        shape = tuple(metadata["shape"])
        model = self.cls(
            np.asarray(data.coefficients, dtype=np.float64).reshape(shape),
            np.asarray(data.intercepts, dtype=np.float64),
            np.asarray(data.aux, dtype=np.float64),
        )
        model._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(model, metadata)
        return model
