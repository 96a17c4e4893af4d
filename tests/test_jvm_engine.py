"""JVM gradient engine: Scala blocks, statistics and kernels agree with the numpy path."""

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import gradspark_cached_rdds, make_df
from gradspark.data.blocks import BINARY, CLASS_INDEX, REAL
from gradspark.data.dataset import NumpyTrainingData
from gradspark.data.validation import InvalidDataError
from gradspark.data.jvm import JvmTrainingData
from gradspark.engine.jvm import JvmGradientEngine
from gradspark.jvm.loader import KERNELS_VERSION, check_version, load_kernels
from gradspark.engine.python import PythonGradientEngine
from gradspark.losses import (
    BinaryLogisticLoss, HingeLoss, HuberLoss, MultinomialLogisticLoss, SquaredLoss,
)


@pytest.fixture(scope="module")
def frames(spark):
    """Dense and sparse (~20% nonzero) versions of the same weighted rows."""
    g = np.random.default_rng(31)
    n, d = 240, 12
    X = g.normal(size=(n, d)) * (g.random((n, d)) < 0.2) * g.uniform(0.5, 5.0, size=d)
    X[:, 0] += 1.0  # one dense column in a sparse block keeps the block CSR (~27% nonzero)
    cols = {
        "binary": (g.random(n) < 0.4).astype(float),
        "multi": g.integers(0, 3, size=n).astype(float),
        "real": X @ g.normal(size=d) + 3.0 + g.normal(size=n) * 2.0,
        "weight": g.uniform(0.2, 3.0, size=n),
    }
    return {
        "dense": make_df(spark, X, cols, partitions=3),
        "sparse": make_df(spark, X, cols, partitions=3, sparse=True),
    }


LOSSES = {
    "logistic": (BinaryLogisticLoss(), "binary", BINARY, 1, np.zeros(0)),
    "multinomial": (MultinomialLogisticLoss(), "multi", CLASS_INDEX, 3, np.zeros(0)),
    "squared": (SquaredLoss(label_shift=2.5, label_scale=1.7), "real", REAL, 1, np.zeros(0)),
    "huber": (HuberLoss(epsilon=1.35), "real", REAL, 1, np.array([2.3])),
    "hinge": (HingeLoss(), "binary", BINARY, 1, np.zeros(0)),
}


def assert_sums_close(a, b, rtol=1e-10):
    assert a.count == b.count
    for field in ("xtg", "gsum", "d_aux", "loss_sum", "weight_sum"):
        expected = np.asarray(getattr(b, field))
        # Components that nearly cancel (a class's gradient sum near 0) keep only
        # absolute accuracy, relative to the field's scale: numpy's sums are merged
        # in task-completion order.
        scale = float(np.abs(expected).max()) if expected.size else 0.0
        np.testing.assert_allclose(getattr(a, field), expected, rtol=rtol, atol=rtol * scale,
                                   err_msg=field)


@pytest.mark.parametrize("layout", ["dense", "sparse"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_gradient_sums_match_numpy(frames, layout, name):
    loss, label, domain, k, aux = LOSSES[name]
    df = frames[layout]
    g = np.random.default_rng(hash((layout, name)) % 2**32)
    coef = g.normal(size=(12, k)) * 0.3
    offset = g.normal(size=k)
    with JvmTrainingData(df, "features", label, "weight", domain, 50, 2) as jvm_data, \
            NumpyTrainingData(df, "features", label, "weight", domain, 50, 2) as py_data:
        ours = JvmGradientEngine(jvm_data, loss).gradient_sums(coef, offset, aux)
        ref = PythonGradientEngine(py_data.blocks, loss).gradient_sums(coef, offset, aux)
    assert ours.xtg.shape == (12, k) and ours.gsum.shape == (k,)
    assert_sums_close(ours, ref)


def assert_statistics_equal(a, b, rtol=1e-12):
    assert a.count == b.count
    for x, y in ((a.weight_sum, b.weight_sum), (a.weight_sq_sum, b.weight_sq_sum),
                 (a.features.mean, b.features.mean), (a.features.m2, b.features.m2),
                 (a.label.mean, b.label.mean), (a.label.m2, b.label.m2),
                 (a.label_max, b.label_max), (a.class_weights, b.class_weights),
                 (a.features.weight_sum, b.features.weight_sum)):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-300)


def test_tree_levels_give_the_same_sums_bit_for_bit_on_reruns(frames):
    """9 partitions: depth 1 merges on the driver, depth 2 and 3 add shuffle levels
    (OrderedAggregate's fan-in); each agrees with numpy and repeats its own bits."""
    loss, label, domain, k, aux = LOSSES["multinomial"]
    df = frames["sparse"].repartition(9)
    coef, offset = np.full((12, k), 0.1), np.array([0.2, -0.1, 0.0])
    with NumpyTrainingData(df, "features", label, "weight", domain, 7, 2) as py_data:
        ref = PythonGradientEngine(py_data.blocks, loss).gradient_sums(coef, offset, aux)
    for depth in (1, 2, 3):
        with JvmTrainingData(df, "features", label, "weight", domain, 7, depth) as data:
            assert data.num_partitions == 9
            engine = JvmGradientEngine(data, loss, depth)
            first, again = (engine.gradient_sums(coef, offset, aux) for _ in range(2))
        assert_sums_close(first, ref)
        assert first.xtg.tobytes() == again.xtg.tobytes() and first.loss_sum == again.loss_sum


@pytest.mark.parametrize("num_features", [5_000, 140_000])
def test_wide_sparse_sums_match_closed_form(spark, num_features):
    """Both ways the weights reach the tasks: inside the task closure, and (above
    StepWeights.InlineLimit = 2**17 doubles, 1 MiB) a broadcast of their own."""
    from pyspark.ml.linalg import Vectors

    g = np.random.default_rng(num_features)
    n, nnz = 90, 25
    X = sp.lil_matrix((n, num_features))
    for i in range(n):
        X[i, np.sort(g.choice(num_features, nnz, replace=False))] = g.normal(size=nnz)
    X = X.tocsr()
    y = (g.random(n) < 0.5).astype(float)
    w = g.uniform(0.5, 2.0, size=n)
    rows = [(Vectors.sparse(num_features, X[i].indices.tolist(), X[i].data.tolist()),
             float(y[i]), float(w[i])) for i in range(n)]
    df = spark.createDataFrame(rows, ["features", "label", "weight"]).repartition(2)
    coef = g.normal(size=(num_features, 1)) * 0.5
    offset = np.array([0.3])
    with JvmTrainingData(df, "features", "label", "weight", BINARY, 32, 2) as data:
        ours = JvmGradientEngine(data, BinaryLogisticLoss()).gradient_sums(
            coef, offset, np.zeros(0))
    m = X @ coef[:, 0] + offset[0]
    resid = w * (1.0 / (1.0 + np.exp(-m)) - y)
    np.testing.assert_allclose(ours.xtg[:, 0], X.T @ resid, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.gsum, [resid.sum()], rtol=1e-10)
    np.testing.assert_allclose(ours.loss_sum, np.sum(w * (np.logaddexp(0.0, m) - y * m)),
                               rtol=1e-10)
    assert ours.count == n and ours.weight_sum == pytest.approx(w.sum(), rel=1e-12)


def assert_blocks_equal(a, b):
    assert a.first_row == b.first_row
    assert sp.issparse(a.features) == sp.issparse(b.features)
    if sp.issparse(a.features):
        np.testing.assert_array_equal(a.features.indptr, b.features.indptr)
        np.testing.assert_array_equal(a.features.indices, b.features.indices)
        np.testing.assert_array_equal(a.features.data, b.features.data)
    else:
        np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.weights, b.weights)


@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_long_running_workers_read_every_block_once_tagged_with_its_partition(frames, layout):
    """The resident/async workers' source (raw JVM bytes, coalesced in the JVM): 3 input
    partitions on 2 task slots reach 2 workers as contiguous runs, each block exactly
    once, with the partition it came from (mini-batch seeds depend on it) and the numpy
    path's values."""
    df = frames[layout]
    with JvmTrainingData(df, "features", "multi", "weight", CLASS_INDEX, 40, 2) as jvm_data, \
            NumpyTrainingData(df, "features", "multi", "weight", CLASS_INDEX, 40, 2) as py_data:
        source = jvm_data.block_source()

        def held(worker, tagged):
            for partition, block in tagged:
                yield worker, partition, block

        plain = source.run(held, "test")
        ref = py_data.blocks.glom().collect()
    assert source.num_workers() == 2 and len(ref) == 3
    # contiguous runs of partitions, whatever Spark knows of their locations (a worker's
    # sums are added in partition order: another grouping changes the last bits)
    assert {w: sorted({p for v, p, _ in plain if v == w}) for w in (0, 1)} == {0: [0], 1: [1, 2]}
    for partition, blocks in enumerate(ref):
        ours = [(w, b) for w, p, b in plain if p == partition]
        assert len({w for w, _ in ours}) == 1, "a partition is split between workers"
        assert len(ours) == len(blocks)
        for (_, a), b in zip(ours, blocks):
            assert_blocks_equal(a, b)
    assert len(plain) == sum(len(blocks) for blocks in ref)


@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_statistics_and_blocks_match_python(frames, layout):
    df = frames[layout]
    with JvmTrainingData(df, "features", "multi", "weight", CLASS_INDEX, 40, 2) as jvm_data, \
            NumpyTrainingData(df, "features", "multi", "weight", CLASS_INDEX, 40, 2) as py_data:
        assert jvm_data.num_features == py_data.num_features == 12
        assert_statistics_equal(jvm_data.statistics, py_data.statistics)
        np.testing.assert_allclose(jvm_data.statistics.features_std,
                                   py_data.statistics.features_std, rtol=1e-12)
        ours = jvm_data.python_blocks().glom().collect()
        ref = py_data.blocks.glom().collect()
    assert [len(p) for p in ours] == [len(p) for p in ref]
    for a, b in zip(sum(ours, []), sum(ref, [])):
        assert sp.issparse(a.features) == (layout == "sparse")
        assert_blocks_equal(a, b)


def test_dense_enough_sparse_rows_become_dense_blocks(spark, sparse_data):
    sparse_df, _, X, y = sparse_data
    dense_rows = make_df(spark, np.abs(X) + 1.0, {"label": y}, sparse=True)  # no zeros at all
    with JvmTrainingData(dense_rows, "features", "label", None, BINARY, 64, 2) as data:
        blocks = data.python_blocks().collect()
    assert blocks and not any(sp.issparse(b.features) for b in blocks)
    with JvmTrainingData(sparse_df, "features", "label", None, BINARY, 64, 2) as data:
        blocks = data.python_blocks().collect()
    assert all(sp.issparse(b.features) for b in blocks)


@pytest.mark.parametrize("rows, columns, message", [
    ([[1.0, float("nan")], [0.0, 1.0]], {"label": [0, 1]}, r"features column 'features' contains NaN"),
    ([[1.0, 2.0], [0.0, 1.0]], {"label": [None, 1]}, r"column 'label' is null at partition 0, row 0"),
    ([[1.0, 2.0], [0.0, 1.0]], {"label": [0, 2]}, r"label column 'label' must be 0 or 1 .* got 2.0 at partition 0, row 1"),
    ([[1.0, 2.0], [0.0, 1.0, 3.0]], {"label": [0, 1]}, r"features column 'features' has a vector of size 3 at partition 0, row 1"),
    ([[1.0, 2.0], [0.0, 1.0]], {"label": [0, 1], "w": [1.0, -1.0]}, r"weight column 'w' must be finite and >= 0, got -1.0 at partition 0, row 1"),
])
def test_bad_values_raise_invalid_data_error(spark, rows, columns, message):
    from pyspark.ml.linalg import Vectors

    names = list(columns)
    data = [(Vectors.dense(r), *[None if columns[c][i] is None else float(columns[c][i])
                                 for c in names]) for i, r in enumerate(rows)]
    from pyspark.sql.types import DoubleType, StructField, StructType
    from pyspark.ml.linalg import VectorUDT
    schema = StructType([StructField("features", VectorUDT())] +
                        [StructField(c, DoubleType()) for c in names])
    df = spark.createDataFrame(data, schema).coalesce(1)
    weight = "w" if "w" in columns else None
    with pytest.raises(InvalidDataError, match=message):
        JvmTrainingData(df, "features", "label", weight, BINARY, 16, 2)
    assert gradspark_cached_rdds(spark) == []


@pytest.mark.parametrize("partitions, sizes, message", [
    # one level of merges: partition 1 is compared with partition 0
    (3, {1: 3}, r"features column 'features' has a vector of size 3 at partition 1, row 0, "
                r"but row 0 of partition 0 has size 2; all feature vectors must have the same"),
    # tree levels on the executors (12 partitions, depth 2): from partition 9 on
    (12, {p: 3 for p in range(9, 12)}, r"has a vector of size 3 at partition 9, row 0, but row 0 "
                                       r"of partition [0-8] has size 2"),
    (3, {0: 0}, r"features column 'features' holds an empty vector at partition 0, row 0"),
])
def test_vectors_of_another_size_in_another_partition_are_named(spark, partitions, sizes,
                                                                 message):
    """Each partition's blocks take its row 0's size (no job reads the first row first);
    the statistics pass refuses partitions that disagree, naming both rows."""
    from pyspark.ml.linalg import Vectors

    rows = [(Vectors.dense(np.arange(sizes.get(p, 2), dtype=float) + r), float(r % 2))
            for p in range(partitions) for r in range(2)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions),
                               ["features", "label"])
    assert df.rdd.glom().map(len).collect() == [2] * partitions
    with pytest.raises(InvalidDataError, match=message):
        JvmTrainingData(df, "features", "label", None, BINARY, 16, 2)
    assert gradspark_cached_rdds(spark) == []


def test_empty_and_zero_weight_frames(spark, classification_data):
    df = classification_data[0]
    with pytest.raises(InvalidDataError, match="the training DataFrame is empty"):
        JvmTrainingData(df.limit(0), "features", "label", None, BINARY, 16, 2)
    zero = df.selectExpr("features", "label", "weight * 0.0 AS weight")
    with pytest.raises(InvalidDataError, match="sum to zero"):
        JvmTrainingData(zero, "features", "label", "weight", BINARY, 16, 2)
    assert gradspark_cached_rdds(spark) == []


def test_mini_batches_are_seeded_by_seed_and_step(frames):
    loss = BinaryLogisticLoss()
    coef, offset = np.full((12, 1), 0.1), np.array([0.2])
    with JvmTrainingData(frames["sparse"], "features", "binary", "weight", BINARY, 32, 2) as data:
        engine = JvmGradientEngine(data, loss)
        a = engine.gradient_sums(coef, offset, np.zeros(0), fraction=0.5, seed=7, step=3)
        b = engine.gradient_sums(coef, offset, np.zeros(0), fraction=0.5, seed=7, step=3)
        c = engine.gradient_sums(coef, offset, np.zeros(0), fraction=0.5, seed=7, step=4)
        big = engine.gradient_sums(coef, offset, np.zeros(0), fraction=0.5, seed=2**40 + 5)
        full = engine.gradient_sums(coef, offset, np.zeros(0))
        none = engine.gradient_sums(coef, offset, np.zeros(0), fraction=0.0)
    np.testing.assert_array_equal(a.vector(), b.vector())
    assert (a.loss_sum, a.count) == (b.loss_sum, b.count)
    assert not np.array_equal(a.vector(), c.vector())
    assert full.count == 240
    for s in (a, c, big):
        assert 80 <= s.count <= 160
    assert none is None


def test_release_leaves_no_cached_blocks(spark, frames, tmp_path):
    data = JvmTrainingData(frames["dense"], "features", "binary", None, BINARY, 64, 2,
                           checkpoint_dir=str(tmp_path / "ckpt"))
    assert any("gradspark" in name for name in gradspark_cached_rdds(spark))
    engine = JvmGradientEngine(data, HingeLoss())
    assert engine.gradient_sums(np.zeros((12, 1)), np.zeros(1), np.zeros(0)).count == 240
    checkpoint = data.blocks.rdd().getCheckpointFile()
    assert checkpoint.isDefined()  # written right after the statistics pass
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(checkpoint.get())
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    assert fs.exists(path)
    data.release()
    assert gradspark_cached_rdds(spark) == []
    assert not fs.exists(path)


def test_load_kernels_is_cached_per_context(spark):
    assert load_kernels(spark) is load_kernels(spark)


def test_a_jar_of_another_version_is_refused_by_name(spark):
    check_version(load_kernels(spark))  # the jar built from these sources

    class OldJar:
        def Version(self):  # noqa: N802 - the Scala accessor's name
            return "1"

    with pytest.raises(RuntimeError, match=f"version 1, this gradspark calls version {KERNELS_VERSION}"):
        check_version(OldJar())


@pytest.mark.local_cluster("jvm_kernels")
def test_later_sessions_of_one_process_train_on_the_kernels_too():
    """A process that stops its session and starts another (a notebook, the examples job)
    keeps one class loader for the jar: a second loader's classes got the first one's
    methods from py4j's cache, and the kernels failed in every later session."""
    from job_support import run_job

    fits = run_job("sessions_job.py")["fits"]
    assert [fit["engine"] for fit in fits] == ["jvm"] * 2
    assert max(fit["gap"] for fit in fits) < 1e-4


def test_jar_reaches_separate_executor_jvms(local_cluster):
    result = local_cluster("jvm_kernels")
    assert result["executors"] == 2 and result["jvm_pids"] >= 2
    np.testing.assert_allclose(result["ours"], result["ref"], rtol=1e-10)


def test_partition_local_features_give_the_dense_sums_bit_for_bit(spark):
    """Partition-local feature indices (LocalFeatures.scala): each partition's task
    gathers, sums and returns only the features it holds, and the sums equal the
    dense job's to the bit: full and sampled steps, one and three outputs, the
    driver merge (depth 1) and shuffle levels (depth 2, 3 over 9 partitions). Each
    partition holds exactly the distinct columns of its rows (counted in numpy)."""
    from pyspark.ml.linalg import Vectors

    g = np.random.default_rng(5)
    width, n = 1 << 16, 900
    columns = [np.unique(np.concatenate([g.choice(40, 3), g.choice(width, 4)]))
               for _ in range(n)]
    rows = [(Vectors.sparse(width, c.tolist(), g.uniform(0.5, 2.0, c.size).tolist()),
             float(g.random() < 0.4), float(g.integers(0, 3)), float(g.uniform(0.2, 3.0)))
            for c in columns]
    df = spark.createDataFrame(rows, ["features", "binary", "multi", "weight"]).repartition(9)
    df = df.persist()  # the same rows in each partition for every pass below
    expected_held = df.rdd.mapPartitions(lambda part: [len({j for row in part
                                                            for j in row[0].indices})]).collect()
    cases = [(BinaryLogisticLoss(), "binary", BINARY, 1), (MultinomialLogisticLoss(), "multi",
                                                           CLASS_INDEX, 3)]
    for loss, label, domain, k in cases:
        coef, offset = g.normal(scale=0.3, size=(width, k)), g.normal(size=k)
        for depth in (1, 2, 3):
            sums = {}
            for local in (False, True):
                with JvmTrainingData(df, "features", label, "weight", domain, 16, depth) as data:
                    engine = JvmGradientEngine(data, loss, depth, local_features=local)
                    if local:
                        assert sorted(engine.held_features.tolist()) == sorted(expected_held)
                        assert data.stored_bytes() > 0  # the local copy is the cached one
                    sums[local] = [engine.gradient_sums(coef, offset, np.zeros(0), *batch)
                                   for batch in ((1.0, 0, 0), (0.3, 11, 4))]
                assert gradspark_cached_rdds(spark) == []
            for dense_sums, local_sums in zip(sums[False], sums[True]):
                assert local_sums.vector().tobytes() == dense_sums.vector().tobytes()
                assert (local_sums.loss_sum, local_sums.weight_sum, local_sums.count) == (
                    dense_sums.loss_sum, dense_sums.weight_sum, dense_sums.count)
            assert 0 < sums[True][1].count < n
    df.unpersist()
