"""``tensorboardDir``: a fit's curves as TensorBoard event files, read back with
TensorBoard's own ``EventAccumulator`` (issue 31, item 3)."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("tensorboard", reason="TensorBoard is an optional extra")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from gradspark import SGDLinearRegression, SGDLogisticRegression  # noqa: E402
from gradspark.optim.schedules import learning_rate  # noqa: E402


def _run(directory) -> EventAccumulator:
    (name,) = os.listdir(directory)  # one run per fit
    events = EventAccumulator(os.path.join(directory, name),
                              size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    return events


def test_an_async_fit_writes_its_loss_learning_rate_staleness_and_throughput(
        classification_data, tmp_path):
    df = classification_data[0]
    model = SGDLogisticRegression(optimizer="adam", stepSize=0.05, miniBatchFraction=0.3,
                                  maxIter=25, mode="async", maxStaleness=2,
                                  learningRateSchedule="cosine",
                                  tensorboardDir=str(tmp_path)).fit(df)
    events = _run(tmp_path)
    tags = set(events.Tags()["scalars"])
    loss = events.Scalars("loss")
    assert [e.step for e in loss] == list(range(1, len(loss) + 1))
    np.testing.assert_allclose([e.value for e in loss], model.summary.objectiveHistory,
                               rtol=1e-6)  # float32 in the event file
    rates = [e.value for e in events.Scalars("learning_rate")]
    np.testing.assert_allclose(rates, [learning_rate("cosine", 0.05, s, 25)
                                       for s in range(len(loss))], rtol=1e-6)
    (histogram,) = events.Histograms("staleness")
    counts = model.summary.extra["stalenessHistogram"]
    assert histogram.histogram_value.num == sum(counts.values())
    assert histogram.histogram_value.max == max(int(k) for k in counts) <= 2
    workers = sorted(t for t in tags if t.startswith("rows_per_second/"))
    assert len(workers) == model.summary.extra["workers"]
    assert all(events.Scalars(t)[0].value > 0 for t in workers)


def test_a_closed_form_fit_writes_its_loss_and_no_learning_rate(regression_data, tmp_path):
    model = SGDLinearRegression(tensorboardDir=str(tmp_path)).fit(regression_data[0])
    events = _run(tmp_path)
    assert model.summary.extra["engine"] == "normal"
    assert [e.value for e in events.Scalars("loss")] == pytest.approx(
        model.summary.objectiveHistory)
    assert "learning_rate" not in events.Tags()["scalars"]


def test_no_directory_no_files_and_the_param_is_persisted(regression_data, tmp_path):
    estimator = SGDLinearRegression(maxIter=3, solver="l-bfgs")
    assert estimator.getTensorboardDir() == ""
    estimator.fit(regression_data[0])
    assert not os.listdir(tmp_path)
    path = str(tmp_path / "estimator")
    SGDLinearRegression(tensorboardDir="/somewhere").save(path)
    assert SGDLinearRegression.load(path).getTensorboardDir() == "/somewhere"


def test_a_torch_fit_writes_rank0_reports_epoch_losses_and_timings(spark, tmp_path):
    torch = pytest.importorskip("torch")
    from pyspark.ml.linalg import Vectors

    from gradspark import TorchEstimator

    g = np.random.default_rng(3)
    X = g.normal(size=(256, 4))
    y = X @ [1.0, -1.0, 0.5, 2.0]
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"])
    model = TorchEstimator(lambda: torch.nn.Linear(4, 1), torch.nn.MSELoss(), numWorkers=2,
                           batchSize=32, epochs=3, learningRate=0.05, progressInterval=2,
                           tensorboardDir=str(tmp_path)).fit(df)
    events = _run(tmp_path)
    summary = model.summary
    np.testing.assert_allclose([e.value for e in events.Scalars("epoch_loss")],
                               summary.lossHistory, rtol=1e-6)
    assert [e.step for e in events.Scalars("epoch_seconds")] == [1, 2, 3]
    np.testing.assert_allclose([e.value for e in events.Scalars("epoch_seconds")],
                               summary.epochSeconds, rtol=1e-6)
    reports = events.Scalars("loss/rank0")
    assert len(reports) == summary.progressReports > 3
    assert all(e.value > 0 for e in events.Scalars("rows_per_second"))
