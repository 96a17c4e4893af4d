"""Communication: what a worker's message carries (compression) and what it costs (traffic)."""

from gradspark.comm.compression import (
    COMPRESSIONS, Compression, Encoded, ErrorFeedback, encode_exact,
)

__all__ = ["COMPRESSIONS", "Compression", "Encoded", "ErrorFeedback", "encode_exact"]
