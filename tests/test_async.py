"""mode='async' on the shared local[2] session: parity with sync, staleness, robustness."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest

from conftest import gradspark_cached_rdds, wait_until
from ps_fuzz import fuzz
from gradspark import SGDLinearRegression, SGDLogisticRegression
from gradspark.testing.faults import ENVIRONMENT_VARIABLE
from gradspark.rpc import ParameterClient, running_servers
from gradspark.rpc.wire import Kind

LOOPBACK = dict(parameterServerHost="127.0.0.1")
ADAM = dict(optimizer="adam", stepSize=0.05, tol=0.0, regParam=0.01)


def log_loss(model, X, y, w):
    m = X @ model.coefficients.toArray() + model.intercept
    return float(w @ (np.logaddexp(0, m) - y * m) / w.sum())


def coefficients(model):
    return np.r_[model.coefficients.toArray(), model.intercept]


def test_bulk_synchronous_async_is_sync(classification_data, regression_data):
    df, *_ = classification_data
    params = dict(ADAM, maxIter=30, elasticNetParam=0.3, weightCol="weight")
    sync = SGDLogisticRegression(**params).fit(df)
    bsp = SGDLogisticRegression(mode="async", maxStaleness=0, **LOOPBACK, **params).fit(df)
    np.testing.assert_array_equal(coefficients(bsp), coefficients(sync))
    assert bsp.summary.objectiveHistory == sync.summary.objectiveHistory
    extra = bsp.summary.extra
    assert extra["maxStaleness"] == 0 and extra["maxUpdateDelay"] == 0
    assert extra["updatesApplied"] == 30 and extra["workerUpdates"] == [30, 30]

    # Huber's jointly fitted scale travels through the server too.
    rdf, *_ = regression_data
    params = dict(optimizer="sgd", stepSize=0.2, momentum=0.5, maxIter=25, tol=0.0,
                  loss="huber", labelCol="noisy")
    sync = SGDLinearRegression(**params).fit(rdf)
    bsp = SGDLinearRegression(mode="async", maxStaleness=0, **LOOPBACK, **params).fit(rdf)
    np.testing.assert_array_equal(coefficients(bsp), coefficients(sync))
    assert bsp.scale == sync.scale


def test_async_reaches_the_sync_loss_on_the_same_budget(classification_data):
    df, X, y, _, w = classification_data
    params = dict(ADAM, maxIter=150, weightCol="weight")
    sync = SGDLogisticRegression(**params).fit(df)
    stale = SGDLogisticRegression(mode="async", maxStaleness=2, **LOOPBACK, **params).fit(df)
    assert log_loss(stale, X, y, w) <= 1.01 * log_loss(sync, X, y, w)
    extra = stale.summary.extra
    assert extra["maxStaleness"] <= 2
    assert extra["updatesApplied"] == extra["gradientsAccepted"] == 300
    assert len(stale.summary.objectiveHistory) == 150


def test_staleness_stays_within_the_bound_with_a_straggler(classification_data, monkeypatch):
    df, X, y, _, w = classification_data
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, json.dumps({"slow_partition": 1,
                                                         "slow_seconds": 0.02}))
    params = dict(ADAM, maxIter=40, **LOOPBACK, mode="async")
    bounded = SGDLogisticRegression(maxStaleness=1, **params).fit(df)
    unbounded = SGDLogisticRegression(maxStaleness=-1, **params).fit(df)
    assert bounded.summary.extra["maxStaleness"] == 1  # ran ahead as far as allowed, no further
    assert unbounded.summary.extra["maxStaleness"] > 1  # the bound is what held it back
    for model in (bounded, unbounded):
        assert np.all(np.isfinite(coefficients(model)))
        assert model.summary.extra["workerUpdates"] == [40, 40]


def test_async_param_errors(classification_data):
    df, *_ = classification_data
    with pytest.raises(ValueError, match="first-order optimizer"):
        SGDLogisticRegression(mode="async").fit(df)
    with pytest.raises(ValueError, match="maxStaleness"):
        SGDLogisticRegression(mode="async", optimizer="sgd", maxStaleness=-2).fit(df)
    with pytest.raises(ValueError, match="workerTimeout"):
        SGDLogisticRegression(mode="async", optimizer="sgd", workerTimeout=0).fit(df)


def _fit_server(seconds: float = 60.0):
    """The running fit's parameter server, once it is up (None if none comes)."""
    wait_until(running_servers, seconds)
    servers = running_servers()
    return servers[0] if servers else None


def _attack(found: list) -> None:
    """Wait for the fit's server, then throw bad frames and a wrong-length gradient at it."""
    server = _fit_server()
    found.append(server)
    for junk in (b"\x00" * 64, b"GSPS\x01\x02\x00\x00\xff\xff\xff\xff"):
        with socket.create_connection(server.address, timeout=5) as s:
            s.recv(1024)
            s.sendall(junk)
            try:
                s.recv(1024)  # returns (or resets) once the server has hung up
            except ConnectionResetError:
                pass
    intruder = ParameterClient(server.address, server.secret, 0)
    intruder.channel.send(Kind.PUSH, (0, 0, 1.0, 1.0, 1), np.ones(3))
    intruder.close()


def _undisturbed_then_slowed(df, monkeypatch, max_iter: int, slow_seconds: float):
    """(params, reference model): the reference fit runs first; later fits get a
    straggler, which keeps them running during an attack and changes no arithmetic."""
    params = dict(ADAM, maxIter=max_iter, mode="async", maxStaleness=0, **LOOPBACK)
    reference = SGDLogisticRegression(**params).fit(df)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, json.dumps({"slow_partition": 0,
                                                         "slow_seconds": slow_seconds}))
    return params, reference


def test_hostile_frames_during_a_fit_change_nothing(classification_data, monkeypatch):
    df, *_ = classification_data
    params, reference = _undisturbed_then_slowed(df, monkeypatch, 30, 0.03)
    found: list = []
    attacker = threading.Thread(target=_attack, args=(found,))
    attacker.start()
    attacked = SGDLogisticRegression(**params).fit(df)
    attacker.join(30)
    np.testing.assert_array_equal(coefficients(attacked), coefficients(reference))
    assert attacked.summary.extra["framesRejected"] == 2
    assert attacked.summary.extra["gradientsRejected"] == 1
    assert found and found[0].closed


def _ps_threads() -> list:
    return [t.name for t in threading.enumerate() if t.name.startswith("gradspark-ps")]


def test_nothing_is_left_behind_after_success_or_failure(spark, classification_data,
                                                         monkeypatch):
    df, *_ = classification_data
    SGDLogisticRegression(**ADAM, maxIter=5, mode="async", **LOOPBACK).fit(df)
    assert not running_servers() and not _ps_threads() and not gradspark_cached_rdds(spark)

    # local[2] does not retry tasks, so an injected task failure fails the fit.
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, json.dumps({"fail_partition": 1, "fail_step": 2}))
    with pytest.raises(Exception, match="injected failure"):
        SGDLogisticRegression(**ADAM, maxIter=5, mode="async", **LOOPBACK).fit(df)
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    with pytest.raises(FloatingPointError):
        SGDLogisticRegression(optimizer="sgd", stepSize=1e308, maxIter=20, mode="async",
                              **LOOPBACK).fit(df)
    wait_until(lambda: not running_servers() and not _ps_threads())
    assert not running_servers() and not _ps_threads() and not gradspark_cached_rdds(spark)


def test_async_resumes_from_its_checkpoints(classification_data, tmp_path):
    df, X, y, _, w = classification_data
    params = dict(ADAM, mode="async", **LOOPBACK, checkpointInterval=5)
    whole = SGDLogisticRegression(maxIter=40, maxStaleness=0, **params).fit(df)
    first = SGDLogisticRegression(maxIter=20, maxStaleness=0, checkpointDir=str(tmp_path / "a"),
                                  **params).fit(df)
    resumed = SGDLogisticRegression(maxIter=40, maxStaleness=0,
                                    checkpointDir=str(tmp_path / "a"), **params).fit(df)
    assert resumed.summary.extra["resumedFromStep"] == 20
    np.testing.assert_array_equal(coefficients(resumed), coefficients(whole))
    assert log_loss(resumed, X, y, w) < log_loss(first, X, y, w)

    # With staleness a resumed fit is not bit-identical, but it continues, not restarts.
    # (A small step, so that 20 steps are far from the optimum and the fall is clear.)
    stale = dict(params, maxStaleness=2, stepSize=0.01, checkpointDir=str(tmp_path / "b"))
    first = SGDLogisticRegression(maxIter=20, **stale).fit(df)
    resumed = SGDLogisticRegression(maxIter=40, **stale).fit(df)
    history = resumed.summary.objectiveHistory
    assert resumed.summary.extra["resumedFromStep"] == 20 and len(history) == 40
    assert history[:20] == first.summary.objectiveHistory
    # The objective (with its L2 term) keeps falling after the resume.
    assert history[-1] < history[19]


def test_a_fit_under_fuzzing_gives_the_undisturbed_result(classification_data, monkeypatch):
    # Four fuzzers throw random bytes, plausible headers and tampered authenticated
    # frames at the fit's server for as long as it runs; the weights must not move.
    df, *_ = classification_data
    params, reference = _undisturbed_then_slowed(df, monkeypatch, 40, 0.05)
    sent: list = []

    def attack(seed: int) -> None:
        server = _fit_server()
        if server is not None:
            fuzz(server, 30.0, seed, sent)  # stops when the server closes

    fuzzers = [threading.Thread(target=attack, args=(seed,)) for seed in range(4)]
    for f in fuzzers:
        f.start()
    attacked = SGDLogisticRegression(**params).fit(df)
    for f in fuzzers:
        f.join(60)
    np.testing.assert_array_equal(coefficients(attacked), coefficients(reference))
    rejected = attacked.summary.extra["framesRejected"] + attacked.summary.extra[
        "gradientsRejected"]
    print(f"\nfuzzed frames sent during the fit: {len(sent)}, rejected: {rejected}")
    assert len(sent) >= 50 and rejected >= 0.9 * len(sent)
