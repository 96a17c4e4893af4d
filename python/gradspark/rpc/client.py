"""The worker's side of the parameter-server protocol (runs inside a Spark task)."""

from __future__ import annotations

import secrets
import socket
import time
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np

from gradspark.comm.compression import Encoded
from gradspark.rpc.frame_tags import session_key
from gradspark.rpc.wire import (
    ENCRYPTED, FIELDS, HANDSHAKE_LIMIT, NONCE_SIZE, Channel, Kind, keep_alive,
)


class Weights(NamedTuple):
    clock: int  # the step this worker is at (the server's count of its pushes)
    version: int  # updates the server had applied
    stop: bool  # the fit is over (converged, budget spent or failed): stop working
    vector: np.ndarray


class ParameterClient:
    """Connect, authenticate as ``worker``, then pull weights and push gradients."""

    def __init__(self, address: Tuple[str, int], secret: bytes, worker: int, attempt: int = 0,
                 connect_timeout: float = 30.0) -> None:
        self.worker = worker
        deadline = time.monotonic() + connect_timeout
        delay, tries = 0.05, 0
        while True:
            self.sock = _connect(address, max(deadline - time.monotonic(), 1.0))
            tries += 1
            try:
                self.start_clock, self.vector_size = self._handshake(secret, attempt)
                return
            except (EOFError, ConnectionError) as closed:
                # The server drops connections still in their handshake when a flood
                # fills its slots; a worker's next try gets in (it needs one round trip).
                self.sock.close()
                if time.monotonic() + delay > deadline:
                    raise ConnectionError(
                        f"the parameter server at {address[0]}:{address[1]} closed the "
                        f"connection during the handshake {tries} times in "
                        f"{connect_timeout:.0f} s ({closed!r}): it refuses connections "
                        "while flooded by unauthenticated clients, or its fit is over; "
                        "see the driver's log") from None
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
            except BaseException:
                self.sock.close()
                raise

    def _handshake(self, secret: bytes, attempt: int) -> Tuple[int, int]:
        channel = Channel(self.sock, secret, HANDSHAKE_LIMIT)
        challenge = channel.expect(Kind.CHALLENGE)
        server_nonce, flags = challenge.fields
        channel.context = server_nonce
        client_nonce = secrets.token_bytes(NONCE_SIZE)
        channel.send(Kind.HELLO, (self.worker, attempt, client_nonce))
        channel.key = session_key(secret, server_nonce, client_nonce)
        if flags & ENCRYPTED:  # the challenge is tagged with the secret: no one else says so
            channel.encrypt(server=False)
        else:
            channel.authenticate(server=False)
        welcome = channel.expect(Kind.WELCOME)
        start, size = welcome.fields
        channel.limit = FIELDS[Kind.WEIGHTS].size + 8 * size
        self.channel = channel
        return start, size

    @property
    def encrypted(self) -> bool:
        """Whether this connection's frames are sealed (the server follows Spark's settings)."""
        return self.channel.encrypted

    def pull(self, keys: Optional[np.ndarray] = None) -> Weights:
        """Blocks while this worker is too far ahead of the slowest one.

        ``keys`` (strictly increasing uint32 positions): pull those weights
        only; the vector then holds their values, in key order.
        """
        self.request_weights(keys)
        return self.weights()

    def request_weights(self, keys: Optional[np.ndarray] = None) -> None:
        """The first half of :meth:`pull` (a worker of several servers asks them all first)."""
        self.channel.send(Kind.PULL, array=keys)

    def weights(self) -> Weights:
        """The second half of :meth:`pull`."""
        message = self.channel.expect(Kind.WEIGHTS)
        clock, version, stop = message.fields
        return Weights(clock, version, bool(stop), message.array)

    def push(self, clock: int, version: int, loss_sum: float, weight_sum: float, count: int,
             vector: Union[np.ndarray, Encoded]) -> bool:
        """False when the server dropped the gradient as stale (the worker was evicted).

        ``vector``: float64 values, or a message from :mod:`gradspark.comm.compression`.
        """
        self.send_push(clock, version, loss_sum, weight_sum, count, vector)
        return self.acked()

    def send_push(self, clock: int, version: int, loss_sum: float, weight_sum: float,
                  count: int, vector: Union[np.ndarray, Encoded]) -> None:
        """The first half of :meth:`push`."""
        if not isinstance(vector, Encoded):
            vector = np.asarray(vector, dtype=np.float64)
        self.channel.send(Kind.PUSH, (clock, version, loss_sum, weight_sum, count), vector)

    def acked(self) -> bool:
        """The second half of :meth:`push` (and of :meth:`report`)."""
        return bool(self.channel.expect(Kind.ACK).fields[0])

    def report(self, step: int, attempt: int, what: int, values: np.ndarray) -> bool:
        """A REPORT frame (see the handler's ``on_report``); whether it was accepted."""
        self.channel.send(Kind.REPORT, (step, attempt, what),
                          np.asarray(values, dtype=np.float64))
        return bool(self.channel.expect(Kind.ACK).fields[0])

    def done(self) -> None:
        """Say this worker is done. The server tells its handler, then ACKs; a handler
        may close the server the moment it learns every worker is done (a shard's host
        does), so a connection closed after DONE went out counts as the ACK: a server
        that failed before reading it fails its own side of the fit."""
        self.channel.send(Kind.DONE)
        try:
            self.channel.expect(Kind.ACK)
        except (EOFError, ConnectionResetError):
            pass

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "ParameterClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _connect(address: Tuple[str, int], timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            sock = socket.create_connection(address, timeout=timeout)
            sock.settimeout(None)  # a pull may wait on the staleness bound for long
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            keep_alive(sock)
            return sock
        except OSError:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 1.0)

