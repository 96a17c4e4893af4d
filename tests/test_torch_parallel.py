"""TorchEstimator's model-parallel strategies on the shared local[2] session: tensor and
pipeline parallelism over two gloo ranks, against one process and against DDP."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pyspark.ml.linalg import Vectors  # noqa: E402

from gradspark import TorchEstimator, TorchTrainingError  # noqa: E402
from gradspark.neural.mesh import mesh_shape, place_ranks  # noqa: E402
from gradspark.neural.pipeline_parallel import (balanced_split, group_batch_sizes,  # noqa: E402
                                                padded_batch_rows)
from gradspark.neural.tensor_parallel import default_plan  # noqa: E402
from torch_support import (  # noqa: E402
    ResidualNet,
    digits,
    digits_mlp,
    full_batch_reference,
    regression_arrays,
    sgd,
    small_regressor,
    state_arrays,
)

STRATEGIES = [("tensor", {}), ("pipeline", {"pipelineSchedule": "gpipe"}),
              ("pipeline", {"pipelineSchedule": "1f1b", "microBatches": 3})]


@pytest.fixture(scope="module")
def regression(spark):
    X, y = regression_arrays(301)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"]).cache()
    return df, X, y


def full_batch_losses(model_fn, X, y, lr, epochs, seed):
    """The single-process mean squared error before each full-batch SGD step."""
    torch.manual_seed(seed)
    model = model_fn()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    features, target = torch.from_numpy(X), torch.from_numpy(y).reshape(-1, 1)
    losses = []
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(features), target)
        losses.append(float(loss))
        loss.backward()
        optimizer.step()
    return losses


@pytest.mark.parametrize("strategy,params", STRATEGIES)
def test_model_parallel_fits_take_the_single_process_steps(regression, strategy, params):
    # 301 rows over 2 ranks (unequal partitions), one full-batch step per epoch: the
    # pipeline pads 301 rows to micro-batches of equal size and must weigh them out.
    df, X, y = regression
    model = TorchEstimator(small_regressor, torch.nn.MSELoss(), sgd(0.2), numWorkers=2,
                           batchSize=1000, epochs=8, seed=5, strategy=strategy,
                           progressInterval=-1, **params).fit(df)
    np.testing.assert_allclose(model.summary.lossHistory,
                               full_batch_losses(small_regressor, X, y, 0.2, 8, 5), rtol=1e-5)
    reference = full_batch_reference(small_regressor, X, y, lr=0.2, epochs=8, seed=5)
    ours = state_arrays(model.module())
    assert ours.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert model.summary.strategy == strategy and model.summary.meshShape == [1, 2]


@pytest.fixture(scope="module")
def digits_train(spark):
    return digits(spark)[0].limit(500).cache()


def fit_digits(train, strategy, workers=2, **params):
    return TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=workers,
                          epochs=3, batchSize=48, labelDtype="int64", seed=2,
                          learningRate=0.01, strategy=strategy, progressInterval=-1,
                          **params).fit(train)


def split_parameter_bytes(module, plan):
    """Bytes one of two tensor-parallel ranks holds: half of each split weight (and of a
    colwise layer's bias), the rest whole."""
    total = 0
    for name, parameter in module.named_parameters():
        layer, _, kind = name.rpartition(".")
        halved = layer in plan and (kind == "weight" or plan[layer] == "colwise")
        total += parameter.numel() * 4 // (2 if halved else 1)
    return total


@pytest.fixture(scope="module")
def ddp_digits(digits_train):
    return fit_digits(digits_train, "ddp")


@pytest.mark.parametrize("strategy,params", STRATEGIES)
def test_mini_batches_equal_ddp_and_each_rank_holds_its_part(digits_train, ddp_digits,
                                                             strategy, params):
    # 500 rows in batches of 48 (11 steps an epoch, some batches one row larger) with Adam:
    # the same global batches and optimizer steps as DDP's on the same two partitions.
    model = fit_digits(digits_train, strategy, **params)
    np.testing.assert_allclose(model.summary.lossHistory, ddp_digits.summary.lossHistory,
                               rtol=1e-5)
    ours, theirs = state_arrays(model.module()), state_arrays(ddp_digits.module())
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    whole = sum(p.numel() * 4 for p in digits_mlp().parameters())
    held = model.summary.parameterBytesByRank
    moments = model.summary.optimizerStateBytesByRank  # Adam: two moments per parameter
    assert moments == [2 * b for b in held]
    if strategy == "tensor":
        plan = default_plan(digits_mlp())
        assert plan == {"0": "colwise", "2": "rowwise"}
        assert held == [split_parameter_bytes(digits_mlp(), plan)] * 2
    else:  # the first Linear on one stage, the second on the other
        first = (64 * 32 + 32) * 4
        assert held == [first, whole - first]
    assert ddp_digits.summary.parameterBytesByRank == [whole, whole]


def test_mesh_shape_defaults_and_names_what_does_not_fit():
    assert mesh_shape("ddp", [], 4) == (4, 1)
    assert mesh_shape("fsdp", [], 4) == (1, 4)
    assert mesh_shape("pipeline", [2, 2], 4) == (2, 2)
    with pytest.raises(ValueError, match=r"meshShape \[2, 3\] holds 6 ranks but numWorkers=4"):
        mesh_shape("tensor", [2, 3], 4)
    with pytest.raises(ValueError, match="ddp"):
        mesh_shape("ddp", [2, 2], 4)
    with pytest.raises(ValueError, match="two positive sizes"):
        mesh_shape("tensor", [4], 4)


def test_mesh_dimension_names_stay_short():
    # Names of 36+ characters made FSDP on a 2-D mesh (HSDP) grow every rank's memory by
    # ~80 MB a step under gloo in torch 2.13 (gradspark.neural.mesh.DIMENSION_NAMES).
    from gradspark.neural.mesh import DIMENSION_NAMES, SUFFIX_DIGITS, dimension_names

    for strategy in DIMENSION_NAMES:
        names = dimension_names(strategy, "f" * SUFFIX_DIGITS)
        assert len(set(names)) == 2 and max(len(n) for n in names) <= 20, names


def test_ranks_are_placed_so_that_model_parallel_rows_stay_on_a_host(caplog):
    # Barrier tasks interleave hosts: ranks 0, 2 on host a; 1, 3 on host b.
    hosts = ["a", "b", "a", "b"]
    assert place_ranks(hosts, (2, 2)) == [[0, 2], [1, 3]]
    assert place_ranks(hosts, (1, 4)) == [[0, 2, 1, 3]]
    assert place_ranks(hosts, (4, 1)) == [[0], [2], [1], [3]]
    # three ranks on a, one on b: a row of two must span the hosts, and the log says so
    with caplog.at_level("WARNING", logger="gradspark.neural.mesh"):
        assert place_ranks(["a", "a", "b", "a"], (2, 2)) == [[0, 1], [3, 2]]
    assert "span hosts" in caplog.text


@pytest.mark.parametrize("sizes,steps", [([250, 250], 11), ([7, 0, 13, 5], 4), ([3], 5)])
def test_group_batch_sizes_count_the_schedule_s_rows(sizes, steps):
    from gradspark.neural.spec import step_rows

    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for members in ([0], list(range(len(sizes)))):
        counted = [sum(len(step_rows(np.arange(sizes[m]), offsets[m], steps, s))
                       for m in members) for s in range(steps)]
        assert list(group_batch_sizes(sizes, members, steps)) == counted
    grid = [list(range(len(sizes)))]
    padded = padded_batch_rows(sizes, grid, steps, 3)
    assert padded % 3 == 0 and padded - 3 < max(counted) <= padded


def test_balanced_split_cuts_at_the_parameter_midpoint():
    model = torch.nn.Sequential(torch.nn.Linear(10, 100), torch.nn.ReLU(),
                                torch.nn.Linear(100, 10), torch.nn.Linear(10, 10),
                                torch.nn.Linear(10, 1))
    assert balanced_split(model, 2) == ["2"]  # 1,100 parameters before "2", 1,231 after
    assert balanced_split(model, 3) == ["2", "3"]  # the ReLU stays with its Linear
    nested = torch.nn.Sequential(torch.nn.Linear(4, 4),
                                 torch.nn.ModuleList([torch.nn.Linear(4, 4)]))
    assert balanced_split(nested, 2) == ["1.0"]  # containers are opened
    with pytest.raises(TorchTrainingError, match="pipelineSplit"):
        balanced_split(torch.nn.Sequential(torch.nn.Linear(4, 4)), 2)


def test_default_tensor_plan_pairs_linear_layers_across_activations():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.act, self.down = (torch.nn.Linear(4, 8), torch.nn.GELU(),
                                            torch.nn.Linear(8, 4))
            self.norm, self.head = torch.nn.LayerNorm(4), torch.nn.Linear(4, 2)

    assert default_plan(Block()) == {"up": "colwise", "down": "rowwise"}
    stacked = torch.nn.Sequential(Block(), Block())
    assert default_plan(stacked) == {"0.up": "colwise", "0.down": "rowwise",
                                     "1.up": "colwise", "1.down": "rowwise"}


def test_parallelism_params_are_checked_on_the_driver(regression):
    df = regression[0]

    def estimator(**params):
        return TorchEstimator(small_regressor, torch.nn.MSELoss(), numWorkers=2, epochs=1,
                              progressInterval=-1, **params)

    with pytest.raises(ValueError, match="pipelineSplit is set but strategy='tensor'"):
        estimator(strategy="tensor", pipelineSplit=["2"]).fit(df)
    with pytest.raises(ValueError, match="numWorkers=2"):
        estimator(strategy="pipeline", meshShape=[2, 2]).fit(df)
    with pytest.raises(ValueError, match="pipelineSchedule must be one of"):
        estimator(strategy="pipeline", pipelineSchedule="zigzag")
    with pytest.raises(ValueError, match="tensorParallelPlan"):
        estimator(strategy="tensor", tensorParallelPlan={"0": "diagonal"})


@pytest.mark.parametrize("params,message", [
    ({"strategy": "pipeline", "pipelineSplit": ["9"]}, "pipelineSplit names"),
    ({"strategy": "pipeline", "pipelineSplit": ["1", "2"]}, "2 stages: name 1"),
    ({"strategy": "tensor", "tensorParallelPlan": {"1": "colwise"}}, "only nn.Linear"),
])
def test_a_plan_that_does_not_fit_the_model_is_named(regression, params, message):
    with pytest.raises(TorchTrainingError, match=message):
        TorchEstimator(small_regressor, torch.nn.MSELoss(), numWorkers=2, epochs=1,
                       progressInterval=-1, **params).fit(regression[0])


@pytest.mark.parametrize("strategy,first_mesh,second_mesh,checkpoint_format", [
    ("pipeline", [1, 2], [1, 2], "sharded"),  # each stage's optimizer keys its own
    ("pipeline", [1, 2], [2, 1], "sharded"),  # two stages, then two one-stage replicas
    ("tensor", [1, 2], [1, 2], "full"),
    ("tensor", [1, 2], [2, 1], "sharded"),  # DCP reshards the DTensors
])
def test_checkpoints_resume_to_the_uninterrupted_run(digits_train, tmp_path, strategy,
                                                     first_mesh, second_mesh,
                                                     checkpoint_format):
    def fit(directory, epochs, mesh):
        return TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=2,
                              epochs=epochs, batchSize=64, labelDtype="int64", seed=4,
                              learningRate=0.01, strategy=strategy, meshShape=mesh,
                              checkpointDir=str(tmp_path / directory),
                              checkpointFormat=checkpoint_format,
                              progressInterval=-1).fit(digits_train)

    straight = fit("straight", 3, first_mesh)
    fit("resumed", 1, first_mesh)
    written = sorted(p.name for p in (tmp_path / "resumed").iterdir())
    assert written[0].endswith(".dcp" if checkpoint_format == "sharded" else ".pt")
    resumed = fit("resumed", 3, second_mesh)
    assert resumed.summary.resumedFromEpoch == 1 and resumed.summary.meshShape == second_mesh
    np.testing.assert_allclose(resumed.summary.lossHistory, straight.summary.lossHistory,
                               rtol=1e-5)
    ours, theirs = state_arrays(resumed.module()), state_arrays(straight.module())
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-6, err_msg=name)


def test_two_dimensional_meshes_on_four_ranks_take_ddp_s_steps():
    # Its own local[4] driver: four barrier tasks, the 2-D meshes [2 replicas, 2 parallel].
    from job_support import run_job
    from torch_mesh_job import deep_mlp

    result = run_job("torch_mesh_job.py", timeout=900)
    ddp = result.pop("ddp")
    layers = [m for m in deep_mlp() if isinstance(m, torch.nn.Linear)]
    sizes = [m.weight.numel() + m.bias.numel() for m in layers]  # 2080, 1056, 330
    whole = sum(sizes)
    assert ddp["parameter_bytes"] == [4 * whole] * 4
    expected = {
        # Linear 0 colwise and 2 rowwise over the tensor pair (layer 2's bias and layer 4
        # whole), then that shard halved again by FSDP over the replicas
        "data x tensor": [4 * (sizes[0] // 2 + layers[1].weight.numel() // 2
                               + layers[1].bias.numel() + sizes[2]) // 2] * 4,
        # stage 1 is Linear 0 (the parameter count's best cut), stage 2 the rest; ranks
        # 0, 2 and 1, 3 are the two replicas' stages, each halved by FSDP
        "data x pipeline": [4 * sizes[0] // 2, 4 * (sizes[1] + sizes[2]) // 2] * 2,
        "hsdp": [4 * whole // 2] * 4,  # sharded over two ranks, replicated twice
    }
    assert set(result) == set(expected)
    for name, run in result.items():
        assert run["mesh"] == [2, 2], name
        np.testing.assert_allclose(run["history"], ddp["history"], rtol=1e-5, err_msg=name)
        for key, value in ddp["state"].items():
            np.testing.assert_allclose(run["state"][key], value, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{name}: {key}")
        assert run["parameter_bytes"] == expected[name], name
        assert run["optimizer_bytes"] == [2 * b for b in expected[name]], name  # Adam


@pytest.mark.parametrize("split", [["blocks.1"], []])
def test_a_model_that_is_not_sequential_is_cut_by_tracing(digits_train, split):
    def fit(strategy, **params):
        return TorchEstimator(ResidualNet, torch.nn.CrossEntropyLoss(), numWorkers=2,
                              epochs=2, batchSize=64, labelDtype="int64", seed=7,
                              learningRate=0.01, strategy=strategy, progressInterval=-1,
                              **params).fit(digits_train)

    ddp, pipelined = fit("ddp"), fit("pipeline", pipelineSplit=split)
    np.testing.assert_allclose(pipelined.summary.lossHistory, ddp.summary.lossHistory,
                               rtol=1e-5)
    held = pipelined.summary.parameterBytesByRank
    names = [n for n, _ in ResidualNet().named_parameters()]
    sizes = dict((n, p.numel() * 4) for n, p in ResidualNet().named_parameters())
    # the balanced cut of embed 1,560 | blocks 1,200 each | head 250 parameters
    first = [n for n in names if n.startswith(("embed", "blocks.0"))]
    assert held == [sum(sizes[n] for n in first), sum(sizes.values()) - held[0]]


@pytest.mark.parametrize("strategy", ["tensor", "pipeline"])
def test_validation_with_dropout_runs_in_eval_mode(digits_train, strategy):
    # The model kept is the best epoch's; its held-out loss, computed here in eval mode
    # (no dropout), is the smallest loss the validation recorded.
    from torch_cluster_job import dropout_mlp
    from pyspark.sql import functions as F

    frame = digits_train.withColumn("held", F.rand(3) < 0.25).cache()
    model = TorchEstimator(dropout_mlp, torch.nn.CrossEntropyLoss(), numWorkers=2, epochs=4,
                           batchSize=64, labelDtype="int64", seed=8, learningRate=0.01,
                           strategy=strategy, progressInterval=-1,
                           validationIndicatorCol="held", validationTol=-1.0).fit(frame)
    history = model.summary.validationHistory
    assert len(history) == 5 and model.summary.bestEpoch == int(np.argmin(history))
    held = frame.filter("held").collect()
    X = torch.tensor(np.stack([r.features.toArray() for r in held]), dtype=torch.float32)
    y = torch.tensor([int(r.label) for r in held])
    module = model.module().eval()
    with torch.no_grad():
        direct = float(torch.nn.functional.cross_entropy(module(X), y))
    np.testing.assert_allclose(min(history), direct, rtol=1e-5)
    frame.unpersist()


def test_parallelism_params_survive_save_and_load(spark, tmp_path):
    estimator = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=4,
                               strategy="tensor", meshShape=[2, 2],
                               tensorParallelPlan={"0": "colwise", "2": "rowwise"})
    estimator.write().save(str(tmp_path / "tensor"))
    loaded = TorchEstimator.load(str(tmp_path / "tensor"))
    assert loaded.getMeshShape() == [2, 2]
    assert loaded.getTensorParallelPlan() == {"0": "colwise", "2": "rowwise"}
    pipelined = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), strategy="pipeline",
                               pipelineSplit=["2"], pipelineSchedule="gpipe", microBatches=8)
    pipelined.write().save(str(tmp_path / "pipeline"))
    loaded = TorchEstimator.load(str(tmp_path / "pipeline"))
    assert (loaded.getPipelineSplit(), loaded.getPipelineSchedule(),
            loaded.getMicroBatches()) == (["2"], "gpipe", 8)
