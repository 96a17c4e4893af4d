"""One block as bytes: the encoding the Scala blockify writes (``EncodeBlockFunction``)
and the Python frame path writes too, so every block frame reads the same way.

Little-endian: five int64 ``kind`` (0 dense, 1 CSR), ``n``, ``d``, ``nnz``,
``first_row``; then ``n`` float64 labels, ``n`` float64 weights; then either the
``n * d`` float64 features row-major, or int64 ``indptr`` (n + 1), int32
``indices`` (nnz) and float64 ``values`` (nnz).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gradspark.data.blocks import Block


def encode_block(block: Block) -> bytes:
    x = block.features
    n, d = x.shape
    sparse = sp.issparse(x)
    nnz = x.nnz if sparse else n * d
    parts = [np.array([int(sparse), n, d, nnz, block.first_row], dtype="<i8").tobytes(),
             np.ascontiguousarray(block.labels, dtype="<f8").tobytes(),
             np.ascontiguousarray(block.weights, dtype="<f8").tobytes()]
    if sparse:
        parts += [np.ascontiguousarray(x.indptr, dtype="<i8").tobytes(),
                  np.ascontiguousarray(x.indices, dtype="<i4").tobytes(),
                  np.ascontiguousarray(x.data, dtype="<f8").tobytes()]
    else:
        parts.append(np.ascontiguousarray(x, dtype="<f8").tobytes())
    return b"".join(parts)


def decode_block(data: bytes, start: int = 0) -> Block:
    """A block from :func:`encode_block`'s (or the Scala encoder's) bytes, which begin
    at ``start`` in ``data``."""
    data = bytes(data)
    kind, n, d, nnz, first_row = (
        int(v) for v in np.frombuffer(data, dtype="<i8", count=5, offset=start))
    pos = start + 40
    labels = np.frombuffer(data, dtype="<f8", count=n, offset=pos).copy()
    pos += 8 * n
    weights = np.frombuffer(data, dtype="<f8", count=n, offset=pos).copy()
    pos += 8 * n
    if kind == 0:
        features = np.frombuffer(data, dtype="<f8", count=n * d, offset=pos).reshape(n, d).copy()
    else:
        indptr = np.frombuffer(data, dtype="<i8", count=n + 1, offset=pos)
        pos += 8 * (n + 1)
        indices = np.frombuffer(data, dtype="<i4", count=nnz, offset=pos)
        pos += 4 * nnz
        values = np.frombuffer(data, dtype="<f8", count=nnz, offset=pos)
        features = sp.csr_matrix((values.copy(), indices.copy(), indptr.copy()), shape=(n, d))
    return Block(features, labels, weights, first_row)
