"""The parameter server on real sockets: training, authentication, hostile input, SSP.

These tests drive the server with the same worker loop the Spark tasks run
(``run_worker``), from threads, so they need no SparkSession.
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from gradspark.comm.compression import Encoded
from gradspark.data.blocks import Block
from conftest import wait_until
from ps_fuzz import fuzz, send_raw
from wiretap import Wiretap, plaintext_frames, values_seen
from gradspark.losses import SquaredLoss
from gradspark.rpc import ParameterClient, ParameterServer, ProtocolError
from gradspark.trainer.clock import StalenessClock
from gradspark.rpc.frame_tags import TAGGING_KEYS, direction_keys, session_tag, tag
from gradspark.rpc.wire import (FIELDS, HEADER, MAGIC, SESSION_TAG_SIZE, TAG_SIZE, VERSION,
                                 Channel, Kind)
from gradspark.engine.worker_step import WorkerStep
from gradspark.trainer.asynchronous import AsyncConfig, AsyncTraining, run_worker
from gradspark.trainer.objective import LinearObjective

HOST = "127.0.0.1"


def least_squares(seed=0, n=300, d=3, workers=2):
    g = np.random.default_rng(seed)
    X = g.normal(size=(n, d)) * [1.0, 3.0, 0.5] + [2.0, -1.0, 0.0]
    y = X @ [1.0, -2.0, 0.5] + 3.0 + 0.1 * g.normal(size=n)
    parts = np.array_split(np.arange(n), workers)
    blocks = [[Block(X[p], y[p], np.ones(len(p)), 0)] for p in parts]
    exact = np.linalg.lstsq(np.c_[X, np.ones(n)], y, rcond=None)[0]
    return X, y, blocks, exact


def make_training(X, workers, staleness=0, max_iter=300, timeout=30.0, step=0.5,
                  schedule="constant"):
    objective = LinearObjective(
        engine=None, loss=SquaredLoss(), num_features=X.shape[1], num_outputs=1,
        fit_intercept=True, features_mean=X.mean(0), features_std=X.std(0, ddof=1),
        l2=np.zeros(X.shape[1] + 1), l1=np.zeros(X.shape[1] + 1),
    )
    config = AsyncConfig(optimizer="sgd", max_iter=max_iter, tol=0.0, step_size=step,
                         max_staleness=staleness, worker_timeout=timeout, schedule=schedule)
    return objective, AsyncTraining(objective, objective.initial(), config, workers)


def start_workers(server, blocks, loss, d, max_iter, delays=None):
    results, errors = {}, []

    def work(w):
        try:
            with ParameterClient(server.address, server.secret, w) as client:
                plan = None if not delays or w not in delays else _Sleep(delays[w])
                results[w] = run_worker(client, {w: blocks[w]},
                                        WorkerStep(loss, d, 1, 1.0, 0, plan), max_iter)
        except Exception as exc:  # surfaced by the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(len(blocks))]
    for t in threads:
        t.start()
    return threads, results, errors


class _Sleep:
    def __init__(self, seconds):
        self.seconds = seconds

    def before_batch(self, worker, step, attempt):
        time.sleep(self.seconds)

    def after_batch(self, partitions, step, rows):
        pass  # no per-row emulated compute


def solution(objective, training):
    coef, intercept, _ = objective.original_space(training.theta)
    return np.r_[coef[:, 0], intercept]


def finish(threads, errors, timeout=60):
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not errors, errors


def test_a_frame_sent_from_views_is_the_documented_frame_and_is_read_in_place():
    """Channel.send gathers the array's own buffer (no joined copy) and recv reads the
    array into a buffer of its own: the bytes on the wire are still header | fields |
    little-endian values | HMAC over all of them, and the array arrives aligned."""
    key = bytes(range(32))
    vector = np.random.default_rng(0).normal(size=5001)
    fields = (3, 7, 0)
    a, b = socket.socketpair()
    with a, b:
        Channel(a, key).send(Kind.WEIGHTS, fields, vector)
        layout = FIELDS[Kind.WEIGHTS]
        size = HEADER.size + layout.size + vector.nbytes + TAG_SIZE
        raw = b""
        while len(raw) < size:
            raw += b.recv(size - len(raw))
    header, payload = raw[:HEADER.size], raw[HEADER.size:-TAG_SIZE]
    assert HEADER.unpack(header) == (MAGIC, VERSION, int(Kind.WEIGHTS), 1, len(payload))
    assert payload == layout.pack(*fields) + vector.astype("<f8").tobytes()
    assert raw[-TAG_SIZE:] == tag(key, b"", 0, header, payload)
    a, b = socket.socketpair()
    with a, b:
        Channel(a, key).send(Kind.WEIGHTS, fields, vector[::2])  # a strided view, too
        message = Channel(b, key, limit=1 << 20).recv()
    assert message.fields == fields and np.array_equal(message.array, vector[::2])
    assert message.array.flags.aligned and message.array.flags.writeable


def test_frames_after_the_handshake_carry_the_documented_gmac():
    """Past the handshake a frame in clear ends with a 16-byte GMAC under the sending
    direction's key (HKDF of the session key) with the sequence number as nonce; the
    other end checks it, and refuses the same frame under the other direction's key."""
    key = bytes(range(32))
    vector = np.random.default_rng(1).normal(size=3001)
    fields = (5, 9, 0)
    a, b = socket.socketpair()
    with a, b:
        server, worker = Channel(a, key, 1 << 20), Channel(b, key, 1 << 20)
        server.authenticate(server=True)
        worker.authenticate(server=False)
        server.send(Kind.WEIGHTS, fields, vector)
        size = HEADER.size + FIELDS[Kind.WEIGHTS].size + vector.nbytes + SESSION_TAG_SIZE
        raw = b""
        while len(raw) < size:
            raw += b.recv(size - len(raw))
        header, payload = raw[:HEADER.size], raw[HEADER.size:-SESSION_TAG_SIZE]
        assert HEADER.unpack(header) == (MAGIC, VERSION, int(Kind.WEIGHTS), 1, len(payload))
        _, to_worker = direction_keys(key, TAGGING_KEYS)
        assert raw[-SESSION_TAG_SIZE:] == session_tag(to_worker, b"", 0, header, payload)
        assert raw[-SESSION_TAG_SIZE:] != tag(key, b"", 0, header, payload)[:SESSION_TAG_SIZE]
        worker.received += 1  # the first frame was read raw above
        server.send(Kind.WEIGHTS, fields, vector)
        assert np.array_equal(worker.recv().array, vector)  # the second frame, checked
        # The worker's own key would have tagged it differently: a reflected frame fails.
        worker.sock.sendall(raw[:-SESSION_TAG_SIZE]
                            + session_tag(to_worker, b"", 0, header, payload))
        with pytest.raises(ProtocolError, match="bad tag"):
            server.recv()


@pytest.mark.parametrize("staleness, tolerance", [(0, 1e-6), (2, 1e-3)])
def test_two_workers_reach_the_least_squares_solution(staleness, tolerance):
    X, y, blocks, exact = least_squares()
    # Each asynchronous push follows one worker's half of the data, so a constant step
    # would circle the optimum; the cosine schedule anneals onto it.
    objective, training = make_training(X, 2, staleness, schedule="cosine")
    with ParameterServer(training, HOST, 2) as server:
        threads, pushes, errors = start_workers(server, blocks, objective.loss, 3, 300)
        finish(threads, errors)
    np.testing.assert_allclose(solution(objective, training), exact, atol=tolerance)
    assert pushes == {0: 300, 1: 300}
    metrics = training.result(server).metrics
    assert metrics["maxStaleness"] <= staleness
    assert metrics["updatesApplied"] == (300 if staleness == 0 else 600)


def test_staleness_bound_holds_with_a_straggler():
    X, y, blocks, _ = least_squares()
    objective, training = make_training(X, 2, staleness=1, max_iter=40)
    with ParameterServer(training, HOST, 2) as server:
        threads, _, errors = start_workers(server, blocks, objective.loss, 3, 40,
                                           delays={1: 0.01})
        finish(threads, errors)
    metrics = training.result(server).metrics
    # The fast worker ran ahead as far as allowed, and never further.
    assert metrics["maxStaleness"] == 1
    assert metrics["maxUpdateDelay"] >= 1


def test_wrong_secret_is_refused_and_training_is_untouched():
    X, y, blocks, _ = least_squares()
    objective, training = make_training(X, 2)
    with ParameterServer(training, HOST, 2) as server:
        # The client sees the server's challenge is not tagged with its secret...
        with pytest.raises(ProtocolError):
            ParameterClient(server.address, b"not the secret" * 3, 0)
        # ...and the server refuses a HELLO tagged with the wrong one.
        with socket.create_connection(server.address, timeout=5) as s:
            channel = Channel(s, b"not the secret" * 3)
            s.recv(HEADER.size + FIELDS[Kind.CHALLENGE].size + TAG_SIZE)
            channel.send(Kind.HELLO, (0, 0, b"n" * 32))
            assert s.recv(1024) == b""  # closed without a WELCOME
        assert wait_until(lambda: server.rejected_frames == 2), server.rejected_frames
    assert training.version == 0 and np.all(training.theta == objective.initial())


def test_hostile_frames_are_rejected_while_training_finishes_correctly():
    X, y, blocks, exact = least_squares()
    objective, training = make_training(X, 2, staleness=0)
    reference_obj, reference = make_training(X, 2, staleness=0)
    with ParameterServer(reference, HOST, 2) as server:
        finish(*_drop_results(start_workers(server, blocks, reference_obj.loss, 3, 300)))

    with ParameterServer(training, HOST, 2) as server:
        threads, _, errors = start_workers(server, blocks, objective.loss, 3, 300)
        for hostile in (
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 3,  # garbage
            HEADER.pack(MAGIC, VERSION, int(Kind.HELLO), 0, 40) + b"\0" * 10,  # truncated
            HEADER.pack(MAGIC, VERSION, int(Kind.HELLO), 0, 2**31),  # oversize length prefix
        ):
            assert send_raw(server, hostile) == b""  # no answer, connection closed
        # An authenticated client (it holds the secret) sending gradients that cannot be
        # the 4 values expected: the wrong length, dense or float16; a sparse index past
        # the end; sparse indices out of order.
        for gradient in (np.ones(2), Encoded(4, np.ones(5, dtype=np.float16), scale=1.0),
                         Encoded(4, np.ones(1), np.array([4], dtype=np.uint32)),
                         Encoded(4, np.ones(2), np.array([2, 1], dtype=np.uint32))):
            intruder = ParameterClient(server.address, server.secret, 1)
            intruder.channel.send(Kind.PUSH, (intruder.start_clock, 0, 1.0, 1.0, 1), gradient)
            with pytest.raises(ProtocolError):
                intruder.channel.expect(Kind.ACK)
            intruder.close()
        finish(threads, errors)
        assert server.rejected_frames == 3
        assert server.rejected_gradients == 4
    # The same weights as the undisturbed run, bit for bit (maxStaleness=0 is deterministic).
    np.testing.assert_array_equal(training.theta, reference.theta)
    np.testing.assert_allclose(solution(objective, training), exact, rtol=1e-6, atol=1e-6)


def _drop_results(started):
    threads, _, errors = started
    return threads, errors


def test_a_worker_that_never_comes_does_not_block_the_others():
    X, y, blocks, exact = least_squares(workers=1)
    objective, training = make_training(X, 2, staleness=0, max_iter=100, timeout=0.5)
    with ParameterServer(training, HOST, 2) as server:  # two expected, one shows up
        threads, pushes, errors = start_workers(server, blocks, objective.loss, 3, 100)
        finish(threads, errors, timeout=30)
    assert pushes == {0: 100}
    assert training.result(server).metrics["evictions"] >= 1
    np.testing.assert_allclose(solution(objective, training), exact, rtol=1e-5, atol=1e-5)


def test_server_closes_its_threads_and_port():
    X, *_ = least_squares()
    _, training = make_training(X, 2)
    before = {t.name for t in threading.enumerate()}
    server = ParameterServer(training, HOST, 2)
    address = server.address
    with ParameterClient(address, server.secret, 0):
        pass
    server.close()

    def ps_threads():
        return [t.name for t in threading.enumerate()
                if t.name.startswith("gradspark-ps") and t.name not in before]

    assert wait_until(lambda: not ps_threads()), ps_threads()
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=1).close()


def test_clock_bounds_and_rejoins():
    now = [0.0]
    clock = StalenessClock(3, bound=1, timeout=10.0, now=lambda: now[0])
    clock.advance(0)
    assert clock.may_proceed(0)  # one ahead
    clock.advance(0)
    assert not clock.may_proceed(0)  # two ahead of workers 1 and 2
    now[0] = 11.0
    clock.touch(0)
    clock.touch(1)
    assert clock.evict_silent() == [2]  # never heard from
    clock.advance(1)
    assert clock.may_proceed(0)  # slowest is now worker 1 at clock 1
    assert clock.join(2) == 1  # rejoins at the slowest member's clock
    unbounded = StalenessClock(2, bound=-1, timeout=1.0)
    for _ in range(100):
        unbounded.advance(0)
    assert unbounded.may_proceed(0)


def test_fuzzed_frames_during_training_change_nothing():
    X, y, blocks, exact = least_squares()
    reference_obj, reference = make_training(X, 2, staleness=0, max_iter=150)
    with ParameterServer(reference, HOST, 2) as server:
        finish(*_drop_results(start_workers(server, blocks, reference_obj.loss, 3, 150)))

    objective, training = make_training(X, 2, staleness=0, max_iter=150)
    with ParameterServer(training, HOST, 2) as server:
        # A straggler keeps training going for ~1.5 s while four fuzzers run.
        threads, _, errors = start_workers(server, blocks, objective.loss, 3, 150,
                                           delays={1: 0.01})
        sent: list = []
        fuzzers = [threading.Thread(target=fuzz, args=(server, 1.0, seed, sent))
                   for seed in range(4)]
        for f in fuzzers:
            f.start()
        for f in fuzzers:
            f.join(30)
        finish(threads, errors)
        rejected = server.rejected_frames + server.rejected_gradients
    assert len(sent) >= 50 and rejected >= len(sent) * 0.9
    np.testing.assert_array_equal(training.theta, reference.theta)


def _slow_stranger(address, stop: threading.Event, interval: float = 0.2) -> dict:
    """A client that sends one garbage byte every ``interval`` s (each read within any
    per-read timeout) and never authenticates; reports when the server closed it."""
    seen = {"closed_after": None}

    def run():
        start = time.monotonic()
        try:
            with socket.create_connection(address, timeout=30) as s:
                while not stop.is_set():
                    s.sendall(b"\x00")
                    s.settimeout(interval)
                    try:
                        if s.recv(4096) == b"" and seen["closed_after"] is None:
                            break
                    except socket.timeout:
                        pass
        except OSError:
            pass
        seen["closed_after"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    seen["thread"] = thread
    return seen


def test_a_slow_stranger_is_dropped_at_the_whole_handshake_deadline():
    """One byte every 0.2 s never trips a per-read limit; the handshake deadline (1 s
    here) closes it anyway, and it is counted."""
    X, _, _, _ = least_squares()
    _, training = make_training(X, 2)
    stop = threading.Event()
    with ParameterServer(training, HOST, 2, handshake_timeout=1.0) as server:
        stranger = _slow_stranger(server.address, stop)
        stranger["thread"].join(10)
        stop.set()
        assert stranger["closed_after"] is not None and stranger["closed_after"] < 3.0
        assert wait_until(lambda: server.refused_connections >= 1)


def test_a_flood_of_slow_strangers_cannot_keep_the_workers_out(caplog):
    """3x more slow strangers than handshake slots, held open for the whole fit: the
    workers still connect (the oldest pending stranger makes room), the fit reaches the
    solution, and the log gets a bounded number of WARNING lines."""
    X, y, blocks, exact = least_squares()
    objective, training = make_training(X, 2, schedule="cosine")
    stop = threading.Event()
    with caplog.at_level("WARNING", logger="gradspark.rpc.server"):
        with ParameterServer(training, HOST, 2, handshake_timeout=5.0,
                             max_pending=10) as server:
            strangers = [_slow_stranger(server.address, stop) for _ in range(30)]
            time.sleep(1.0)  # every handshake slot is taken by now
            threads, pushes, errors = start_workers(server, blocks, objective.loss, 3, 300)
            finish(threads, errors)
            stop.set()
            refused = server.refused_connections
        for stranger in strangers:
            stranger["thread"].join(10)
    np.testing.assert_allclose(solution(objective, training), exact, atol=1e-6)
    assert pushes == {0: 300, 1: 300}
    assert refused >= 20  # the strangers dropped to admit newer connections
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) <= 2 * 5 + 2  # a burst per 10 s window, and the summary lines


def test_driver_servers_bind_loopback_in_local_mode_and_spark_settings_elsewhere(spark):
    from pyspark import SparkConf
    from types import SimpleNamespace

    from gradspark.rpc.endpoint import driver_endpoint

    assert spark.sparkContext.master.startswith("local")
    assert driver_endpoint(spark.sparkContext) == ("127.0.0.1", "127.0.0.1")
    assert driver_endpoint(spark.sparkContext, "10.1.2.3") == ("10.1.2.3", "10.1.2.3")
    conf = SparkConf(loadDefaults=False).set("spark.driver.host", "driver.example")
    cluster = SimpleNamespace(master="spark://master.example:7077", getConf=lambda: conf)
    assert driver_endpoint(cluster) == ("driver.example", "driver.example")
    conf.set("spark.driver.bindAddress", "10.0.0.7")
    assert driver_endpoint(cluster) == ("10.0.0.7", "driver.example")
    # A server advertises the address the executors are told, and listens on the bound one.
    X, _, _, _ = least_squares()
    _, training = make_training(X, 1)
    with ParameterServer(training, "127.0.0.1", 1, advertise="localhost") as server:
        assert server.address[0] == "localhost"
        assert server._listener.getsockname()[0] == "127.0.0.1"


class _RecordedPulls(AsyncTraining):
    """The async training, remembering every weight vector it handed out."""

    sent: list

    def on_pull(self, worker):
        answer = super().on_pull(worker)
        self.sent.append(np.array(answer[3]))
        return answer


def _tapped_fit(encrypt: bool):
    X, y, blocks, _ = least_squares(workers=1)
    objective, training = make_training(X, 1, max_iter=60)
    training.__class__, training.sent = _RecordedPulls, []
    with ParameterServer(training, HOST, 1, encrypt=encrypt) as server, \
            Wiretap(server.address) as tap:
        with ParameterClient(tap.address, server.secret, 0) as client:
            assert client.encrypted == encrypt
            run_worker(client, {0: blocks[0]}, WorkerStep(objective.loss, 3, 1, 1.0, 0), 60)
    return training, bytes(tap.captured)


def test_encrypted_channels_show_a_sniffer_no_weights_and_train_identically():
    plain, plain_bytes = _tapped_fit(encrypt=False)
    sealed, sealed_bytes = _tapped_fit(encrypt=True)
    # The sniffer's reader is able to see weights: in clear it finds every pull.
    seen = [v for kind, v in plaintext_frames(plain_bytes) if kind == Kind.WEIGHTS]
    assert len(seen) == len(plain.sent) == 61
    np.testing.assert_array_equal(seen[-1], plain.sent[-1])
    assert values_seen(plain_bytes, plain.sent) > 100
    # Sealed: frames still flow (headers are clear), no number a worker pulled or
    # pushed can be read, and not one of the values sent occurs in the bytes.
    assert sealed_bytes.count(MAGIC) >= 2 * 61
    assert plaintext_frames(sealed_bytes) == []
    assert values_seen(sealed_bytes, sealed.sent) == 0
    # Encryption changes nothing but the bytes: the same fit, bit for bit.
    np.testing.assert_array_equal(sealed.theta, plain.theta)
    assert len(sealed.sent) == len(plain.sent)


def test_a_tampered_sealed_frame_is_rejected_and_the_plaintext_downgrade_refused():
    X, y, blocks, _ = least_squares()
    objective, training = make_training(X, 2)
    with ParameterServer(training, HOST, 2, encrypt=True) as server:
        client = ParameterClient(server.address, server.secret, 0)
        channel = client.channel
        header = HEADER.pack(MAGIC, VERSION, int(Kind.PULL), 0, 0)
        sealed = bytearray(channel._seal.encrypt(bytes(4) + channel.sent.to_bytes(8, "big"),
                                                 b"", channel.context + header))
        sealed[3] ^= 0x10
        client.sock.sendall(header + bytes(sealed))
        assert _closed_without_answer(client.sock)  # no WEIGHTS
        client.close()
        # A frame tagged the plaintext way (HMAC) on an encrypted session is refused too.
        client = ParameterClient(server.address, server.secret, 1)
        channel = client.channel
        client.sock.sendall(header + tag(channel.key, channel.context, channel.sent, header,
                                         b""))
        assert _closed_without_answer(client.sock)
        client.close()
        assert wait_until(lambda: server.rejected_frames == 2), server.rejected_frames
    assert training.version == 0 and np.all(training.theta == objective.initial())


def _closed_without_answer(sock) -> bool:
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:  # closed with our unread bytes still queued
        return True


def test_channels_follow_sparks_encryption_settings(spark, caplog):
    from pyspark import SparkConf
    from types import SimpleNamespace

    from gradspark.rpc import security

    def context(**settings):
        conf = SparkConf(loadDefaults=False)
        for key, value in settings.items():
            conf.set(key.replace("_", "."), value)
        return SimpleNamespace(_conf=conf)  # what spark_encrypts reads of a SparkContext

    assert not security.spark_encrypts(spark.sparkContext)
    assert security.spark_encrypts(context(spark_authenticate="true",
                                           spark_network_crypto_enabled="true"))
    assert security.spark_encrypts(context(spark_ssl_enabled="true"))
    assert security.spark_encrypts(context(spark_ssl_rpc_enabled="true"))
    assert security.spark_encrypts(context(spark_authenticate_enableSaslEncryption="true"))
    assert not security.spark_encrypts(context(spark_network_crypto_enabled="false"))
    assert security.spark_encrypts(context(**{"spark_gradspark_network_crypto_enabled":
                                              "true"}))
    assert not security.spark_encrypts(context(spark_ssl_enabled="true", **{
        "spark_gradspark_network_crypto_enabled": "false"}))
    with pytest.raises(ValueError, match="spark.gradspark.network.crypto.enabled"):
        security.spark_encrypts(context(**{"spark_gradspark_network_crypto_enabled": "yes"}))
    # A plaintext server on a network address says so once; loopback stays quiet.
    security._warned.clear()
    X, _, _, _ = least_squares()
    network = [a for a in _local_addresses() if not a.startswith("127.")]
    with caplog.at_level("WARNING", logger="gradspark.rpc.security"):
        for host in ["127.0.0.1"] + network[:1] * 2:
            _, training = make_training(X, 1)
            ParameterServer(training, host, 1).close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "gradspark.rpc.security"]
    assert len(warnings) == (1 if network else 0), warnings
    assert all("not encrypted" in w and "spark.network.crypto.enabled" in w for w in warnings)


def _local_addresses():
    import subprocess

    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout
    return out.split()


class _GivesUp:
    """A handler whose pull waits out its deadline, as the sharded coordinator's does when
    a worker it waits for never comes."""

    vector_size = 3

    def on_hello(self, worker, attempt):
        return 0

    def on_pull(self, worker):
        raise TimeoutError("worker 0 waited 1 s (workerTimeout) for workers [1] behind it")

    def on_disconnect(self, worker):
        pass


def test_a_handler_that_gives_up_tells_the_worker_why_and_sockets_keep_alive(caplog):
    with ParameterServer(_GivesUp(), HOST, 2) as server:
        with ParameterClient(server.address, server.secret, 0) as client:
            # A vanished peer breaks the connection (keepalive) instead of a read for ever.
            assert client.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            with pytest.raises(ProtocolError, match=r"TimeoutError: worker 0 waited .* \[1\]"):
                client.pull()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("worker 0" in e and "workerTimeout" in e for e in errors), errors
    assert server.rejected_frames == 0  # not mistaken for a stranger's handshake timeout


class _ClosesWhenAllAreDone:
    """A sharded fit's shard: its host task closes the server as soon as every worker has
    said done (``ShardTraining.wait_finished``), from another thread."""

    vector_size = 3

    def __init__(self) -> None:
        self.server = None
        self.closer = None

    def on_hello(self, worker, attempt):
        return 0

    def on_done(self, worker):
        self.closer = threading.Thread(target=self.server.close)
        self.closer.start()
        self.closer.join()  # the host closed its server before this handler went on

    def on_disconnect(self, worker):
        pass


def test_a_worker_is_done_even_when_the_server_closes_on_its_done():
    """A worker that said DONE finishes cleanly even when the server closes the moment it
    learns every worker is done: a shard's host did, and the last worker's task failed on
    the closed connection, so Spark reran the whole barrier stage from its checkpoint."""
    handler = _ClosesWhenAllAreDone()
    with ParameterServer(handler, HOST, 1) as server:
        handler.server = server
        with ParameterClient(server.address, server.secret, 0) as client:
            client.done()  # raised EOFError("connection closed") before the fix
    assert handler.closer is not None and server.closed
