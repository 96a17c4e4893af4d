"""TorchEstimator checkpoints in both formats: full (one file) and sharded
(torch.distributed.checkpoint, one file per rank), on the shared local[2] session."""

import shutil

import numpy as np
import pyarrow.fs as pafs
import pytest

torch = pytest.importorskip("torch")

from gradspark import TorchEstimator  # noqa: E402
from gradspark.checkpoints.epochs import EpochCheckpoints  # noqa: E402
from gradspark.checkpoints.distributed import load_shards, save_shards  # noqa: E402
from torch_support import digits, digits_mlp, state_arrays  # noqa: E402

# digits_mlp: 64*32+32 + 32*10+10 float32 parameters, each with Adam's two moments
PARAMETERS = 2410


@pytest.fixture(scope="module")
def train(spark):
    return digits(spark)[0].limit(400).cache()


def fit(train, directory, workers, epochs, checkpoint_format="auto", **params):
    return TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=workers,
                          epochs=epochs, batchSize=32, labelDtype="int64", seed=3,
                          strategy="fsdp", checkpointDir=str(directory),
                          checkpointFormat=checkpoint_format, progressInterval=-1,
                          **params).fit(train)


def assert_same_model(a, b):
    theirs = state_arrays(b.module())
    for name, value in state_arrays(a.module()).items():
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)


def tensor_bytes_per_file(directory):
    """Bytes of tensor data (scalars left out) in each shard file, from DCP's metadata."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    metadata = FileSystemReader(str(directory)).read_metadata()
    per_file = {}
    for fqn, item in metadata.state_dict_metadata.items():
        if not isinstance(item, TensorStorageMetadata):
            continue
        for chunk in item.chunks:
            if len(chunk.sizes):
                where = metadata.storage_data[MetadataIndex(fqn, chunk.offsets)].relative_path
                per_file[where] = per_file.get(where, 0) + \
                    int(np.prod(chunk.sizes)) * item.properties.dtype.itemsize
    return per_file


def test_fsdp_checkpoints_are_sharded_and_resume_on_any_number_of_ranks(train, tmp_path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    sharded = fit(train, tmp_path / "sharded", 2, 2)
    assert sharded.summary.checkpointFormat == "sharded"  # "auto" under FSDP
    assert len(sharded.summary.checkpointSeconds) == 2
    newest = tmp_path / "sharded" / "epoch-000002.dcp"
    assert sorted(p.name for p in (tmp_path / "sharded").iterdir()) == \
        ["epoch-000001.dcp", "epoch-000002.dcp"]
    assert sorted(p.name for p in newest.iterdir()) == \
        [".metadata", "__0_0.distcp", "__1_0.distcp", "state.pt"]
    # Each rank wrote its own half of the parameters and of both Adam moments.
    assert tensor_bytes_per_file(newest) == {"__0_0.distcp": 3 * PARAMETERS * 4 // 2,
                                             "__1_0.distcp": 3 * PARAMETERS * 4 // 2}
    shutil.copytree(tmp_path / "sharded", tmp_path / "again")

    # Reassembled by torch's own converter, the shards are the returned model exactly,
    # and the optimizer state is the one a full checkpoint of the same run gathers.
    dcp_to_torch_save(newest, tmp_path / "whole.pt")
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)
    for name, value in state_arrays(sharded.module()).items():
        np.testing.assert_array_equal(whole["model"][name].numpy(), value, err_msg=name)
    full = fit(train, tmp_path / "full", 2, 2, "full")
    assert full.summary.checkpointFormat == "full"
    assert full.summary.lossHistory == sharded.summary.lossHistory
    gathered = torch.load(tmp_path / "full" / "epoch-000002.pt", weights_only=True)
    for name, moments in gathered["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(whole["optimizer"]["state"][name][key], value), (name, key)

    # On 1 rank, the sharded checkpoint resumes exactly as the full one does ...
    one_sharded = fit(train, tmp_path / "sharded", 1, 3)
    one_full = fit(train, tmp_path / "full", 1, 3, "full")
    assert one_sharded.summary.resumedFromEpoch == one_full.summary.resumedFromEpoch == 2
    assert one_sharded.summary.lossHistory == one_full.summary.lossHistory
    assert_same_model(one_sharded, one_full)
    # ... and on its own 2 ranks it continues bit for bit as if never stopped.
    straight = fit(train, tmp_path / "straight", 2, 3)
    continued = fit(train, tmp_path / "again", 2, 3)
    assert continued.summary.resumedFromEpoch == 2
    assert continued.summary.lossHistory == straight.summary.lossHistory
    assert_same_model(continued, straight)


def test_a_sharded_mid_epoch_checkpoint_resumes_at_the_next_batch(train, tmp_path):
    # 400 rows in batches of 32: 13 steps an epoch; every 3 steps, the newest 3 kept.
    straight = fit(train, tmp_path, 2, 2, checkpointUnit="step", checkpointInterval=3,
                   keepCheckpoints=3)
    store = EpochCheckpoints(str(tmp_path), keep=3)
    assert store.positions() == [(1, 8), (1, 11), (2, 0)]
    store.delete((2, 0))
    newest = store.load_latest()
    assert (newest["epoch"], newest["step"], len(newest["ranks"])) == (1, 11, 2)
    assert newest["shards"].endswith("epoch-000001-step-000011.dcp")
    resumed = fit(train, tmp_path, 2, 2, checkpointUnit="step", checkpointInterval=3,
                  keepCheckpoints=3)
    assert (resumed.summary.resumedFromEpoch, resumed.summary.resumedFromStep) == (1, 11)
    assert resumed.summary.lossHistory == straight.summary.lossHistory
    assert resumed.summary.rowsPerEpoch == [400, 400]
    assert_same_model(resumed, straight)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # one process, on purpose
def test_shards_go_through_pyarrow_file_systems_not_only_local_paths():
    # pyarrow's in-memory file system: no local path exists for DCP to fall back on.
    fs, root = pafs.FileSystem.from_uri("mock:///checkpoints/run")
    state = {"model": {"w": torch.arange(12.0).reshape(3, 4)},
             "optimizer": {"step": torch.tensor(7.0), "lr": 0.5}}
    save_shards(fs, root, state)
    assert fs.get_file_info(f"{root}/.metadata").type == pafs.FileType.File
    loaded = {"model": {"w": torch.zeros(3, 4)},
              "optimizer": {"step": torch.tensor(0.0), "lr": 0.0}}
    load_shards(fs, root, loaded)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"])
    assert float(loaded["optimizer"]["step"]) == 7.0 and loaded["optimizer"]["lr"] == 0.5


def test_a_torn_sharded_checkpoint_is_never_resumed_and_is_pruned(tmp_path):
    store = EpochCheckpoints(str(tmp_path), keep=2)
    for epoch in (1, 2):
        store.save(epoch, {"epoch": epoch, "history": [float(epoch)]})
    # A rank was killed while writing epoch 3's shards: no state.pt marker.
    torn = tmp_path / "epoch-000003.dcp"
    torn.mkdir()
    (torn / "__0_0.distcp").write_bytes(b"partial")
    assert store.positions() == [(1, 0), (2, 0)]
    assert store.load_latest()["epoch"] == 2
    store.save(4, {"epoch": 4, "history": []})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-000002.pt", "epoch-000004.pt"]


def test_fsdp_shards_know_their_rank_in_a_reused_worker_process():
    # A torch cache keyed on equal-looking device meshes once gave a process that had
    # been rank 1 the shard offsets of rank 1 again as rank 0: the checkpoint then
    # held each half at the other's place (gradspark.neural.parallelism).
    import socket

    import torch.multiprocessing as mp

    from torch_support import shard_offsets_after_swapping_ranks

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.start_processes(shard_offsets_after_swapping_ranks,
                       args=((free_port(), free_port()), results), nprocs=2,
                       start_method="spawn")
    reports = sorted(results.get() for _ in range(4))
    # Linear(4, 4) split by rows: rank 0 holds rows 0-1, rank 1 rows 2-3, in both groups.
    assert reports == [(0, 0, 0), (0, 1, 2), (1, 0, 0), (1, 1, 2)]
