"""Hostile clients for parameter-server tests: raw bytes and fuzzed frames."""

from __future__ import annotations

import socket
import time

import numpy as np

from gradspark.rpc import ParameterClient, ProtocolError
from gradspark.rpc.wire import HEADER, MAGIC, VERSION, Kind


def send_raw(server, data: bytes) -> bytes:
    """Send bytes after the challenge; what the server answers before it hangs up."""
    with socket.create_connection(server.address, timeout=5) as s:
        s.recv(1024)  # the challenge
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            return s.recv(1024)
        except OSError:  # already closed by the server
            return b""


def fuzz(server, seconds: float, seed: int, sent: list) -> None:
    """Random unauthenticated bytes and frames, and tampered frames after a real handshake."""
    g = np.random.default_rng(seed)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not server.closed:
        choice = g.integers(4)
        try:
            if choice == 3:  # authenticated, then a PULL whose tag is one bit off
                client = ParameterClient(server.address, server.secret, int(g.integers(2)))
                channel = client.channel
                header = HEADER.pack(MAGIC, VERSION, int(Kind.PULL), 0, 0)
                mac = bytearray(channel.next_tag(header, b""))
                mac[int(g.integers(len(mac)))] ^= 1 << int(g.integers(8))
                client.sock.sendall(header + bytes(mac))
                client.sock.recv(1024)
                client.close()
            else:
                if choice == 0:
                    data = g.bytes(int(g.integers(1, 200)))
                else:  # a plausible header: right magic, random kind, dtype and length
                    kind, dtype = int(g.integers(0, 12)), int(g.integers(0, 4))
                    length = int(g.choice([0, 8, 40, 255, 257, 2**20, 2**32 - 1]))
                    data = HEADER.pack(MAGIC, VERSION, kind, dtype, length) + g.bytes(
                        int(g.integers(0, 300)))
                send_raw(server, data)
            sent.append(choice)
        except (OSError, ProtocolError, EOFError):
            sent.append(choice)
