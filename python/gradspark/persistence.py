"""Writers whose ``save`` and ``overwrite()`` work on classic and Spark Connect sessions.

pyspark's ``MLWriter.overwrite()`` deletes the target through a JVM helper
(py4j), which a Connect client does not have. Our writers write nothing but
DataFrames (metadata JSON as text, data as Parquet), so on Connect each part
is written with ``mode("overwrite")`` instead: the same directories end up
replaced. Files a different earlier save left *beside* those parts are not
removed there (Connect has no file-system call to do it).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from pyspark.ml.param import Params
from pyspark.ml.util import DefaultParamsWriter, MLWritable, MLWriter
from pyspark.sql import DataFrame

from gradspark.connect import is_connect


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
        """``DefaultParamsWriter.saveMetadata``'s JSON, written in this writer's mode."""
        metadata = DefaultParamsWriter._get_metadata_to_save(instance, self.sparkSession, extra)
        self.sparkSession.createDataFrame([(metadata,)], "value string").coalesce(1) \
            .write.mode(self._mode).text(f"{path}/metadata")

    def save_data(self, frame: DataFrame, path: str) -> None:
        frame.write.mode(self._mode).parquet(f"{path}/data")


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
