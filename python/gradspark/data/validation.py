"""Input checks: schema on the driver, values on the executors.

Value checks run while rows are blockified (one pass, no extra Spark job).
An executor raises :class:`InvalidDataError`; Spark wraps it in a
``PythonException``/``Py4JJavaError`` whose text holds our message, and
:func:`raising_data_errors` turns it back into a plain ``ValueError`` on the
driver, so users see the problem rather than a JVM stack trace.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator, Optional

from pyspark.ml.linalg import VectorUDT
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import NumericType

_MARK = "gradspark-data-error"
_MESSAGE_RE = re.compile(_MARK + r"\[(.*?)\]" + _MARK, re.DOTALL)
# Spark's own checks (JVM, then Python) of a sparse vector written by other tools
# (files, SQL): they fail before our blockify sees the row.
_SPARSE_INDEX_RE = re.compile(r"Index (-?\d+) (?:out of bounds for vector of size |"
                              r"is out of the size of vector with size=)(\d+)")


class InvalidDataError(ValueError):
    """Training data that cannot give a correct model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        # On an executor the markers let the driver find the message in the remote
        # traceback Spark hands back; on the driver a user reads the message itself.
        from pyspark import TaskContext

        if TaskContext.get() is None:
            return self.message
        return f"{_MARK}[{self.message}]{_MARK}"


@contextlib.contextmanager
def raising_data_errors(features_col: str) -> Iterator[None]:
    """Re-raise an executor-side InvalidDataError as InvalidDataError here, and
    Spark's refusal of a malformed sparse vector as one naming the column."""
    try:
        yield
    except InvalidDataError:
        raise
    except Exception as exc:  # Py4JJavaError, PythonException, ...
        text = str(exc)
        found = _MESSAGE_RE.search(text)
        if found is not None:
            raise InvalidDataError(found.group(1)) from None
        index = _SPARSE_INDEX_RE.search(text)
        if index is not None:
            raise InvalidDataError(
                f"features column {features_col!r} has a sparse vector with index "
                f"{index.group(1)} out of range for its size {index.group(2)}") from None
        raise


def check_schema(
    df: DataFrame, features_col: str, label_col: str, weight_col: Optional[str]
) -> None:
    """Fail fast, before any Spark job, on missing or mistyped columns."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    wanted = [(features_col, "features"), (label_col, "label")]
    if weight_col:
        wanted.append((weight_col, "weight"))
    for name, role in wanted:
        if name not in fields:
            raise InvalidDataError(
                f"{role} column {name!r} not found; the DataFrame has columns "
                f"{sorted(fields)}"
            )
    if not isinstance(fields[features_col], VectorUDT):
        raise InvalidDataError(
            f"features column {features_col!r} must be a pyspark.ml.linalg Vector "
            f"(use VectorAssembler), got {fields[features_col].simpleString()}"
        )
    for name, role in wanted[1:]:
        if not isinstance(fields[name], NumericType):
            raise InvalidDataError(
                f"{role} column {name!r} must be numeric, got "
                f"{fields[name].simpleString()}"
            )


def row_position(partition: int, row: int) -> str:
    return f"partition {partition}, row {row}"


def feature_vector_size(df: DataFrame, features_col: str) -> int:
    """The size of the first non-null vector in ``features_col``; a clear error when
    there is none."""
    with raising_data_errors(features_col):
        first = df.select(features_col).where(F.col(features_col).isNotNull()).first()
    if first is None:
        if df.limit(1).count() == 0:
            raise InvalidDataError("the training DataFrame is empty")
        raise InvalidDataError(f"features column {features_col!r} is null in every row")
    size = first[0].size
    if size == 0:
        raise InvalidDataError(f"features column {features_col!r} holds empty vectors")
    return size
