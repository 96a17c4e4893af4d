"""Blockified training data: rows grouped into matrices once per fit.

Every gradient pass works on whole blocks (one matrix product per block),
never row by row. A block holds raw, unscaled features: standardization is
a reparameterization applied to the coefficients on the driver (see
:mod:`gradspark.trainer.objective`), so the data is never copied to scale it.
Sparse input stays CSR.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple, Optional, Union

import numpy as np
import scipy.sparse as sp
from pyspark.ml.linalg import DenseVector, SparseVector

from gradspark.data.validation import InvalidDataError, row_position

Matrix = Union[np.ndarray, sp.csr_matrix]

# Label domains a loss accepts.
REAL = "real"
BINARY = "binary"
CLASS_INDEX = "class_index"

# Below this density a block with sparse rows is kept CSR.
SPARSE_DENSITY = 0.5


class Block(NamedTuple):
    """A contiguous run of rows from one partition."""

    features: Matrix  # (n, d) float64, dense or CSR
    labels: np.ndarray  # (n,)
    weights: np.ndarray  # (n,)
    first_row: int  # position of row 0 within its partition, for messages


def merge_blocks(blocks: Iterable[Block]) -> Optional[Block]:
    """One block of the given blocks' rows, in order (None when there are none).

    Sparse if any of them is: a worker that reads every row every step pays one
    matrix product and one feature-sized sum per merged block instead of per block.
    """
    blocks = list(blocks)
    if len(blocks) <= 1:
        return blocks[0] if blocks else None
    if any(sp.issparse(block.features) for block in blocks):
        features = sp.vstack([sp.csr_matrix(block.features) for block in blocks], format="csr")
    else:
        features = np.vstack([block.features for block in blocks])
    return Block(features, np.concatenate([block.labels for block in blocks]),
                 np.concatenate([block.weights for block in blocks]), blocks[0].first_row)


def compact_block(block: Block, features: np.ndarray) -> Block:
    """The block on the given (ascending) feature columns only, renumbered 0, 1, ..."""
    return block._replace(features=block.features[:, features])


def blockify_partition(
    partition: int,
    rows: Iterable,
    num_features: int,
    block_size: int,
    label_domain: str,
    feature_col: str,
    label_col: str,
    weight_col: Optional[str],
) -> Iterator[Block]:
    """Group (features, label, weight) rows into validated blocks."""
    buffer: list = []
    start = 0
    for i, row in enumerate(rows):
        buffer.append(row)
        if len(buffer) == block_size:
            yield make_block(
                buffer, partition, start, num_features, label_domain,
                feature_col, label_col, weight_col,
            )
            buffer = []
            start = i + 1
    if buffer:
        yield make_block(
            buffer, partition, start, num_features, label_domain,
            feature_col, label_col, weight_col,
        )


def make_block(
    rows: list,
    partition: int,
    start: int,
    num_features: int,
    label_domain: str,
    feature_col: str,
    label_col: str,
    weight_col: Optional[str],
) -> Block:
    vectors = [row[0] for row in rows]
    labels = [row[1] for row in rows]
    weights = [row[2] for row in rows] if weight_col else None

    def where(k: int) -> str:
        return row_position(partition, start + k)

    for k, v in enumerate(vectors):
        if v is None or v.size != num_features:
            raise vector_error(feature_col, None if v is None else v.size, num_features, where(k))
    for name, values in ((label_col, labels), (weight_col, weights)):
        if values is not None and any(x is None for x in values):
            k = next(k for k, x in enumerate(values) if x is None)
            raise InvalidDataError(f"column {name!r} is null at {where(k)}")

    matrix = _stack(vectors, num_features)
    y = np.asarray(labels, dtype=np.float64)
    w = np.ones(len(rows)) if weights is None else np.asarray(weights, dtype=np.float64)
    return checked_block(matrix, y, w, partition, start, label_domain, feature_col, label_col,
                         weight_col, lambda k: vectors[k])


def vector_error(feature_col: str, size: Optional[int], num_features: int,
                 position: str) -> InvalidDataError:
    """A null vector (``size`` None), or one whose size differs from the first row's."""
    if size is None:
        return InvalidDataError(f"features column {feature_col!r} is null at {position}")
    return InvalidDataError(
        f"features column {feature_col!r} has a vector of size {size} at {position}, but the "
        f"first row has size {num_features}; all feature vectors must have the same size")


def checked_block(
    matrix: Matrix,
    y: np.ndarray,
    w: np.ndarray,
    partition: int,
    start: int,
    label_domain: str,
    feature_col: str,
    label_col: str,
    weight_col: Optional[str],
    describe_row,
) -> Block:
    """The block, once its values pass the checks every blockify path makes: finite
    features, labels in the loss's domain, finite non-negative weights.
    ``describe_row(k)`` shows row ``k``'s vector in the message."""

    def where(k: int) -> str:
        return row_position(partition, start + k)

    values = matrix.data if sp.issparse(matrix) else matrix
    if not np.all(np.isfinite(values)):
        k = _first_nonfinite_row(matrix)
        raise InvalidDataError(
            f"features column {feature_col!r} contains NaN or infinite values "
            f"(first at {where(k)}: {describe_row(k)})"
        )
    _check_labels(y, label_domain, label_col, where)
    if weight_col:
        bad = ~np.isfinite(w) | (w < 0)
        if bad.any():
            k = int(np.argmax(bad))
            raise InvalidDataError(
                f"weight column {weight_col!r} must be finite and >= 0, got {w[k]} "
                f"at {where(k)}"
            )
    return Block(matrix, y, w, start)


def _stack(vectors: list, num_features: int) -> Matrix:
    if all(isinstance(v, DenseVector) for v in vectors):
        return np.vstack([v.values for v in vectors]).astype(np.float64, copy=False)
    indptr = np.zeros(len(vectors) + 1, dtype=np.int64)
    indices, data = [], []
    for k, v in enumerate(vectors):
        if isinstance(v, SparseVector):
            idx, val = v.indices, v.values
        else:
            idx = np.flatnonzero(v.values)
            val = v.values[idx]
        indices.append(idx)
        data.append(val)
        indptr[k + 1] = indptr[k] + len(idx)
    csr = sp.csr_matrix(
        (np.concatenate(data).astype(np.float64), np.concatenate(indices), indptr),
        shape=(len(vectors), num_features),
    )
    if csr.nnz >= SPARSE_DENSITY * len(vectors) * num_features:
        return csr.toarray()
    return csr


def _first_nonfinite_row(matrix: Matrix) -> int:
    if sp.issparse(matrix):
        bad = ~np.isfinite(matrix.data)
        position = int(np.argmax(bad))
        return int(np.searchsorted(matrix.indptr, position, side="right") - 1)
    return int(np.argmax(~np.all(np.isfinite(matrix), axis=1)))


def _check_labels(y: np.ndarray, domain: str, label_col: str, where) -> None:
    bad = ~np.isfinite(y)
    if bad.any():
        k = int(np.argmax(bad))
        raise InvalidDataError(f"label column {label_col!r} is {y[k]} at {where(k)}")
    if domain == REAL:
        return
    if domain == BINARY:
        bad = (y != 0.0) & (y != 1.0)
        expected = "0 or 1 (binary classification)"
    else:
        bad = (y < 0) | (y != np.floor(y))
        expected = "a class index 0, 1, 2, ... (non-negative integer)"
    if bad.any():
        k = int(np.argmax(bad))
        raise InvalidDataError(
            f"label column {label_col!r} must be {expected}, got {y[k]} at {where(k)}"
        )


def sample_block(block: Block, fraction: float, rng: np.random.Generator) -> Block:
    """Bernoulli row sample of a block; the whole block when fraction == 1."""
    if fraction >= 1.0:
        return block
    keep = rng.random(len(block.labels)) < fraction
    return Block(block.features[keep], block.labels[keep], block.weights[keep], block.first_row)
