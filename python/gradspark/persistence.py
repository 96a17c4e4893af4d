"""Writers whose ``save`` and ``overwrite()`` work on classic and Spark Connect sessions.

pyspark's ``MLWriter.overwrite()`` deletes the target through a JVM helper
(py4j), which a Connect client does not have. Our writers write nothing but
DataFrames (metadata JSON as text, data as Parquet), so on Connect each part
is written with ``mode("overwrite")`` instead: the same directories end up
replaced. Files a different earlier save left *beside* those parts are not
removed there (Connect has no file-system call to do it).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import numpy as np
from pyspark.ml.linalg import DenseMatrix, Matrix, Vector
from pyspark.ml.param import Params
from pyspark.ml.util import DefaultParamsWriter, MLWritable, MLWriter
from pyspark.sql import DataFrame

from gradspark.connect import is_connect

logger = logging.getLogger(__name__)


class DataFrameWriter(MLWriter):
    """An ``MLWriter`` that saves metadata and data as DataFrames (see the module docs)."""

    def _handleOverwrite(self, path: str) -> None:  # noqa: N802 - pyspark's name
        if not is_connect(self.sparkSession):
            super()._handleOverwrite(path)
        # On Connect every part below is written in overwrite mode.

    @property
    def _mode(self) -> str:
        return "overwrite" if self.shouldOverwrite else "error"

    def save_metadata(self, instance: Params, path: str,
                      extra: Optional[Dict[str, Any]] = None) -> None:
        """``DefaultParamsWriter.saveMetadata``'s JSON, written in this writer's mode (Vector
        and Matrix values as lists, which their Params' converters read back)."""
        params = {p.name: json_value(v) for p, v in instance._paramMap.items()
                  if not isinstance(v, Params)}
        for p, v in instance._paramMap.items():
            if isinstance(v, Params):  # initialModel: a model, saved on its own if wanted
                logger.warning("%s: Param %s (a %s) is not saved", instance.uid, p.name,
                               type(v).__name__)
        metadata = DefaultParamsWriter._get_metadata_to_save(instance, self.sparkSession, extra,
                                                             params)
        self.sparkSession.createDataFrame([(metadata,)], "value string").coalesce(1) \
            .write.mode(self._mode).text(f"{path}/metadata")

    def save_data(self, frame: DataFrame, path: str) -> None:
        frame.write.mode(self._mode).parquet(f"{path}/data")


def json_value(value: Any) -> Any:
    """A Param value as JSON can hold it: a Vector as a list, a Matrix as a list of rows."""
    if isinstance(value, Vector):
        return value.toArray().tolist()
    if isinstance(value, Matrix):
        return value.toArray().tolist()
    return value


def to_matrix(value: Any) -> Matrix:
    """Param converter: a Matrix, or a list of rows (how :func:`json_value` saves one)."""
    if isinstance(value, Matrix):
        return value
    rows = np.asarray(value, dtype=np.float64)
    if rows.ndim != 2:
        raise TypeError(f"could not convert {value!r} to a Matrix (a list of rows)")
    return DenseMatrix(rows.shape[0], rows.shape[1], rows.ravel(order="F").tolist())


class ParamsWriter(DataFrameWriter):
    """Params only (an estimator), readable by ``DefaultParamsReader``."""

    def __init__(self, instance: Params) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:  # noqa: N802
        self.save_metadata(self.instance, path)


class ParamsWritable(MLWritable):
    """Mixin: ``write()`` returns a :class:`ParamsWriter` (``DefaultParamsWritable``'s
    format, also on Spark Connect). An ``MLWritable``, which ``Pipeline.write()`` checks."""

    def write(self) -> MLWriter:
        return ParamsWriter(self)
