"""Training across separate executor JVMs (local-cluster), not just threads of one JVM."""

import numpy as np
import pytest

from job_support import run_job


@pytest.mark.local_cluster("fit")
def test_fit_on_local_cluster_matches_mllib(local_cluster):
    result = local_cluster("fit")
    assert result["executors"] == 2
    assert result["worker_pids"] >= 2
    np.testing.assert_allclose(result["ours"], result["ref"], rtol=1e-4, atol=1e-5)


@pytest.mark.local_cluster("async")
def test_async_and_resident_on_local_cluster(local_cluster):
    result = local_cluster("async")
    # Sync mode runs resident workers in the executor processes; they answer every
    # step, also when a worker's first attempt fails and Spark retries it (same weights).
    assert result["sync_strategy"] == "resident"
    assert result["resident_reconnects"] >= 1
    np.testing.assert_array_equal(result["resident_retried"], result["sync"])
    # One numpy job per step over Python-blockified data: the same model up to rounding
    # (the JVM's column statistics differ from numpy's in the last bits).
    np.testing.assert_allclose(result["job"], result["sync"], rtol=1e-12, atol=1e-15)
    # Workers in executor processes, bulk-synchronous: sync mode's weights exactly.
    np.testing.assert_array_equal(result["bsp"], result["sync"])
    # A worker whose first task attempt fails is retried by Spark, reconnects and
    # recomputes its lost step: the result is unchanged.
    assert result["retried_reconnects"] >= 1
    np.testing.assert_array_equal(result["retried"], result["sync"])
    assert result["retried_updates"] == [80, 80]
    # Bounded staleness: within 1% of sync's training loss, never past the bound.
    assert result["stale_loss"] <= 1.01 * result["sync_loss"]
    assert result["stale_max_staleness"] <= 2


@pytest.mark.local_cluster("torch_fault")
def test_torch_ranks_run_in_separate_executors(local_cluster):
    pytest.importorskip("torch")
    result = local_cluster("torch_fault")
    # Two DDP ranks in two executor processes (gloo over loopback), not the driver.
    assert len(set(result["rank_pids"])) == 2 and result["driver_pid"] not in result["rank_pids"]
    assert np.all(np.diff(result["history"]) < 0)


@pytest.mark.local_cluster("torch_fault")
def test_torch_rank_failure_is_retried_and_resumed(local_cluster):
    pytest.importorskip("torch")
    # Rank 1 raises at epoch 2; Spark retries the whole barrier stage, which
    # resumes from the epoch-2 checkpoint and ends bit-identical. (On separate
    # executors the shuffle that spreads rows over the ranks delivers them in
    # another order each attempt; the ranks sort them back: spread_over_ranks.)
    result = local_cluster("torch_fault")
    assert result["resumed_from"] == 2
    assert result["max_weight_difference"] == 0.0
    assert result["retried_history"] == result["history"]


@pytest.mark.local_cluster("torch_midepoch")
def test_torch_rank_killed_mid_epoch_resumes_at_the_next_unseen_batch(local_cluster):
    pytest.importorskip("torch")
    # Rank 1's process is SIGKILLed before step 7 of epoch 2 (of 20 steps, with dropout);
    # the stage is retried from the checkpoint 5 steps into that epoch and ends as the
    # uninterrupted run: same weights and losses bit for bit, every row trained on exactly
    # once per epoch.
    result = local_cluster("torch_midepoch")
    assert result["steps_per_epoch"] == 20
    assert result["resumed_from"] == [1, 5]
    assert result["max_weight_difference"] == 0.0
    assert result["retried_history"] == result["history"]
    assert result["rows_per_epoch"] == result["retried_rows_per_epoch"] == [result["rows"]] * 4


def assert_resumed_as_uninterrupted(result, strategy):
    assert result["strategy"] == strategy and result["checkpoint_format"] == "sharded"
    assert result["resumed_from"] == [1, 5]
    assert result["max_weight_difference"] == 0.0
    assert result["retried_history"] == result["history"]
    assert result["rows_per_epoch"] == result["retried_rows_per_epoch"] == [result["rows"]] * 4


@pytest.mark.local_cluster("torch_midepoch_tensor")
def test_tensor_parallel_rank_killed_mid_epoch_resumes_from_its_shards(local_cluster):
    pytest.importorskip("torch")
    # As above, a tensor-parallel pair: each rank half of each split layer and its Adam
    # moments, in DCP shards; the retried stage loads them and ends bit for bit the same.
    assert_resumed_as_uninterrupted(local_cluster("torch_midepoch_tensor"), "tensor")


@pytest.mark.local_cluster("torch_midepoch_pipeline")
def test_pipeline_stage_killed_mid_epoch_resumes_from_its_shards(local_cluster):
    pytest.importorskip("torch")
    # Two pipeline stages; the killed rank holds the second. Each stage's parameters and
    # optimizer state are keyed by their own names, so each reloads its own.
    assert_resumed_as_uninterrupted(local_cluster("torch_midepoch_pipeline"), "pipeline")


@pytest.mark.local_cluster("gpu_profile")
def test_only_the_training_stage_holds_gpus_by_stage_level_scheduling(local_cluster):
    # Executors own one (fake) GPU each, tasks ask for none by default: the barrier
    # stage's TaskResourceProfile gives each task a GPU, the stage before holds none,
    # and the slot check counts GPU slots under that profile.
    result = local_cluster("gpu_profile")
    assert result["profile"] and result["etl"] == ["", ""]
    assert result["training"] == ["0", "0"]
    assert "only 2 tasks of one GPU each (stage-level)" in result["too_many"]


def test_resident_tree_of_depth_three_survives_a_failed_node():
    result = run_job("resident_tree_job.py")
    assert result["workers"] == 4 and result["depth"] == 3
    # Sums combined in the tree equal the star's up to the order of additions.
    np.testing.assert_allclose(result["tree"], result["star"], rtol=1e-12, atol=1e-15)
    # The failed barrier stage is rerun as a whole and the fit is unchanged.
    assert result["reconnects"] >= 1
    np.testing.assert_array_equal(result["retried"], result["tree"])


@pytest.fixture(scope="module")
def memory_pressure():
    # Both engines in one driver: its own cluster, with tiny storage memory.
    return run_job("memory_pressure_job.py")


@pytest.mark.parametrize("engine", ["python", "jvm"])
def test_training_data_larger_than_storage_memory_spills_and_trains(memory_pressure, engine):
    result = memory_pressure[engine]
    assert result["engine"] == engine
    # The blocks did not fit in the executors' storage memory: part went to disk.
    assert result["disk_bytes"] > 0
    # And the model is MLlib's (the driver collected nothing: maxResultSize=4m).
    np.testing.assert_allclose(result["ours"], memory_pressure["ref"], rtol=1e-4, atol=1e-5)
