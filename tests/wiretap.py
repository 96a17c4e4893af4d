"""What a stranger on the network sees of our channels: a recording relay, and a
reader that finds the frames in captured bytes and says which carry plaintext numbers.

The relay sits between clients and a server on loopback and records every byte
both ways (what a sniffer on the wire would read). :func:`plaintext_frames`
finds frames the way an eavesdropper would, by their clear headers (magic,
version, kind, length), and keeps those whose array decodes to plausible
numbers: with encryption on there must be none. The netns test bed's sniffer
(tests/test_netns_bed.py) reads its packet captures with the same function.
"""

from __future__ import annotations

import socket
import threading
from typing import List, Tuple

import numpy as np

from gradspark.rpc.wire import FIELDS, HEADER, MAGIC, VERSION, Kind


class Wiretap:
    """Relay ``127.0.0.1:<port>`` to ``target``, recording both directions."""

    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
        self.captured = bytearray()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = ("127.0.0.1", self._listener.getsockname()[1])
        self._sockets: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                with self._lock:
                    self.captured += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self._listener.close()
        for s in self._sockets:
            s.close()

    def __enter__(self) -> "Wiretap":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def plaintext_frames(stream: bytes) -> List[Tuple[Kind, np.ndarray]]:
    """``(kind, values)`` of every WEIGHTS or PUSH frame in ``stream`` whose array reads as
    float64 numbers a model could hold (finite, zero or 1e-12 < |x| < 1e6, at least 4).

    Random bytes pass that test with odds about 0.03 per value, so a sealed frame of
    four values or more passes by chance with odds below 1e-6.
    """
    marker = MAGIC + bytes([VERSION])
    found, start = [], stream.find(marker)
    while start >= 0:
        try:
            _, _, kind, dtype, length = HEADER.unpack_from(stream, start)
        except Exception:  # noqa: BLE001 - a truncated header at the end of a capture
            break
        if kind in (Kind.WEIGHTS, Kind.PUSH) and dtype in (1, 2):  # dense float64/32
            fields = FIELDS[Kind(kind)].size
            body = bytes(stream[start + HEADER.size + fields: start + HEADER.size + length])
            width = 8 if dtype == 1 else 4
            body = body[: len(body) - len(body) % width]
            values = np.frombuffer(body, dtype="<f8" if dtype == 1 else "<f4").astype(float)
            magnitude = np.abs(values)
            plausible = np.isfinite(values) & ((values == 0)
                                               | ((magnitude > 1e-12) & (magnitude < 1e6)))
            if values.size >= 4 and plausible.all():
                found.append((Kind(kind), values))
        start = stream.find(marker, start + 1)
    return found


def values_seen(stream: bytes, vectors) -> int:
    """How many distinct non-zero float64 values of ``vectors`` occur, as 8 bytes, in
    ``stream`` (what a sniffer who knew them could confirm)."""
    values = {float(v) for vector in vectors for v in np.ravel(vector) if v != 0}
    raw = bytes(stream)
    return sum(np.float64(v).tobytes() in raw for v in values)
