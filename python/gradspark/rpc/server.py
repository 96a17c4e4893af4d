"""A parameter server inside the driver process: TCP, a thread per worker connection.

The server only speaks the protocol (:mod:`gradspark.rpc.wire`) and guards the
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
import time
import weakref
from typing import Dict, Optional, Protocol, Tuple

import numpy as np

from gradspark.comm.traffic import Traffic
from gradspark.rpc.frame_tags import session_key
from gradspark.rpc.security import warn_if_plaintext
from gradspark.rpc.wire import (
    ENCRYPTED, FIELDS, HANDSHAKE_LIMIT, NONCE_SIZE, Channel, Kind, ProtocolError,
    keep_alive,
)

logger = logging.getLogger(__name__)

_RUNNING: "weakref.WeakSet[ParameterServer]" = weakref.WeakSet()


class RateLimitedWarnings:
    """At most ``burst`` WARNING lines per ``window`` seconds; the rest are counted and
    reported in one line when the window closes (a flood must not flood the log)."""

    def __init__(self, log: logging.Logger, burst: int = 5, window: float = 10.0) -> None:
        self.log, self.burst, self.window = log, burst, window
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._shown = self._suppressed = 0

    def warn(self, message: str, *args) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._start >= self.window:
                self._roll(now)
            if self._shown < self.burst:
                self._shown += 1
                self.log.warning(message, *args)
            else:
                self._suppressed += 1

    def flush(self) -> None:
        with self._lock:
            self._roll(time.monotonic())

    def _roll(self, now: float) -> None:
        if self._suppressed:
            self.log.warning("parameter server: %d more warnings like the above in the last "
                             "%.0f s (connections refused or rejected; see "
                             "summary.extra's counts)", self._suppressed, now - self._start)
        self._start, self._shown, self._suppressed = now, 0, 0


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
    through the task closure; see :class:`gradspark.rpc.client.ParameterClient`.
    ``encrypt``: seal every frame after the handshake (AES-GCM); the callers pass
    :func:`gradspark.rpc.security.spark_encrypts`, so our channels are encrypted
    whenever Spark's own RPC is.
    """

    def __init__(self, handler: Handler, host: str, num_workers: int,
                 secret: Optional[bytes] = None, handshake_timeout: float = 10.0,
                 max_connections: Optional[int] = None, advertise: Optional[str] = None,
                 max_pending: Optional[int] = None, encrypt: bool = False) -> None:
        self.handler = handler
        self.encrypted = encrypt
        self.num_workers = num_workers
        self.secret = secret or secrets.token_bytes(32)
        # A whole-handshake deadline, not a per-read one: a client sending one byte every
        # few seconds must not hold a slot for ever.
        self.handshake_timeout = handshake_timeout
        # Authenticated connections (they hold the secret: workers, retries, relays) ...
        self.max_connections = max_connections or 4 * num_workers + 16
        # ... and, apart from them, connections still in their handshake. When those are
        # full the oldest is dropped, not the newcomer: a worker's handshake takes one
        # round trip, so a flood of slow strangers cannot keep it out.
        self.max_pending = max_pending or num_workers + 16
        self.limit = FIELDS[Kind.PUSH].size + 8 * handler.vector_size
        self.rejected_frames = 0
        self.rejected_gradients = 0
        self.refused_connections = 0
        self.traffic = Traffic()
        self.closed = False
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._connections: Dict[int, socket.socket] = {}
        self._pending: Dict[int, Tuple[socket.socket, float]] = {}  # id -> (conn, deadline)
        self._expired: set = set()
        self._warnings = RateLimitedWarnings(logger)
        self._threads: list = []
        self._listener = socket.create_server((host, 0))
        self.address: Tuple[str, int] = (advertise or host, self._listener.getsockname()[1])
        self._acceptor = threading.Thread(target=self._accept, name="gradspark-ps-accept",
                                          daemon=True)
        self._acceptor.start()
        self._reaper = threading.Thread(target=self._reap, name="gradspark-ps-reaper",
                                        daemon=True)
        self._reaper.start()
        _RUNNING.add(self)
        logger.info("parameter server listening on %s:%d (advertised as %s) for %d workers, "
                    "%s", host, self.address[1], self.address[0], num_workers,
                    "encrypted" if encrypt else "authenticated, not encrypted")
        if not encrypt:
            warn_if_plaintext(host)

    # -- lifecycle --------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._closing.set()  # wakes the reaper now, not at its next tick
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
        self._reaper.join(timeout=5)
        self._warnings.flush()
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
                if len(self._pending) >= self.max_pending:
                    oldest = min(self._pending, key=lambda k: self._pending[k][1])
                    self._drop_pending(oldest)
                    self._warnings.warn("dropped the oldest of %d unauthenticated "
                                        "connections to admit one from %s",
                                        len(self._pending), peer)
                elif len(self._connections) - len(self._pending) >= self.max_connections:
                    self.refused_connections += 1
                    self._warnings.warn("refused connection from %s: %d authenticated "
                                        "connections open", peer,
                                        len(self._connections) - len(self._pending))
                    conn.close()
                    continue
                self._connections[id(conn)] = conn
                self._pending[id(conn)] = (conn, time.monotonic() + self.handshake_timeout)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                keep_alive(conn)
                self._threads = [t for t in self._threads if t.is_alive()]
                thread = threading.Thread(target=self._serve, args=(conn, peer),
                                          name=f"gradspark-ps-{peer[1]}", daemon=True)
                self._threads.append(thread)
            thread.start()

    def _drop_pending(self, key: int) -> None:
        """Close a connection still in its handshake (the caller holds the lock)."""
        conn, _ = self._pending.pop(key)
        self._expired.add(key)
        self.refused_connections += 1
        try:
            conn.shutdown(socket.SHUT_RDWR)  # its thread's read returns; it cleans up
        except OSError:
            pass

    def _reap(self) -> None:
        """Enforce the whole-handshake deadline of every pending connection."""
        tick = min(0.5, self.handshake_timeout / 4)
        while not self._closing.wait(tick):
            now = time.monotonic()
            with self._lock:
                for key in [k for k, (_, deadline) in self._pending.items() if deadline < now]:
                    self._drop_pending(key)

    def _reject(self, peer, reason: str, gradient: bool = False) -> None:
        with self._lock:
            if gradient:
                self.rejected_gradients += 1
            else:
                self.rejected_frames += 1
        self._warnings.warn("parameter server rejected %s from %s: %s",
                            "a gradient" if gradient else "a frame", peer, reason)

    def _serve(self, conn: socket.socket, peer) -> None:
        worker: Optional[int] = None
        channel: Optional[Channel] = None
        serving = False
        try:
            conn.settimeout(self.handshake_timeout)
            channel = Channel(conn, self.secret, HANDSHAKE_LIMIT)
            worker, attempt = self._handshake(channel)
            with self._lock:
                if self._pending.pop(id(conn), None) is None:  # its deadline passed meanwhile
                    raise ProtocolError(f"worker {worker}: handshake over "
                                        f"{self.handshake_timeout:.0f} s")
            self.traffic.watch(channel)
            serving = True
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
        except socket.timeout as timeout:
            if not serving:
                self._reject(peer, "no authenticated hello within "
                                   f"{self.handshake_timeout:.0f} s")
            else:  # after the handshake only the handler times out (sockets block)
                self._handler_failed(channel, worker, timeout)
        except (EOFError, OSError):
            if id(conn) in self._expired:
                self._reject(peer, "no authenticated hello within "
                                   f"{self.handshake_timeout:.0f} s, or dropped for a newer "
                                   "connection while the handshake slots were full")
            elif worker is None:  # e.g. a client that found our challenge tagged with another secret
                self._reject(peer, "connection closed before authenticating")
            # otherwise the peer went away (a failed task): the clock deals with it
        finally:
            if channel is not None:
                self.traffic.unwatch(channel)
            if worker is not None:
                self.handler.on_disconnect(worker)
            with self._lock:
                self._connections.pop(id(conn), None)
                self._pending.pop(id(conn), None)
                self._expired.discard(id(conn))
            conn.close()

    def _handler_failed(self, channel: Channel, worker: int, error: BaseException) -> None:
        """A handler's wait gave up (``workerTimeout``): say why to the log and to the
        worker, whose task then fails with the reason (and Spark retries it)."""
        logger.error("parameter server: worker %d: %s", worker, error)
        try:
            channel.send(Kind.ERROR, text=f"{type(error).__name__}: {error}")
        except OSError:
            pass

    def _handshake(self, channel: Channel):
        server_nonce = secrets.token_bytes(NONCE_SIZE)
        channel.send(Kind.CHALLENGE, (server_nonce, ENCRYPTED if self.encrypted else 0))
        channel.context = server_nonce
        hello = channel.expect(Kind.HELLO)
        worker, attempt, client_nonce = hello.fields
        if worker >= self.num_workers:
            raise ProtocolError(f"unknown worker {worker} (expected < {self.num_workers})")
        channel.key = session_key(self.secret, server_nonce, client_nonce)
        if self.encrypted:
            channel.encrypt(server=True)
        else:
            channel.authenticate(server=True)
        channel.limit = self.limit
        return worker, attempt
