"""Spark Connect: the estimators on a ``remote("local[2]")`` session, and its data path.

The Connect fits run once, in their own process (connect_job.py); each test
checks one part of its result against an independent reference (MLlib on the
same Connect DataFrames, the same fit on this suite's classic session, numpy
or torch). The frame data path and engine Connect uses also run on a classic
session, so the tests below compare them with the RDD path block by block.
"""

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql.types import DoubleType, StructField, StructType

from conftest import make_df
from connect_job import DATA, FULL, MINI, TIGHT
from job_support import logistic_frame, run_job
from gradspark import SGDLogisticRegression
from gradspark.connect import ConnectContext, is_connect
from gradspark.data.blocks import BINARY, CLASS_INDEX, REAL
from gradspark.data.dataset import NumpyTrainingData
from gradspark.data.frames import FrameTrainingData
from gradspark.data.validation import InvalidDataError
from gradspark.engine.frame_jobs import FrameGradientEngine
from gradspark.engine.python import PythonGradientEngine
from gradspark.losses import BinaryLogisticLoss


@pytest.fixture(scope="module")
def connect():
    return run_job("connect_job.py", timeout=900)


def test_fits_on_connect_agree_with_mllib_there(connect):
    assert connect["session"] == "pyspark.sql.connect.session"
    assert connect["strategy"] == "resident"
    np.testing.assert_allclose(connect["logistic"], connect["logistic_mllib"],
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(connect["probability"], connect["probability_mllib"], atol=1e-5)
    np.testing.assert_allclose(connect["linear"], connect["linear_mllib"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(connect["svc"], connect["svc_mllib"], rtol=0.05, atol=0.02)


def test_mllib_dropin_holds_on_connect(connect):
    """MLlib's Params (docs, defaults, setters) on a Connect session, default Params'
    fits equal to MLlib's there (1e-5: L-BFGS by MLlib's stopping rule; the normal
    equations with their standard errors), and toMLlib() scoring as we do."""
    assert connect["dropin_problems"] == {"LogisticRegression": [], "LinearRegression": [],
                                          "LinearSVC": []}
    np.testing.assert_allclose(connect["default_logistic"], connect["default_logistic_mllib"],
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(connect["default_linear"], connect["default_linear_mllib"],
                               rtol=1e-8)
    np.testing.assert_allclose(connect["default_linear_errors"],
                               connect["default_linear_errors_mllib"], rtol=1e-6)
    assert connect["exported"] == ["LogisticRegressionModel", True]
    np.testing.assert_allclose(connect["exported_probability"], connect["default_probability"],
                               rtol=1e-12, atol=1e-15)


def test_connect_fits_equal_the_classic_session_fits(spark, connect):
    df, _, _ = logistic_frame(spark, **DATA)
    tight = SGDLogisticRegression(regParam=0.01, **TIGHT).fit(df)
    np.testing.assert_allclose(connect["logistic"], [*tight.coefficients, tight.intercept],
                               rtol=1e-7, atol=1e-9)
    # summaries and evaluate() are DataFrame aggregations there too
    classic = [tight.summary.areaUnderROC, tight.summary.accuracy,
               tight.summary.weightedFMeasure(), tight.summary.precisionByThreshold.count()]
    np.testing.assert_allclose(connect["summary"], classic, rtol=1e-6)
    np.testing.assert_allclose(connect["evaluate"], classic, rtol=1e-6)
    full = SGDLogisticRegression(executionStrategy="jobPerStep", **FULL).fit(df)
    # Full-batch sums: only the order of additions differs (partitions, tree vs client).
    for strategy in ("jobPerStep", "resident"):
        np.testing.assert_allclose(connect[f"full_{strategy}"],
                                   [*full.coefficients, full.intercept], rtol=1e-12)
        np.testing.assert_allclose(connect[f"full_{strategy}_history"],
                                   full.summary.objectiveHistory, rtol=1e-12)


def test_async_sharded_and_checkpoints_on_connect(connect):
    # maxStaleness=0 takes the sync steps; so do sharded servers (bit for bit).
    np.testing.assert_array_equal(connect["mini_bsp"], connect["mini_sync_last"])
    assert not np.array_equal(connect["mini_sync"], connect["mini_sync_last"])  # averaged
    np.testing.assert_array_equal(connect["raw_sharded"], connect["raw_bsp"])
    assert connect["ssp_strategy"] == "async"
    history = connect["ssp_history"]
    assert len(history) == MINI["maxIter"] and history[-1] < 0.9 * history[0]
    # 10 steps, then resumed from the step-10 checkpoint to 20: the uninterrupted fit.
    assert connect["resumed_from"] == 10
    np.testing.assert_array_equal(connect["resumed"], connect["mini_sync"])


def test_persistence_on_connect(connect):
    np.testing.assert_array_equal(connect["pipeline_after"], connect["pipeline_before"])
    np.testing.assert_array_equal(connect["overwritten"], connect["mini_bsp"])
    assert connect["estimator_params"] == [7, 0.5]


def test_bad_input_and_torch_on_connect(connect):
    assert connect["nan_error"].startswith("features column 'features' contains NaN")
    assert "[nan,0.0,0.0,0.0]" in connect["nan_error"]
    # Two DDP ranks on Connect take the single-process full-batch steps.
    assert connect["torch_max_diff"] < 1e-5
    assert connect["torch_prediction_diff"] < 1e-5


# -- the frame data path and engine, on the classic session ---------------------------

def _blocks(data) -> list:
    if isinstance(data, FrameTrainingData):
        from gradspark.data.codec import decode_block

        rows = data.blocks_frame().collect()
        return [decode_block(row.block) for row in sorted(rows, key=lambda r: r.partition)]
    return data.blocks.collect()


@pytest.fixture
def small_arrow_batches(spark):
    """Arrow batches of 16 rows, so blocks of 50 rows span several batches."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "16")
    yield
    spark.conf.set(key, before)


@pytest.mark.parametrize("kind,weighted", [("dense", False), ("sparse", True),
                                           ("mixed", False)])
def test_frame_blocks_equal_the_rdd_blocks(spark, small_arrow_batches, kind, weighted):
    g = np.random.default_rng(4)
    X = g.normal(size=(203, 6)) * (g.random((203, 6)) < (1.0 if kind == "dense" else 0.3))
    df = make_df(spark, X, {"label": (X[:, 0] > 0).astype(float),
                            "weight": g.uniform(0.5, 2.0, size=203)}, partitions=3,
                 sparse=kind != "dense")
    if kind == "mixed":  # every third row dense: the per-row fallback
        df = spark.createDataFrame(
            [(Vectors.dense(r.features.toArray()) if i % 3 == 0 else r.features, r.label,
              r.weight) for i, r in enumerate(df.collect())],
            df.schema).repartition(3).cache()
    args = ("features", "label", "weight" if weighted else None, BINARY, 50, 2)
    with NumpyTrainingData(df, *args) as rdd_data, FrameTrainingData(df, *args) as frame_data:
        assert frame_data.num_partitions == 3
        ours, theirs = _blocks(frame_data), _blocks(rdd_data)
        assert len(ours) == len(theirs) == 6
        for a, b in zip(ours, theirs):
            assert type(a.features) is type(b.features)
            x, y = (m.toarray() if hasattr(m, "toarray") else m for m in (a.features, b.features))
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(a.labels, b.labels)
            np.testing.assert_array_equal(a.weights, b.weights)
            assert a.first_row == b.first_row
        for field in ("count", "weight_sum", "label_max"):
            assert getattr(frame_data.statistics, field) == pytest.approx(
                getattr(rdd_data.statistics, field), rel=1e-12)
        np.testing.assert_allclose(frame_data.statistics.features.mean,
                                   rdd_data.statistics.features.mean, rtol=1e-12)
        # Gradient sums, full batch and a mini-batch: the same sampled rows.
        coef, offset, aux = g.normal(size=(6, 1)), np.array([0.2]), np.zeros(0)
        frame_engine = FrameGradientEngine(frame_data.block_source(), BinaryLogisticLoss())
        rdd_engine = PythonGradientEngine(rdd_data.blocks, BinaryLogisticLoss())
        for fraction in (1.0, 0.3):
            a = frame_engine.gradient_sums(coef, offset, aux, fraction, seed=5, step=2)
            b = rdd_engine.gradient_sums(coef, offset, aux, fraction, seed=5, step=2)
            assert a.count == b.count
            np.testing.assert_allclose(a.vector(), b.vector(), rtol=1e-12, atol=1e-15)
            assert a.loss_sum == pytest.approx(b.loss_sum, rel=1e-12)


@pytest.mark.parametrize("rows,domain,message", [
    ([(Vectors.dense([1.0, 2.0]), 1.0), (None, 0.0)], BINARY, "is null at partition 0, row 1"),
    ([(Vectors.dense([1.0, 2.0]), 1.0), (Vectors.dense([1.0]), 0.0)], BINARY,
     "has a vector of size 1 at partition 0, row 1"),
    ([(Vectors.dense([1.0, 2.0]), 1.0), (Vectors.sparse(2, [1], [np.inf]), 0.0)], REAL,
     "contains NaN or infinite values"),
    ([(Vectors.sparse(2, [0], [1.0]), 1.0), (Vectors.sparse(2, [1], [np.nan]), 0.0)], REAL,
     "(first at partition 0, row 1: (2,[1],[nan]))"),
    ([(Vectors.sparse(2, [0], [1.0]), 1.0), (Vectors.sparse(3, [1], [1.0]), 0.0)], REAL,
     "has a vector of size 3 at partition 0, row 1"),
    ([(Vectors.dense([1.0, 2.0]), 2.0)], BINARY, "must be 0 or 1"),
    ([(Vectors.dense([1.0, 2.0]), 1.5)], CLASS_INDEX, "must be a class index"),
])
def test_frame_path_names_bad_rows_as_the_rdd_path_does(spark, rows, domain, message):
    schema = StructType([StructField("features", VectorUDT()), StructField("label", DoubleType())])
    df = spark.createDataFrame(rows, schema).coalesce(1)
    errors = []
    for data_class in (NumpyTrainingData, FrameTrainingData):
        with pytest.raises(InvalidDataError) as error:
            data_class(df, "features", "label", None, domain, 10, 2)
        errors.append(error.value.message)
    assert message in errors[0] and errors[1] == errors[0]


def test_connect_context_reads_slots_and_host_from_the_session(spark):
    assert not is_connect(spark)
    context = ConnectContext(spark)  # any session answers conf.get; here a classic one
    assert context.master == "local[2]"
    assert context.defaultParallelism == 2  # spark.default.parallelism, set by conftest
    assert context.getConf().get("spark.driver.host") == "127.0.0.1"
    assert context.getConf().get("spark.no.such.key", "fallback") == "fallback"
