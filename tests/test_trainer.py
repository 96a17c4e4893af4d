"""The distributed objective's gradient, tree aggregation, progress and logging, and the
driver's BLAS threads while it trains."""

import io
import logging
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from conftest import gradspark_cached_rdds
from gradspark import SGDLogisticRegression
from gradspark.data.blocks import CLASS_INDEX, REAL
from gradspark.data.dataset import NumpyTrainingData
from gradspark.engine import PythonGradientEngine
from gradspark.estimators.base import regularization_vectors
from gradspark.losses import HuberLoss, MultinomialLogisticLoss
from gradspark.trainer import LinearObjective
from gradspark.fit.driver_blas import single_threaded_blas
from gradspark.integrations.progress import Progress


def _objective(data, loss, k, fit_intercept, depth=2, fraction=1.0):
    stats = data.statistics
    obj = LinearObjective(
        engine=PythonGradientEngine(data.blocks, loss, depth), loss=loss,
        num_features=data.num_features, num_outputs=k, fit_intercept=fit_intercept,
        features_mean=stats.features.mean, features_std=stats.features_std,
        l2=np.zeros(0), l1=np.zeros(0), mini_batch_fraction=fraction, seed=5,
    )
    obj.l2, obj.l1 = regularization_vectors(obj, 0.1, 0.0, False)
    return obj


@pytest.mark.parametrize("loss,k,label,domain", [
    (MultinomialLogisticLoss(), 3, "multi", CLASS_INDEX),
    (HuberLoss(), 1, "label", REAL),
])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_distributed_gradient_matches_finite_differences(classification_data, loss, k, label,
                                                         domain, fit_intercept):
    df = classification_data[0]
    with NumpyTrainingData(df, "features", label, "weight", domain, 64, 2) as data:
        obj = _objective(data, loss, k, fit_intercept)
        theta = np.random.default_rng(0).normal(scale=0.3, size=obj.size)
        if loss.num_aux:
            theta[-1] = 1.7
        value, grad = obj.smooth(theta)
        h = 1e-6
        numeric = np.array([
            (obj.smooth(theta + h * e)[0] - obj.smooth(theta - h * e)[0]) / (2 * h)
            for e in np.eye(obj.size)
        ])
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


def test_statistics_and_aggregation_depths_agree_with_numpy(classification_data):
    df, X, _, multi, w = classification_data
    with NumpyTrainingData(df, "features", "multi", "weight", CLASS_INDEX, 50, 3) as data:
        stats = data.statistics
        W = w.sum()
        mean = w @ X / W
        std = np.sqrt(w @ (X - mean) ** 2 / (W - w @ w / W))  # MLlib's unbiased weighted std
        np.testing.assert_allclose(stats.features.mean, mean, rtol=1e-12)
        np.testing.assert_allclose(stats.features_std, std, rtol=1e-10)
        np.testing.assert_allclose(stats.class_weights, np.bincount(multi.astype(int), weights=w))
        assert stats.count == len(X)
        theta = np.random.default_rng(1).normal(size=_objective(data, MultinomialLogisticLoss(), 3,
                                                                True).size)
        results = [_objective(data, MultinomialLogisticLoss(), 3, True, depth).smooth(theta)
                   for depth in (1, 2, 4)]
    for value, grad in results[1:]:
        assert value == pytest.approx(results[0][0], rel=1e-12)
        np.testing.assert_allclose(grad, results[0][1], rtol=1e-10, atol=1e-14)


def test_mini_batch_samples_the_requested_fraction(classification_data):
    df = classification_data[0]
    with NumpyTrainingData(df, "features", "multi", None, CLASS_INDEX, 64, 2) as data:
        engine = PythonGradientEngine(data.blocks, MultinomialLogisticLoss())
        coef, offset = np.zeros((5, 3)), np.zeros(3)
        counts = [engine.gradient_sums(coef, offset, np.zeros(0), 0.25, 9, s).count
                  for s in range(6)]
        again = engine.gradient_sums(coef, offset, np.zeros(0), 0.25, 9, 0).count
    n = data.statistics.count
    assert again == counts[0]
    assert len(set(counts)) > 1  # each step draws a new sample
    assert abs(np.mean(counts) / n - 0.25) < 0.05


def test_training_logs_each_step_and_keeps_history(classification_data, caplog):
    df = classification_data[0]
    with caplog.at_level(logging.INFO, logger="gradspark.trainer"):
        model = SGDLogisticRegression(optimizer="sgd", stepSize=0.5, maxIter=12, tol=0.0).fit(df)
    steps = [r for r in caplog.records if " step " in r.getMessage()]
    assert len(steps) == 12 == len(model.summary.objectiveHistory)
    logged = [float(r.getMessage().rsplit("loss ", 1)[1]) for r in steps]
    np.testing.assert_allclose(logged, model.summary.objectiveHistory, rtol=1e-9)
    assert all(b <= a for a, b in zip(logged, logged[1:]))  # full-batch GD descends


def test_fit_releases_its_cached_blocks(spark, classification_data):
    df = classification_data[0]
    SGDLogisticRegression(maxIter=5).fit(df)
    assert gradspark_cached_rdds(spark) == []


def _blas_threads():
    return sorted({pool["num_threads"] for pool in threadpool_info()
                   if pool["user_api"] == "blas"})


class _StepThreads(logging.Handler):
    """Records the driver's BLAS threads each time a step's loss is logged."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.seen = []

    def emit(self, record):
        if " step " in record.getMessage():
            self.seen.append(_blas_threads())


def _process_blas_threads():
    """The BLAS threads this process has on its own (the fits must give them back)."""
    threads = _blas_threads()
    if threads == [1]:
        pytest.skip("BLAS runs on one thread here already: nothing to limit or restore")
    return threads


def test_the_driver_trains_with_one_blas_thread_and_restores_its_own(classification_data):
    df = classification_data[0]
    own = _process_blas_threads()
    handler = _StepThreads()
    trainer = logging.getLogger("gradspark.trainer")
    trainer.addHandler(handler)
    previous = trainer.level
    trainer.setLevel(logging.INFO)
    try:
        SGDLogisticRegression(maxIter=3).fit(df)
    finally:
        trainer.removeHandler(handler)
        trainer.setLevel(previous)
    assert handler.seen and all(threads == [1] for threads in handler.seen)
    assert _blas_threads() == own


def test_fits_in_threads_leave_the_process_blas_threads_as_they_were(classification_data):
    own = _process_blas_threads()
    first_in, second_in, checked = threading.Event(), threading.Event(), threading.Event()
    inside = []

    def fit(enter, wait_for):
        with single_threaded_blas():
            enter.set()
            wait_for.wait(10)
            inside.append(_blas_threads())

    first = threading.Thread(target=fit, args=(first_in, second_in))
    first.start()
    assert first_in.wait(10)
    second = threading.Thread(target=fit, args=(second_in, checked))  # ends last
    second.start()
    first.join(10)
    checked.set()
    second.join(10)
    assert inside == [own, own]  # overlapping fits off the main thread do not limit
    assert _blas_threads() == own
    # ... and leave no thread in control: a fit on the main thread still limits
    test_the_driver_trains_with_one_blas_thread_and_restores_its_own(classification_data)


class _Console(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_bar_only_on_a_terminal():
    tty, pipe = _Console(True), _Console(False)
    for stream in (tty, pipe):
        bar = Progress(4, "fit", stream=stream)
        for i in range(1, 5):
            bar.update(i, 1.0 / i)
        bar.close()
    assert "\rfit [" in tty.getvalue() and "4/4" in tty.getvalue()
    assert pipe.getvalue() == ""
