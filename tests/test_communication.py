"""Communication levers: compression (with error feedback), sparse messages, local SGD,
a worker quorum for stragglers, and the traffic each fit records.

The compressors and the wire format are checked against numpy; the training
levers on the shared local[2] session against the uncompressed sync fit on
the same data and budget, and against plain SGD where local SGD must equal it.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

from gradspark import SGDLinearRegression, SGDLogisticRegression
from gradspark.comm.compression import (
    Compression, ErrorFeedback, encode_exact, encode_fp16, encode_topk,
)
from gradspark.testing.faults import ENVIRONMENT_VARIABLE
from gradspark.rpc.wire import (FIELDS, HEADER, SESSION_TAG_SIZE, Channel, Kind,
                                 ProtocolError)
from conftest import make_df

LOOPBACK = dict(parameterServerHost="127.0.0.1")
PUSH_OVERHEAD = HEADER.size + FIELDS[Kind.PUSH].size + SESSION_TAG_SIZE  # around the array


# -- compressors -----------------------------------------------------------------------


def test_exact_is_lossless_and_sparse_when_smaller():
    g = np.random.default_rng(0)
    dense = g.normal(size=50)
    sparse = np.zeros(1000)
    sparse[[3, 70, 999]] = [1.5, -2.0, 1e-300]
    for vector in (dense, sparse):
        message = encode_exact(vector)
        assert np.array_equal(message.decode(), vector)
    assert encode_exact(dense).indices is None and encode_exact(dense).nbytes == 8 * 50
    assert encode_exact(sparse).indices.tolist() == [3, 70, 999]
    assert encode_exact(sparse).nbytes == 3 * 12


def test_fp16_keeps_three_digits_of_the_largest_value_at_any_scale():
    g = np.random.default_rng(1)
    for magnitude in (1e-6, 1.0, 1e9):  # sums of many rows overflow plain float16 (65504)
        vector = g.normal(size=200) * magnitude
        message = encode_fp16(vector)
        assert message.values.dtype == np.float16 and message.nbytes == 8 + 2 * 200
        assert np.log2(message.scale) == int(np.log2(message.scale))  # a power of two
        error = np.abs(message.decode() - vector).max()
        assert error <= np.abs(vector).max() * 2.0 ** -11


def test_topk_sends_the_largest_magnitudes():
    g = np.random.default_rng(2)
    vector = g.normal(size=1000)
    message = encode_topk(vector, 0.01)
    expected = np.sort(np.argsort(-np.abs(vector))[:10])
    assert message.indices.tolist() == expected.tolist() and message.nbytes == 10 * 8
    np.testing.assert_allclose(message.decode()[expected], vector[expected], rtol=1e-7)


def test_non_finite_vectors_go_exact_so_divergence_is_reported():
    vector = np.array([1.0, np.inf, 2.0, 3.0, 4.0, 5.0])
    for message in (encode_fp16(vector), encode_topk(vector, 0.2)):
        assert message.lossless and np.array_equal(message.decode(), vector)


@pytest.mark.parametrize("name", ["fp16", "topk"])
def test_error_feedback_loses_nothing_only_delays_it(name):
    """Sum of what was sent plus the residual equals the sum of the inputs."""
    g = np.random.default_rng(3)
    compress = Compression(name, ratio=0.05).new()
    assert isinstance(compress, ErrorFeedback)
    inputs = [g.normal(size=300) * 10.0 ** g.integers(-3, 3) for _ in range(40)]
    sent = sum(compress(v).decode() for v in inputs)
    np.testing.assert_allclose(sent + compress.residual, sum(inputs), rtol=0, atol=1e-9)


def test_compression_params_are_checked():
    with pytest.raises(ValueError, match="compression must be one of"):
        Compression("zip")
    with pytest.raises(ValueError, match="compressionRatio"):
        Compression("topk", ratio=0.0)


# -- the wire ---------------------------------------------------------------------------


def _pair():
    """A worker's channel and the server's, past the handshake (GMAC-tagged frames)."""
    a, b = socket.socketpair()
    key = b"k" * 32
    worker, server = Channel(a, key, 1 << 20), Channel(b, key, 1 << 20)
    worker.authenticate(server=False)
    server.authenticate(server=True)
    return worker, server


def test_encoded_frames_round_trip_and_are_counted():
    sender, receiver = _pair()
    g = np.random.default_rng(4)
    vector = g.normal(size=400)
    vector[g.random(400) < 0.9] = 0.0
    for message in (encode_exact(vector), encode_fp16(vector), encode_topk(vector, 0.05),
                    encode_exact(g.normal(size=7))):
        sender.send(Kind.PUSH, (1, 2, 0.5, 3.0, 4), message)
        received = receiver.recv()
        np.testing.assert_array_equal(received.vector(message.size), message.decode())
        assert receiver.last_received_bytes == PUSH_OVERHEAD + message.nbytes
    assert sender.bytes_sent == receiver.bytes_received


def test_malformed_sparse_and_float16_arrays_are_refused():
    sender, receiver = _pair()
    good = encode_topk(np.arange(100.0), 0.05)
    sender.send(Kind.PUSH, (1, 2, 0.5, 3.0, 4), good)
    with pytest.raises(ProtocolError, match="indices"):
        receiver.recv().vector(90)  # an index past the vector
    backwards = type(good)(100, good.values, good.indices[::-1].copy())
    sender.send(Kind.PUSH, (1, 2, 0.5, 3.0, 4), backwards)
    with pytest.raises(ProtocolError, match="increasing"):
        receiver.recv().vector(100)
    sender.send(Kind.PUSH, (1, 2, 0.5, 3.0, 4), encode_fp16(np.ones(10) * 3))
    with pytest.raises(ProtocolError, match="length"):
        receiver.recv().vector(11)
    bad_scale = type(good)(10, np.ones(10, dtype=np.float16), scale=-1.0)
    sender.send(Kind.PUSH, (1, 2, 0.5, 3.0, 4), bad_scale)
    with pytest.raises(ProtocolError, match="scale"):
        receiver.recv()


# -- training ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wide_data(spark):
    """Dense logistic data, 100 features on different scales and offsets, two partitions."""
    g = np.random.default_rng(5)
    n, d = 1000, 100
    X = g.normal(size=(n, d)) * g.uniform(0.5, 3, size=d) + g.normal(size=d)
    y = ((X - X.mean(0)) / X.std(0) @ (g.normal(size=d) / 10) + g.logistic(size=n) > 0)
    return make_df(spark, X, {"label": y.astype(float)}), X, y.astype(float)


def log_loss(model, X, y):
    z = X @ model.coefficients.toArray() + model.intercept
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


# A step size at which the uncompressed fit has converged within the budget. At 0.5 top-k
# (1%) is still 6% above it after 300 steps: error feedback delays the coordinates it
# holds back, which acts like a larger step (see docs/guide.md, Communication).
SGD = dict(optimizer="sgd", stepSize=0.1, tol=0.0, regParam=0.01, **LOOPBACK)


def test_every_message_is_counted_at_its_encoded_size(classification_data):
    """Dense data: 5 features + intercept = 6 values per gradient, so the frame sizes are
    known exactly: 8 bytes a value exact, a float64 scale + 2 a value for fp16, and one
    (uint32, float32) pair for top-k's ceil(0.01 * 6) = 1 value."""
    df, *_ = classification_data
    steps, workers, size = 12, 2, 6
    expected = {"none": 8 * size, "fp16": 8 + 2 * size, "topk": 8}
    for compression, array_bytes in expected.items():
        for mode in ("sync", "async"):
            extra = SGDLogisticRegression(maxIter=steps, compression=compression, mode=mode,
                                          maxStaleness=0, **SGD).fit(df).summary.extra
            assert extra["compression"] == compression
            assert extra["gradientMessages"] == steps * workers
            assert extra["meanGradientBytes"] == PUSH_OVERHEAD + array_bytes
            assert extra["gradientBytes"] == steps * workers * (PUSH_OVERHEAD + array_bytes)
            # Everything else the driver received: handshakes, pulls and the final DONE.
            assert extra["bytesReceived"] > extra["gradientBytes"]
            assert extra["bytesReceivedPerStep"] == pytest.approx(extra["bytesReceived"] / steps)
            # The weights go out exact: 6 float64 per worker per step at least.
            assert extra["bytesSentPerStep"] > workers * 8 * size


@pytest.mark.parametrize("compression", ["fp16", "topk"])
def test_compressed_training_reaches_the_uncompressed_loss(wide_data, compression):
    df, X, y = wide_data
    budget = dict(maxIter=300, **SGD)
    exact = log_loss(SGDLogisticRegression(**budget).fit(df), X, y)
    model = SGDLogisticRegression(compression=compression, compressionRatio=0.01,
                                  **budget).fit(df)
    assert log_loss(model, X, y) <= 1.01 * exact
    if compression == "topk":
        # Without error feedback the same top-k stalls far from it.
        stalled = SGDLogisticRegression(compression="topk", compressionRatio=0.01,
                                        errorFeedback=False, **budget).fit(df)
        assert log_loss(stalled, X, y) > 1.05 * exact


def test_job_per_step_sends_fp16_partition_sums(wide_data):
    """A job per step keeps no residual: fp16 partition sums without error feedback."""
    df, X, y = wide_data
    budget = dict(maxIter=100, executionStrategy="jobPerStep", engine="python", **SGD)
    exact = SGDLogisticRegression(**budget).fit(df)
    half = SGDLogisticRegression(compression="fp16", **budget).fit(df)
    assert log_loss(half, X, y) <= 1.01 * log_loss(exact, X, y)
    assert not np.array_equal(half.coefficients.toArray(), exact.coefficients.toArray())
    # The divergence check's objective is numpy's: a partition's loss sum travels as a
    # float64 scalar even when its gradient goes as fp16.
    scaled = half.coefficients.toArray() * X.std(axis=0, ddof=1)
    objective = log_loss(half, X, y) + 0.01 / 2 * scaled @ scaled
    assert half.summary.extra["finalObjective"] == pytest.approx(objective, rel=1e-12)
    # 101 values: 808 bytes exact, a float64 scale + 202 in float16; 24 for the scalars.
    assert exact.summary.extra["meanGradientBytes"] == 808 + 24
    assert half.summary.extra["meanGradientBytes"] == 8 + 202 + 24
    # The broadcast weights: 100 coefficients and an intercept, once per step.
    assert exact.summary.extra["bytesSentPerStep"] == 808
    assert exact.summary.extra["gradientMessages"] == 2 * 100


def test_jvm_job_per_step_counts_the_arrays_numpy_counts(wide_data):
    """Both job-per-step engines move the same arrays, uncompressed: the weights once a
    step, and each of the two partitions' sums with their three scalars."""
    df, *_ = wide_data
    budget = dict(maxIter=20, executionStrategy="jobPerStep", **SGD)
    numpy_fit = SGDLogisticRegression(engine="python", **budget).fit(df)
    jvm_fit = SGDLogisticRegression(engine="jvm", **budget).fit(df)
    jvm, numpy_ = jvm_fit.summary.extra, numpy_fit.summary.extra
    counted = ("bytesSent", "bytesReceived", "messagesSent", "messagesReceived",
               "gradientMessages", "gradientBytes", "compression")
    assert {key: jvm[key] for key in counted} == {key: numpy_[key] for key in counted}
    # 100 coefficients and an intercept: 808 bytes each way, 24 for the scalars.
    assert jvm["bytesSentPerStep"] == 808 and jvm["meanGradientBytes"] == 808 + 24
    assert jvm["gradientMessages"] == 2 * 20


def test_local_sgd_on_one_worker_is_plain_sgd(spark, regression_data):
    """One worker: k local steps then averaging one model is k ordinary steps, with the
    schedule of the global step, L2, weights, an intercept and standardization."""
    df, *_ = regression_data
    one = df.coalesce(1)
    params = dict(optimizer="sgd", stepSize=0.05, learningRateSchedule="inverse_sqrt",
                  maxIter=22, tol=0.0, regParam=0.1, weightCol="weight", **LOOPBACK)
    sync = SGDLinearRegression(**params).fit(one)
    local = SGDLinearRegression(localSteps=4, **params).fit(one)
    np.testing.assert_allclose(local.coefficients.toArray(), sync.coefficients.toArray(),
                               rtol=1e-9)
    assert local.intercept == pytest.approx(sync.intercept, rel=1e-9)
    extra = local.summary.extra
    assert extra["localSteps"] == 4 and extra["averagingRounds"] == 6  # 4+4+4+4+4+2
    assert local.summary.totalIterations == 22
    # One loss per round: the loss at the round's starting weights, as sync recorded it.
    np.testing.assert_allclose(local.summary.objectiveHistory,
                               sync.summary.objectiveHistory[::4], rtol=1e-9)
    # A round of 4 steps is one exchange: a quarter of sync's bytes per step.
    assert extra["gradientMessages"] == 6


def test_local_sgd_with_two_workers_stays_close_to_sync(wide_data):
    df, X, y = wide_data
    budget = dict(maxIter=300, **SGD)
    exact = log_loss(SGDLogisticRegression(**budget).fit(df), X, y)
    local = SGDLogisticRegression(localSteps=4, **budget).fit(df)
    assert log_loss(local, X, y) <= 1.02 * exact
    assert local.summary.extra["gradientMessages"] == 2 * 75


def test_a_quorum_leaves_a_straggler_behind(wide_data, monkeypatch):
    df, X, y = wide_data
    budget = dict(maxIter=60, **SGD)
    exact = SGDLogisticRegression(**budget).fit(df)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, json.dumps({"slow_partition": 1,
                                                         "slow_seconds": 0.05}))
    model = SGDLogisticRegression(workerQuorum=0.5, **budget).fit(df)
    extra = model.summary.extra
    assert extra["quorumWorkers"] == 1
    fast, slow = extra["workerAnswersUsed"]
    # Every step used at least one answer (both, when the driver woke late); the
    # straggler's came too late nearly always.
    assert fast + slow >= 60 and slow < fast and extra["lateAnswersDropped"] >= 1
    # Trained on (mostly) half the rows: close to, but not, the full-batch model.
    assert log_loss(model, X, y) < 1.2 * log_loss(exact, X, y)
    assert not np.allclose(model.coefficients.toArray(), exact.coefficients.toArray())


@pytest.mark.parametrize("params, message", [
    (dict(compression="topk", engine="jvm", optimizer="sgd"), "long-running workers"),
    (dict(localSteps=4, executionStrategy="jobPerStep", optimizer="sgd"),
     "long-running workers"),
    (dict(compression="fp16", executionStrategy="jobPerStep", optimizer="sgd"),
     "engine='python'"),
    (dict(localSteps=4), "first-order optimizer"),  # lbfgs, the default
    (dict(workerQuorum=0.5, optimizer="sgd", aggregationTopology="tree"), "star"),
    (dict(localSteps=2, optimizer="sgd", mode="async"), "sync-mode levers"),
    (dict(localSteps=0, optimizer="sgd"), "localSteps must be >= 1"),
    (dict(workerQuorum=0.0, optimizer="sgd"), "workerQuorum must be in"),
    (dict(compression="topk", compressionRatio=1.5, optimizer="sgd"), "compressionRatio"),
])
def test_communication_params_are_checked(classification_data, params, message):
    df, *_ = classification_data
    with pytest.raises(ValueError, match=message):
        SGDLogisticRegression(**params).fit(df)


def test_local_sgd_resumes_exactly_from_its_checkpoints(classification_data, tmp_path):
    df, *_ = classification_data
    params = dict(optimizer="sgd", stepSize=0.3, miniBatchFraction=0.5, tol=0.0, localSteps=4,
                  checkpointInterval=4, weightCol="weight", **LOOPBACK)
    whole = SGDLogisticRegression(maxIter=24, **params).fit(df)
    SGDLogisticRegression(maxIter=12, checkpointDir=str(tmp_path), **params).fit(df)
    resumed = SGDLogisticRegression(maxIter=24, checkpointDir=str(tmp_path), **params).fit(df)
    assert resumed.summary.extra["resumedFromStep"] == 12
    # The local steps keep no state: the resumed rounds are the uninterrupted ones.
    np.testing.assert_array_equal(resumed.coefficients.toArray(), whole.coefficients.toArray())
    assert resumed.summary.objectiveHistory == whole.summary.objectiveHistory
