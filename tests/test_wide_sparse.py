"""Wide, mostly-empty feature spaces (hashed categorical data): compaction to the features
that occur, and the parameter space of first-order optimizers (its divergence case is in
test_numerical_robustness.py)."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.linalg import Vectors

from conftest import gradspark_cached_rdds
from hashed_data import WIDE, frames, hashed_rows
from gradspark import SGDLogisticRegression
from gradspark.data.compaction import MIN_DEAD_FEATURES

@pytest.fixture(scope="module")
def hashed(spark):
    columns, labels = hashed_rows(800, seed=3)
    occurring = np.unique(np.concatenate(columns))
    wide = frames(spark, columns, labels)
    narrow = frames(spark, columns, labels, narrow_to=occurring)
    return wide, narrow, occurring


def objective(df, occurring, model, l2=0.0, l1=0.0, standardization=True):
    """MLlib's logistic objective of a fitted model, in numpy, on the occurring columns."""
    rows = df.collect()
    X = np.zeros((len(rows), len(occurring)))
    for i, r in enumerate(rows):
        X[i, np.searchsorted(occurring, r.features.indices)] = r.features.values
    y = np.array([r.label for r in rows])
    coefficients = model.coefficients.toArray()[occurring]
    margin = X @ coefficients + model.intercept
    loss = np.mean(np.logaddexp(0, margin) - y * margin)
    scaled = coefficients * X.std(axis=0, ddof=1) if standardization else coefficients
    return loss + l2 / 2 * scaled @ scaled + l1 * np.abs(scaled).sum()


@pytest.mark.parametrize("engine,strategy", [
    ("auto", "jobPerStep"),      # JVM blocks compacted in Scala, JVM kernels
    ("python", "jobPerStep"),    # Python blocks compacted in Python workers
    ("auto", "resident"),        # JVM blocks compacted, then loaded by resident workers
])
def test_compacted_fit_equals_the_fit_on_the_occurring_features(spark, hashed, engine,
                                                                 strategy):
    wide, narrow, occurring = hashed
    assert WIDE - len(occurring) >= MIN_DEAD_FEATURES
    params = dict(regParam=0.01, maxIter=50, tol=1e-10, engine=engine,
                  executionStrategy=strategy)
    compacted = SGDLogisticRegression(**params).fit(wide)
    reference = SGDLogisticRegression(**params).fit(narrow)
    assert compacted.summary.extra["trainedFeatures"] == len(occurring)
    assert reference.summary.extra["trainedFeatures"] == len(occurring)
    if compacted.summary.extra["engine"] == "jvm":  # partition-local steps on sparse data
        assert 0 < compacted.summary.extra["meanPartitionFeatures"] <= len(occurring)
    coefficients = compacted.coefficients.toArray()
    assert len(coefficients) == WIDE and compacted.numFeatures == WIDE
    assert np.all(np.delete(coefficients, occurring) == 0.0)
    np.testing.assert_allclose(coefficients[occurring], reference.coefficients.toArray(),
                               rtol=1e-9, atol=1e-12)
    assert compacted.intercept == pytest.approx(reference.intercept, rel=1e-9, abs=1e-12)
    assert gradspark_cached_rdds(spark) == []


def test_wide_sparse_fit_matches_mllib(hashed):
    wide, _, _ = hashed
    params = dict(regParam=1e-3, standardization=False, maxIter=200, tol=1e-10)
    ours = SGDLogisticRegression(**params).fit(wide)
    ref = LogisticRegression(**params).fit(wide)
    np.testing.assert_allclose(ours.coefficients.toArray(), ref.coefficients.toArray(),
                               rtol=1e-3, atol=1e-4)
    assert ours.intercept == pytest.approx(ref.intercept, rel=1e-3, abs=1e-4)
    # the model predicts from the full-width vectors
    row = ours.transform(wide).first()
    expected = ours.coefficients.dot(row.features) + ours.intercept
    assert row.rawPrediction[1] == pytest.approx(expected, rel=1e-12)


def test_parameter_spaces_reach_the_same_objective(hashed):
    """The space changes the path, not the problem: at convergence both spaces give MLlib's
    objective (evaluated independently in numpy from the returned model)."""
    wide, _, occurring = hashed
    values = {}
    for space in ("standardized", "raw"):
        model = SGDLogisticRegression(optimizer="sgd", stepSize=1.0, maxIter=3000, tol=1e-12,
                                      regParam=0.01, parameterSpace=space).fit(wide)
        assert model.summary.extra["parameterSpace"] == space
        values[space] = objective(wide, occurring, model, l2=0.01)
        assert model.summary.extra["finalObjective"] == pytest.approx(values[space], rel=1e-9)
    lbfgs = SGDLogisticRegression(regParam=0.01, tol=1e-12, maxIter=500).fit(wide)
    for value in values.values():
        assert value == pytest.approx(objective(wide, occurring, lbfgs, l2=0.01), rel=1e-5)


def test_auto_space_is_raw_for_first_order_on_sparse_data_only(spark, hashed):
    wide, _, _ = hashed
    dense = spark.createDataFrame(
        [(Vectors.dense(np.random.default_rng(i).normal(size=3)), float(i % 2))
         for i in range(60)], ["features", "label"])
    cases = [(wide, "adam", "raw"), (wide, "lbfgs", "standardized"),
             (dense, "adam", "standardized")]
    for frame, optimizer, expected in cases:
        model = SGDLogisticRegression(optimizer=optimizer, maxIter=3).fit(frame)
        assert model.summary.extra["parameterSpace"] == expected, (optimizer, expected)


def test_ftrl_with_l1_gives_true_zeros_at_mllibs_lasso_objective(hashed):
    wide, _, occurring = hashed
    params = dict(regParam=0.02, elasticNetParam=1.0, standardization=False)
    ftrl = SGDLogisticRegression(optimizer="ftrl", stepSize=0.5, maxIter=1500, tol=0.0,
                                 **params).fit(wide)
    ref = LogisticRegression(maxIter=500, tol=1e-10, **params).fit(wide)
    ours, theirs = ftrl.coefficients.toArray(), ref.coefficients.toArray()
    assert ftrl.summary.extra["parameterSpace"] == "raw"
    assert np.all(np.delete(ours, occurring) == 0.0)
    zeros = occurring[theirs[occurring] == 0.0]
    assert len(zeros) > 5 and np.all(ours[zeros] == 0.0)  # L1 in closed form: exact zeros
    ours_value = objective(wide, occurring, ftrl, l1=0.02, standardization=False)
    assert ftrl.summary.extra["finalObjective"] == pytest.approx(ours_value, rel=1e-9)
    assert ours_value == pytest.approx(
        objective(wide, occurring, ref, l1=0.02, standardization=False), rel=1e-4)


@pytest.mark.parametrize("partitions,depth", [(2, 2), (9, 3)])
def test_jvm_statistics_of_csr_partitions_match_numpy(spark, partitions, depth):
    """All-CSR partitions answer with their non-zero sums only (a dense answer at 2^24
    features is 268 MB); merged over tree levels and densified, they equal numpy's."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.jvm import JvmTrainingData

    columns, labels = hashed_rows(500, seed=21)
    df = frames(spark, columns, labels, partitions=partitions)
    X = np.zeros((len(columns), WIDE))
    for i, c in enumerate(columns):
        X[i, c] = 1.0
    with JvmTrainingData(df, "features", "label", None, BINARY, 64, depth) as data:
        stats = data.statistics
        assert stats.count == len(labels) and stats.weight_sum == len(labels)
        np.testing.assert_allclose(stats.features.mean, X.mean(axis=0), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(stats.features_std, X.std(axis=0, ddof=1), rtol=1e-9,
                                   atol=1e-12)
        assert stats.stored_entries == sum(len(c) for c in columns)
        np.testing.assert_allclose(stats.class_weights, np.bincount(labels.astype(int)))


def test_statistics_summed_sorted_by_block_equal_the_d_arrays(spark):
    """A partition sums its CSR blocks into two d-arrays while d <= 64 x the first block's
    non-zeros, else block by block into sorted sparse partials: one partition of 700 rows
    (~4,700 non-zeros) in one block of 4,096 rows takes the d-arrays, in blocks of 64 rows
    (at most 7 non-zeros a row) the sorted partials; binary data sums exactly either way."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.jvm import JvmTrainingData

    columns, labels = hashed_rows(700, seed=23, rare=True)
    df = frames(spark, columns, labels, partitions=1)
    answers = []
    for block_size in (4096, 64):
        with JvmTrainingData(df, "features", "label", None, BINARY, block_size, 2) as data:
            answers.append(data.statistics)
    arrays, sorted_ = answers
    assert sum(len(c) for c in columns) * 64 > WIDE > 64 * 64 * 7  # the two paths
    for name in ("mean", "m2"):
        np.testing.assert_array_equal(getattr(arrays.features, name),
                                      getattr(sorted_.features, name), err_msg=name)
    assert (arrays.count, arrays.stored_entries) == (sorted_.count, sorted_.stored_entries)
    np.testing.assert_array_equal(arrays.class_weights, sorted_.class_weights)


def test_sparse_statistics_are_densified_in_python_as_the_jvm_would(spark, tmp_path):
    """The JVM answers the pass over CSR blocks with its sparse sums (2 d doubles through a
    file cost ~0.5 s at 2^24); python's densification equals the JVM's own
    (SparseStatistics.toDense + Statistics.withSums) bit for bit."""
    from gradspark.data.blocks import BINARY
    from gradspark.data.jvm import JvmTrainingData, _statistics
    from gradspark.jvm.loader import load_kernels

    columns, labels = hashed_rows(700, seed=22)
    df = frames(spark, columns, labels, partitions=3)
    entry = load_kernels(spark)
    sparse_class = entry.getClass().getClassLoader().loadClass(
        "io.gradspark.kernels.SparseStatistics$")
    jvm_sparse = sparse_class.getField("MODULE$").get(None)
    with JvmTrainingData(df, "features", "label", None, BINARY, 64, 2) as data:
        answer = str(tmp_path / "sparse.f8")
        data.blocks.statistics(True, 2, answer)
        flat = np.fromfile(answer, dtype="<f8")
        assert flat[0] < 0  # the sparse layout came back
        dense = str(tmp_path / "dense.f8")
        entry.writeDoubles(jvm_sparse.toDense(entry.readDoubles(answer), WIDE), dense)
        ours, theirs = _statistics(flat, WIDE), _statistics(np.fromfile(dense, "<f8"), WIDE)
        assert ours.count == theirs.count == len(labels)
        for name in ("mean", "m2"):
            np.testing.assert_array_equal(getattr(ours.features, name),
                                          getattr(theirs.features, name), err_msg=name)
        np.testing.assert_array_equal(ours.class_weights, theirs.class_weights)
        assert (ours.weight_sum, ours.weight_sq_sum, ours.stored_entries) == \
            (theirs.weight_sum, theirs.weight_sq_sum, theirs.stored_entries)
        assert np.count_nonzero(ours.features.mean) < WIDE  # a part of the width occurs


@pytest.fixture(scope="module")
def hashed_rare(spark):
    columns, labels = hashed_rows(1200, seed=5, rare=True)
    return frames(spark, columns, labels), np.unique(np.concatenate(columns))


def test_diagonal_preconditioning_reaches_mllibs_objective_in_fewer_iterations(hashed_rare):
    """standardization=False on sparse data: a bucket seen once has L2 strength 1/p times a
    common one's in MLlib's standardized space. With the curvature bounds as L-BFGS's
    initial inverse Hessian (auto picks it here) the fit reaches the objective MLlib's
    L-BFGS ends at in fewer iterations than with MLlib's scalar one, and both converge to
    MLlib's optimum (objectives evaluated in numpy from the returned models)."""
    wide, occurring = hashed_rare
    params = dict(regParam=1e-2, standardization=False)
    target = objective(wide, occurring,
                       LogisticRegression(maxIter=15, tol=0.0, **params).fit(wide),
                       l2=1e-2, standardization=False)
    fits = {choice: SGDLogisticRegression(maxIter=15, tol=0.0, preconditioning=choice,
                                          **params).fit(wide) for choice in ("auto", "none")}
    assert fits["auto"].summary.extra["preconditioning"] == "diagonal"
    assert fits["none"].summary.extra["preconditioning"] == "none"
    reached = {choice: next((i for i, v in enumerate(m.summary.objectiveHistory)
                             if v <= target), None) for choice, m in fits.items()}
    assert reached["auto"] is not None and reached["auto"] * 2 <= (reached["none"] or 16), \
        reached
    for choice, model in fits.items():  # the history is MLlib's objective of the iterates
        assert model.summary.objectiveHistory[-1] == pytest.approx(
            objective(wide, occurring, model, l2=1e-2, standardization=False), rel=1e-9)
    optimum = objective(wide, occurring,
                        LogisticRegression(maxIter=500, tol=1e-12, **params).fit(wide),
                        l2=1e-2, standardization=False)
    for choice in ("auto", "none"):
        model = SGDLogisticRegression(maxIter=500, tol=1e-12, preconditioning=choice,
                                      **params).fit(wide)
        assert objective(wide, occurring, model, l2=1e-2, standardization=False) == \
            pytest.approx(optimum, rel=1e-7)


def test_auto_preconditioning_leaves_evenly_curved_problems_to_mllibs_scalar(spark, hashed):
    """Standardized (MLlib's default) the L2 strengths are equal and a centered feature's
    curvature bound is the loss's: auto keeps MLlib's path, bit for bit."""
    wide, _, _ = hashed
    dense = spark.createDataFrame(
        [(Vectors.dense(np.random.default_rng(i).normal(size=3) * [1, 10, 100]),
          float(i % 2)) for i in range(60)], ["features", "label"])
    for frame in (wide, dense):
        params = dict(regParam=1e-3, maxIter=8, tol=0.0)
        auto = SGDLogisticRegression(**params).fit(frame)
        none = SGDLogisticRegression(preconditioning="none", **params).fit(frame)
        assert auto.summary.extra["preconditioning"] == "none"
        assert auto.summary.objectiveHistory == none.summary.objectiveHistory


@pytest.mark.parametrize("params,match", [
    (dict(elasticNetParam=1.0), "L1 penalty or bounds"),
    (dict(optimizer="adam"), "optimizer='lbfgs'"),
])
def test_diagonal_preconditioning_is_refused_where_it_cannot_apply(hashed_rare, params, match):
    wide, _ = hashed_rare
    with pytest.raises(ValueError, match=match):
        SGDLogisticRegression(regParam=1e-3, maxIter=2, preconditioning="diagonal",
                              **params).fit(wide)
