"""Sparse pull and push: long-running workers exchange only the features a step touches.

The reference is the dense exchange itself (``sparsePull=False``), which the
rest of the suite checks against MLlib and numpy: the sparse one must give
the same bits, move fewer bytes, and leave the server's guards intact.
"""

from __future__ import annotations


import numpy as np
import pytest
import scipy.sparse as sp

from gradspark import SGDLogisticRegression
from gradspark.data.blocks import Block
from gradspark.engine.python import grouped_sums
from gradspark.engine.rounds import GradientRounds
from gradspark.engine.touched import TouchedFeatures
from gradspark.losses import BinaryLogisticLoss, MultinomialLogisticLoss
from gradspark.rpc import ParameterClient, ParameterServer, ProtocolError
from gradspark.comm.compression import INDEX

HOST = "127.0.0.1"


def sparse_groups(seed, d=50_000, rows=(300, 200, 250), k=1):
    """Blocks by partition: 8 non-zeros per row over d columns, two blocks per partition."""
    g = np.random.default_rng(seed)
    groups = {}
    for partition, n in enumerate(rows):
        blocks = []
        for half in np.array_split(np.arange(n), 2):
            x = sp.random(len(half), d, density=8 / d, format="csr", random_state=g)
            labels = g.integers(0, 2 if k == 1 else k, len(half)).astype(float)
            blocks.append(Block(x, labels, g.uniform(0.5, 2, len(half)), int(half[0])))
        groups[partition] = blocks
    return groups


@pytest.mark.parametrize("loss,k", [(BinaryLogisticLoss(), 1), (MultinomialLogisticLoss(), 3)])
@pytest.mark.parametrize("fraction", [0.1, 1.0])
def test_touched_batch_sums_are_the_dense_sums_bit_for_bit(loss, k, fraction):
    d = 50_000
    groups = sparse_groups(1, d, k=k)
    g = np.random.default_rng(2)
    vector = g.normal(size=d * k + k + loss.num_aux)
    coef, offset, aux = vector[: d * k].reshape(d, k), vector[d * k: d * k + k], \
        vector[d * k + k:]
    touched = TouchedFeatures(groups, d, k, loss.num_aux)
    for step in (0, 3):
        dense = grouped_sums(groups, loss, coef, offset, aux, fraction, 11, step)
        batch = touched.batch(fraction, 11, step)
        assert batch is not None
        assert batch.keys.dtype == INDEX and np.all(np.diff(batch.keys.astype(int)) > 0)
        sums = batch.sums(loss, vector[batch.keys], k)
        assert np.array_equal(batch.encode(sums).decode(), dense.vector())
        assert (sums.loss_sum, sums.weight_sum, sums.count) == \
            (dense.loss_sum, dense.weight_sum, dense.count)
        # only the touched features travel: far fewer keys than weights
        assert batch.features.size < d / 2


@pytest.mark.parametrize("dense", [False, True])
def test_a_full_batch_worker_holds_one_block_per_partition_with_the_same_sums(dense):
    from gradspark.engine.worker_step import WorkerStep

    d, loss = 2_000, BinaryLogisticLoss()
    groups = sparse_groups(4, d)
    if dense:
        groups = {p: [b._replace(features=b.features.toarray()) for b in blocks]
                  for p, blocks in groups.items()}
    reference = {p: list(blocks) for p, blocks in groups.items()}
    coef = np.random.default_rng(5).normal(size=(d, 1))
    held = WorkerStep(loss, d, 1, 1.0, 0).hold(groups)
    assert list(held) == list(reference) and all(len(b) == 1 for b in held.values())
    for partition, (block,) in held.items():
        rows = reference[partition]
        stacked = np.vstack([b.features.toarray() if sp.issparse(b.features) else b.features
                             for b in rows])
        features = block.features.toarray() if sp.issparse(block.features) else block.features
        assert sp.issparse(block.features) != dense and np.array_equal(features, stacked)
        assert np.array_equal(block.labels, np.concatenate([b.labels for b in rows]))
        assert np.array_equal(block.weights, np.concatenate([b.weights for b in rows]))
        assert block.first_row == rows[0].first_row
    merged = grouped_sums(held, loss, coef, np.zeros(1), np.zeros(0), 1.0, 0, 0)
    blockwise = grouped_sums(reference, loss, coef, np.zeros(1), np.zeros(0), 1.0, 0, 0)
    np.testing.assert_allclose(merged.vector(), blockwise.vector(), rtol=1e-12, atol=1e-12)
    assert merged.count == blockwise.count == 750
    # a mini-batch worker keeps its blocks: each draws its rows block by block
    assert WorkerStep(loss, d, 1, 0.5, 0).hold(reference) is reference


def test_dense_blocks_and_dense_rows_fall_back_to_the_whole_vector():
    g = np.random.default_rng(0)
    dense = {0: [Block(g.normal(size=(20, 4)), np.ones(20), np.ones(20), 0)]}
    assert TouchedFeatures(dense, 4, 1, 0).batch(1.0, 0, 0) is None
    # Every row touches most of 50 columns: keys (12 bytes each) would cost more.
    crowded = {0: [Block(sp.csr_matrix(g.normal(size=(40, 50))), np.ones(40), np.ones(40), 0)]}
    touched = TouchedFeatures(crowded, 50, 1, 0)
    assert touched.batch(1.0, 0, 0) is None and touched.batch(1.0, 0, 1) is None


def test_a_crowded_full_batch_leaves_mini_batches_pulling_sparsely():
    """All 750 rows touch ~95% of 2,000 columns, so a full batch pulls the whole vector; a
    10% sample touches about a quarter of them and still pulls by key (SVRG mixes the two:
    its snapshots are full batches)."""
    touched = TouchedFeatures(sparse_groups(5, d=2_000), 2_000, 1, 0)
    assert touched.batch(1.0, 0, 0) is None
    batch = touched.batch(0.1, 0, 1)
    assert batch is not None and batch.sampled and batch.features.size < 1_000
    assert touched.batch(1.0, 0, 2) is None


def test_a_keyed_pull_returns_those_weights_and_bad_keys_are_rejected():
    size = 1000
    rounds = GradientRounds([0, 1], size)
    vector = np.arange(size, dtype=float) * 0.5
    rounds.publish(1, vector, 3)
    with ParameterServer(rounds, HOST, 2) as server:
        with ParameterClient(server.address, server.secret, 0) as client:
            keys = np.array([2, 17, 999], dtype=INDEX)
            reply = client.pull(keys)
            assert (reply.clock, reply.version) == (1, 3)
            assert np.array_equal(reply.vector, vector[keys])
            assert np.array_equal(client.pull().vector, vector)  # dense still works
        for bad in ([5, 5], [7, 3], [size]):
            with ParameterClient(server.address, server.secret, 1) as client:
                with pytest.raises((ProtocolError, EOFError, OSError)):
                    client.pull(np.array(bad, dtype=INDEX))
        assert server.rejected_frames == 3
        rounds.stop()


PARAMS = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.05, maxIter=12,
              regParam=1e-3, seed=7)


@pytest.mark.parametrize("extra", [
    dict(mode="async", maxStaleness=0),
    dict(executionStrategy="resident"),
    dict(executionStrategy="resident", aggregationTopology="tree"),
    dict(executionStrategy="resident", miniBatchFraction=1.0, optimizer="sgd"),
], ids=["async", "resident-star", "resident-tree", "resident-full-batch"])
def test_sparse_pull_fit_equals_the_dense_exchange_with_fewer_bytes(hashed_rare, extra):
    fits = {}
    for sparse_pull in (True, False):
        model = SGDLogisticRegression(**{**PARAMS, **extra, "sparsePull": sparse_pull}) \
            .fit(hashed_rare)
        fits[sparse_pull] = model
    got, want = ({"coef": m.coefficients.toArray(), "b": m.intercept,
                  "history": m.summary.objectiveHistory} for m in (fits[True], fits[False]))
    assert np.array_equal(got["coef"], want["coef"]) and got["b"] == want["b"]
    assert got["history"] == want["history"]
    sent = {s: fits[s].summary.extra["bytesSentPerStep"] for s in fits}
    if extra.get("aggregationTopology") == "tree":
        # the root relays the whole vector to its children; only leaves pull by key
        assert sent[True] == sent[False]
    else:
        assert sent[True] < (0.2 if extra.get("miniBatchFraction", 0.05) < 1 else 0.9) \
            * sent[False]


def test_async_workers_with_staleness_pull_by_key_and_converge(hashed_rare):
    """With maxStaleness > 0 the order of updates is timing's, so no bit equality: the
    sparse fit must still end below its start and count its workers' pushes."""
    model = SGDLogisticRegression(**{**PARAMS, "maxIter": 20}, mode="async",
                                  maxStaleness=2, tol=0.0).fit(hashed_rare)
    extra = model.summary.extra
    assert extra["finalObjective"] < extra["initialObjective"]
    assert extra["gradientsAccepted"] == 20 * extra["workers"]
    assert extra["sparsePull"] is True


@pytest.mark.parametrize("entries", [0, 50, 200_000])
def test_the_touched_features_are_the_sorted_distinct_columns_by_sort_or_by_mask(entries):
    from gradspark.engine.touched import _distinct

    d = 100_000  # 50 entries are sorted; 200,000 (more than d / 8) marked in a mask
    g = np.random.default_rng(entries)
    columns = [g.integers(0, d, entries // 2).astype(np.int32),
               g.integers(0, d, entries - entries // 2).astype(np.int32)]
    features = _distinct(columns, d)
    assert features.dtype == np.int64
    assert np.array_equal(features, np.unique(np.concatenate(columns)))
