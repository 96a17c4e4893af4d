"""Checkpoints never lost silently: a write that fails stops the fit with the path and
the cause (sync and async alike) and leaves no temporary file; pruning deletes only this
fit's own checkpoints, never the one just written, never another run's or a corrupt one."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import make_df
from gradspark import SGDLogisticRegression
from gradspark.checkpoints import CheckpointWriteError

ASYNC = dict(optimizer="sgd", stepSize=0.3, maxIter=30, tol=0.0, mode="async",
             maxStaleness=1, checkpointInterval=10, seed=3)
SYNC = dict(optimizer="sgd", stepSize=0.3, maxIter=30, tol=0.0, checkpointInterval=10, seed=3)


@pytest.fixture(scope="module")
def data(spark):
    g = np.random.default_rng(8)
    X = g.normal(size=(200, 3))
    y = (X @ [1.0, -1.0, 0.5] + g.logistic(size=200) > 0).astype(float)
    return make_df(spark, X, {"label": y})


def _files(directory) -> list:
    return sorted(os.listdir(directory))


def _run_dir(directory):
    """The fit's own subdirectory of checkpointDir (one fit's identity here)."""
    (run,) = [directory / name for name in os.listdir(directory)]
    return run


@pytest.mark.parametrize("params", [SYNC, ASYNC], ids=["sync", "async"])
def test_a_checkpoint_that_cannot_be_written_stops_the_fit_by_name(data, tmp_path, params):
    """Something in the way of step 20's file (a non-empty directory): the fit raises
    CheckpointWriteError naming the directory and step, instead of returning a model
    with fewer checkpoints than asked for; no temporary file stays behind."""
    directory = tmp_path / "ckpt"
    SGDLogisticRegression(checkpointDir=str(directory), **dict(params, maxIter=10)).fit(data)
    run = _run_dir(directory)
    (run / "step-0000000020.ckpt").mkdir()
    (run / "step-0000000020.ckpt" / "in-the-way").write_text("x")
    with pytest.raises(CheckpointWriteError, match=r"checkpoint step 20 to .*ckpt"):
        SGDLogisticRegression(checkpointDir=str(directory), resume=False, **params).fit(data)
    assert not [f for f in _files(run) if ".tmp-" in f]
    assert "step-0000000010.ckpt" in _files(run)  # written before, and kept


def test_pruning_keeps_this_fits_checkpoints_whatever_else_is_there(data, tmp_path):
    """Three corrupt 'newest' files and an older run's steps 130-150 (other Params,
    resume=False): this fit's checkpoints 10, 20, 30 all stay (keep=3), and the foreign
    and corrupt files are not touched (before, each new checkpoint was deleted right
    after it was written: it was never among the three highest steps)."""
    directory = tmp_path / "ckpt"
    SGDLogisticRegression(checkpointDir=str(directory), **dict(SYNC, maxIter=150)).fit(data)
    run = _run_dir(directory)
    foreign = [f for f in _files(run) if f.startswith("step-")]
    assert foreign == [f"step-{s:010d}.ckpt" for s in (130, 140, 150)]
    for step in (900, 901, 902):
        (run / f"step-{step:010d}.ckpt").write_bytes(b"not a checkpoint")
    model = SGDLogisticRegression(checkpointDir=str(directory), resume=False,
                                  keepCheckpoints=3, **SYNC).fit(data)
    present = set(_files(run))
    assert {f"step-{s:010d}.ckpt" for s in (10, 20, 30)} <= present
    assert set(foreign) <= present
    assert {f"step-{s:010d}.ckpt" for s in (900, 901, 902)} <= present
    assert model.summary.totalIterations == 30


def test_pruning_drops_only_the_fits_own_older_checkpoints(data, tmp_path):
    directory = tmp_path / "ckpt"
    SGDLogisticRegression(checkpointDir=str(directory), keepCheckpoints=2,
                          **dict(SYNC, maxIter=50)).fit(data)
    assert [f for f in _files(_run_dir(directory)) if f.startswith("step-")] == [
        "step-0000000040.ckpt", "step-0000000050.ckpt"]


def test_checkpointed_estimator_works_in_cross_validation(spark, data, tmp_path):
    """Each fold and grid point checkpoints into its own subdirectory: before, the second
    fold refused to start ('checkpoint made with other Params/data'). A second identical
    CrossValidator resumes every fit from its own checkpoints, to the same models."""
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    estimator = SGDLogisticRegression(checkpointDir=str(tmp_path / "ckpt"), **SYNC)
    grid = ParamGridBuilder().addGrid(estimator.regParam, [0.0, 0.1]).build()

    def tuned():
        return CrossValidator(estimator=estimator, estimatorParamMaps=grid, numFolds=2,
                              seed=5, evaluator=BinaryClassificationEvaluator()).fit(data)

    first = tuned()
    assert len(os.listdir(tmp_path / "ckpt")) == 2 * 2 + 1  # folds x grid, and the refit
    again = tuned()
    assert again.avgMetrics == first.avgMetrics
    np.testing.assert_array_equal(again.bestModel.coefficients.toArray(),
                                  first.bestModel.coefficients.toArray())
    assert again.bestModel.summary.extra["resumedFromStep"] == 30


def test_data_fingerprint_ignores_summation_order_and_sees_a_moved_column():
    """The fingerprint matches across partitionings (sums that differ in their last
    bits) but not for other data: a moved column, another count, another moment."""
    import dataclasses

    from gradspark.checkpoints import data_fingerprint
    from gradspark.data.statistics import DataStatistics, Moments

    rng = np.random.default_rng(3)
    mean, m2 = rng.random(100_000), rng.random(100_000) + 1.0
    label = Moments(1000.0, np.array([0.4]), np.array([240.0]))
    stats = DataStatistics(1000, 1000.0, 1000.0, Moments(1000.0, mean, m2), label, 1.0,
                           np.array([600.0, 400.0]))
    schema = '{"fields": []}'
    reference = data_fingerprint(schema, stats)

    def variant(**features) -> str:
        moments = Moments(1000.0, features.get("mean", mean), features.get("m2", m2))
        return data_fingerprint(schema, dataclasses.replace(stats, features=moments))

    # another summation order: every moment off in its last bit or two
    noise = 1 + rng.choice([-2, -1, 0, 1, 2], size=mean.size) * np.finfo(float).eps
    assert variant(mean=mean * noise, m2=m2 * noise[::-1]) == reference
    moved = mean.copy()
    moved[[10, 20]] = moved[[20, 10]]  # two columns swap places: same sum
    assert variant(mean=moved) != reference
    # one column's moment off by 1e-5 (one of a rare feature's few rows changed)
    assert variant(m2=m2 + np.where(np.arange(m2.size) == 7, 1e-5, 0.0)) != reference
    assert data_fingerprint(schema, dataclasses.replace(stats, count=999)) != reference
    assert data_fingerprint('{"fields": [1]}', stats) != reference
