"""A parameter server inside the driver process: TCP, a thread per worker connection.

The server only speaks the protocol (:mod:`gradspark.ps.wire`) and guards the
door; what a pull returns and what a push does is the ``handler``'s business
(the async trainer). Anything that is not a well-formed, authenticated frame of
the expected kind and size closes that one connection and is counted and
logged; it never reaches the handler, so it can neither crash the server nor
touch the weights.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import weakref
from typing import Dict, Optional, Protocol, Tuple

import numpy as np

from gradspark.comm.traffic import Traffic
from gradspark.ps.wire import (
    FIELDS, HANDSHAKE_LIMIT, NONCE_SIZE, Channel, Kind, ProtocolError, session_key,
)

logger = logging.getLogger(__name__)

_RUNNING: "weakref.WeakSet[ParameterServer]" = weakref.WeakSet()


def running_servers() -> list:
    """Parameter servers of this process that have not been closed (tests, clean-up checks)."""
    return [s for s in list(_RUNNING) if not s.closed]


class Handler(Protocol):
    vector_size: int

    def on_hello(self, worker: int, attempt: int) -> int: ...

    def on_pull(self, worker: int) -> Tuple[int, int, bool, np.ndarray]: ...

    def on_push(self, worker: int, clock: int, version: int, loss_sum: float,
                weight_sum: float, count: int, vector: np.ndarray) -> bool: ...

    def on_done(self, worker: int) -> None: ...

    # Optional: REPORT frames (step, attempt, what, float64 values of any length within
    # the limit); a handler without it refuses them.
    # def on_report(self, worker, step, attempt, what, values) -> bool: ...

    def on_disconnect(self, worker: int) -> None: ...


class ParameterServer:
    """Serve ``handler`` to ``num_workers`` workers on ``host`` (a free port).

    ``secret`` (random per fit unless given) must be handed to the workers
    through the task closure; see :class:`gradspark.ps.client.ParameterClient`.
    """

    def __init__(self, handler: Handler, host: str, num_workers: int,
                 secret: Optional[bytes] = None, handshake_timeout: float = 10.0,
                 max_connections: Optional[int] = None) -> None:
        self.handler = handler
        self.num_workers = num_workers
        self.secret = secret or secrets.token_bytes(32)
        self.handshake_timeout = handshake_timeout
        self.max_connections = max_connections or 4 * num_workers + 16
        self.limit = FIELDS[Kind.PUSH].size + 8 * handler.vector_size
        self.rejected_frames = 0
        self.rejected_gradients = 0
        self.refused_connections = 0
        self.traffic = Traffic()
        self.closed = False
        self._lock = threading.Lock()
        self._connections: Dict[int, socket.socket] = {}
        self._threads: list = []
        self._listener = socket.create_server((host, 0))
        self.address: Tuple[str, int] = (host, self._listener.getsockname()[1])
        self._acceptor = threading.Thread(target=self._accept, name="gradspark-ps-accept",
                                          daemon=True)
        self._acceptor.start()
        _RUNNING.add(self)
        logger.info("parameter server listening on %s:%d for %d workers", *self.address,
                    num_workers)

    # -- lifecycle --------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            connections = list(self._connections.values())
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._acceptor.join(timeout=5)
        for thread in list(self._threads):
            thread.join(timeout=5)
        logger.info("parameter server on %s:%d closed", *self.address)

    def __enter__(self) -> "ParameterServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- connections ------------------------------------------------------
    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, peer = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if len(self._connections) >= self.max_connections:
                    self.refused_connections += 1
                    logger.warning("refused connection from %s: %d connections open", peer,
                                   len(self._connections))
                    conn.close()
                    continue
                self._connections[id(conn)] = conn
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._threads = [t for t in self._threads if t.is_alive()]
                thread = threading.Thread(target=self._serve, args=(conn, peer),
                                          name=f"gradspark-ps-{peer[1]}", daemon=True)
                self._threads.append(thread)
            thread.start()

    def _reject(self, peer, reason: str, gradient: bool = False) -> None:
        with self._lock:
            if gradient:
                self.rejected_gradients += 1
            else:
                self.rejected_frames += 1
        logger.warning("parameter server rejected %s from %s: %s",
                       "a gradient" if gradient else "a frame", peer, reason)

    def _serve(self, conn: socket.socket, peer) -> None:
        worker: Optional[int] = None
        channel: Optional[Channel] = None
        try:
            conn.settimeout(self.handshake_timeout)
            channel = Channel(conn, self.secret, HANDSHAKE_LIMIT)
            worker, attempt = self._handshake(channel)
            self.traffic.watch(channel)
            conn.settimeout(None)  # gradients may take long; silence is the clock's business
            channel.send(Kind.WELCOME, (self.handler.on_hello(worker, attempt),
                                        self.handler.vector_size))
            while not self.closed:
                message = channel.expect(Kind.PULL, Kind.PUSH, Kind.DONE, Kind.REPORT)
                if message.kind == Kind.PULL:
                    keys = message.keys_below(self.handler.vector_size)
                    clock, version, stop, weights = self.handler.on_pull(worker)
                    if keys is not None:  # a sparse pull: those weights only
                        weights = weights[keys]
                    channel.send(Kind.WEIGHTS, (clock, version, int(stop)), weights)
                elif message.kind == Kind.PUSH:
                    try:
                        vector = message.vector(self.handler.vector_size)
                    except ProtocolError as problem:
                        self._reject(peer, f"worker {worker}: {problem}", gradient=True)
                        channel.send(Kind.ERROR, text=str(problem))
                        return
                    self.traffic.gradient(channel)
                    accepted = self.handler.on_push(worker, *message.fields, vector)
                    channel.send(Kind.ACK, (int(accepted),))
                elif message.kind == Kind.REPORT:
                    on_report = getattr(self.handler, "on_report", None)
                    if on_report is None or message.array is None:
                        raise ProtocolError(f"worker {worker}: unexpected REPORT")
                    accepted = on_report(worker, *message.fields, message.array)
                    channel.send(Kind.ACK, (int(accepted),))
                else:
                    self.handler.on_done(worker)
                    channel.send(Kind.ACK, (1,))
                    return
        except ProtocolError as exc:
            self._reject(peer, str(exc))
        except socket.timeout:
            self._reject(peer, "no authenticated hello within "
                               f"{self.handshake_timeout:.0f} s")
        except (EOFError, OSError):
            if worker is None:  # e.g. a client that found our challenge tagged with another secret
                self._reject(peer, "connection closed before authenticating")
            # otherwise the peer went away (a failed task): the clock deals with it
        finally:
            if channel is not None:
                self.traffic.unwatch(channel)
            if worker is not None:
                self.handler.on_disconnect(worker)
            with self._lock:
                self._connections.pop(id(conn), None)
            conn.close()

    def _handshake(self, channel: Channel):
        server_nonce = secrets.token_bytes(NONCE_SIZE)
        channel.send(Kind.CHALLENGE, (server_nonce,))
        channel.context = server_nonce
        hello = channel.expect(Kind.HELLO)
        worker, attempt, client_nonce = hello.fields
        if worker >= self.num_workers:
            raise ProtocolError(f"unknown worker {worker} (expected < {self.num_workers})")
        channel.key = session_key(self.secret, server_nonce, client_nonce)
        channel.limit = self.limit
        return worker, attempt
