"""TorchEstimator on the shared local[2] session: DDP (gloo) across two barrier tasks."""

import logging
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pyspark.ml import Pipeline, PipelineModel  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402

from gradspark import InvalidDataError, TorchEstimator, TorchModel, TorchTrainingError  # noqa: E402
from gradspark.neural.spec import global_batch_size, step_rows, steps_per_epoch  # noqa: E402
from conftest import transform_stream  # noqa: E402
from torch_support import (  # noqa: E402
    digits,
    digits_mlp,
    float32_drift_bound,
    full_batch_reference,
    regression_arrays,
    sgd,
    small_regressor,
    state_arrays,
)


@pytest.fixture(scope="module")
def digits_data(spark):
    return digits(spark)


@pytest.fixture(scope="module")
def digits_model(digits_data):
    train, _, _, _ = digits_data
    estimator = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=2,
                               batchSize=64, epochs=12, learningRate=0.01, labelDtype="int64")
    return estimator.fit(train)


def test_mlp_on_digits_reaches_stated_accuracy(digits_data, digits_model):
    _, test, X_test, y_test = digits_data
    summary = digits_model.summary
    assert summary.numWorkers == 2 and summary.numInstances == 1437
    assert summary.stepsPerEpoch == steps_per_epoch(1437, 64) == 23
    assert len(summary.lossHistory) == 12
    assert summary.lossHistory[-1] < 0.25 * summary.lossHistory[0]
    predicted = digits_model.transform(test).select("label", "prediction", "rawPrediction")
    rows = predicted.collect()
    accuracy = np.mean([r.prediction == r.label for r in rows])
    assert accuracy >= 0.94, accuracy
    # transform agrees with the module run directly on the driver.
    with torch.no_grad():
        direct = digits_model.module()(torch.tensor(X_test, dtype=torch.float32)).numpy()
    raw = np.array([r.rawPrediction.toArray() for r in rows])
    np.testing.assert_allclose(raw, direct, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal([r.prediction for r in rows], direct.argmax(axis=1))
    assert [r.label for r in rows] == list(y_test)


def test_two_ranks_take_the_single_process_steps(spark):
    # 301 rows over 2 ranks: partitions of unequal size, where a plain DDP
    # average of the two ranks' mean losses would weight rows unequally.
    X, y = regression_arrays(301)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"])
    model = TorchEstimator(small_regressor, torch.nn.MSELoss(), sgd(0.2), numWorkers=2,
                           batchSize=1000, epochs=25, seed=5).fit(df)
    reference = full_batch_reference(small_regressor, X, y, lr=0.2, epochs=25, seed=5)
    ours = state_arrays(model.module())
    for name, value in reference.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    # One output per row: the prediction is that output.
    first = model.transform(df.limit(3)).collect()
    with torch.no_grad():
        direct = model.module()(torch.tensor(np.stack([r.features.toArray() for r in first]),
                                             dtype=torch.float32)).numpy()[:, 0]
    np.testing.assert_allclose([r.prediction for r in first], direct, rtol=1e-6)
    assert "rawPrediction" not in model.transform(df.limit(1)).columns


@pytest.mark.parametrize("sizes,batch", [([151, 150], 64), ([7, 0, 30], 4), ([1, 1], 1),
                                         ([100], 7), ([3, 5], 100)])
def test_batch_schedule_is_an_exact_partition_of_each_epoch(sizes, batch):
    total = sum(sizes)
    steps = steps_per_epoch(total, batch)
    offsets = np.cumsum([0] + sizes[:-1])
    seen = {r: [] for r in range(len(sizes))}
    for step in range(steps):
        local = [step_rows(np.arange(n), o, steps, step) for n, o in zip(sizes, offsets)]
        assert sum(len(rows) for rows in local) == global_batch_size(total, steps, step)
        assert global_batch_size(total, steps, step) >= 1
        # The rank weights W * b_r / B turn DDP's average into the global mean.
        values = [np.random.default_rng(step).normal(size=n) for n in sizes]
        means = [v[rows].mean() if len(rows) else 0.0 for v, rows in zip(values, local)]
        shares = [len(rows) / global_batch_size(total, steps, step) for rows in local]
        ddp_average = np.mean([len(sizes) * s * m for s, m in zip(shares, means)])
        union = np.concatenate([v[rows] for v, rows in zip(values, local)])
        np.testing.assert_allclose(ddp_average, union.mean())
        for r, rows in enumerate(local):
            seen[r].extend(rows.tolist())
    for r, n in enumerate(sizes):
        assert sorted(seen[r]) == list(range(n))  # every row once per epoch


def test_model_round_trips_inside_a_pipeline(spark, digits_data, tmp_path):
    train, test, _, _ = digits_data
    small = train.limit(300)
    pipeline = Pipeline(stages=[TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(),
                                               numWorkers=2, epochs=2, labelDtype="int64",
                                               predictionCol="digit")])
    fitted = pipeline.fit(small)
    fitted.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    stage = loaded.stages[0]
    assert isinstance(stage, TorchModel) and stage.getPredictionCol() == "digit"
    assert stage.getLabelDtype() == "int64" and stage.getEpochs() == 2
    before = [r.digit for r in fitted.transform(test).collect()]
    after = [r.digit for r in loaded.transform(test).collect()]
    assert before == after
    for name, value in state_arrays(fitted.stages[0].module()).items():
        np.testing.assert_array_equal(state_arrays(stage.module())[name], value)
    # The unfitted estimator persists too (its functions pickled by value).
    estimator = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), sgd(0.1), epochs=3)
    estimator.write().overwrite().save(str(tmp_path / "estimator"))
    again = TorchEstimator.load(str(tmp_path / "estimator"))
    assert again.getEpochs() == 3 and again.model_fn().state_dict().keys() == \
        digits_mlp().state_dict().keys()


def test_resumed_fit_matches_uninterrupted(spark, digits_data, tmp_path):
    train = digits_data[0].limit(400)
    def estimator(epochs, directory):
        return TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=2,
                              epochs=epochs, batchSize=32, labelDtype="int64", seed=3,
                              checkpointDir=str(directory))
    straight = estimator(4, tmp_path / "a").fit(train)
    estimator(2, tmp_path / "b").fit(train)
    resumed = estimator(4, tmp_path / "b").fit(train)
    assert resumed.summary.resumedFromEpoch == 2
    np.testing.assert_allclose(resumed.summary.lossHistory, straight.summary.lossHistory,
                               rtol=1e-6)
    for name, value in state_arrays(straight.module()).items():
        np.testing.assert_allclose(state_arrays(resumed.module())[name], value, rtol=1e-5,
                                   atol=1e-7)
    with pytest.raises(ValueError, match="batchSize"):
        estimator(5, tmp_path / "b").setParams(batchSize=16).fit(train)


def test_a_mid_epoch_checkpoint_resumes_only_on_its_number_of_ranks(spark, digits_data,
                                                                    tmp_path):
    from gradspark.checkpoints.epochs import EpochCheckpoints

    train = digits_data[0].limit(200)
    estimator = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=1,
                               epochs=2, batchSize=20, labelDtype="int64", seed=3,
                               checkpointDir=str(tmp_path), checkpointUnit="step",
                               checkpointInterval=3, keepCheckpoints=3)
    estimator.fit(train)
    store = EpochCheckpoints(str(tmp_path), keep=5)
    # Interval 3 over 10 steps an epoch: mid-epoch at 3, 6, 9, 12 (= epoch 2 step 2), ...
    assert store.positions()[-3:] == [(1, 5), (1, 8), (2, 0)]
    newest = store.load_latest()
    store.delete((2, 0))
    assert store.load_latest()["step"] == 8 and len(store.load_latest()["ranks"]) == 1
    with pytest.raises(ValueError, match="numWorkers=1"):
        estimator.copy().setParams(numWorkers=2).fit(train)
    resumed = estimator.fit(train)  # from 8 steps into epoch 2, on one rank
    assert (resumed.summary.resumedFromEpoch, resumed.summary.resumedFromStep) == (1, 8)
    assert resumed.summary.lossHistory == list(newest["history"])
    assert resumed.summary.rowsPerEpoch == [200, 200]


def test_progress_reaches_the_driver_while_the_stage_runs(spark, digits_data, caplog):
    caplog.set_level(logging.INFO, logger="gradspark.trainer")
    model = TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=2, epochs=3,
                           batchSize=40, labelDtype="int64", seed=3,
                           progressInterval=4).fit(digits_data[0].limit(400))
    lines = [r for r in caplog.records
             if r.name == "gradspark.trainer" and r.getMessage().startswith("TorchEstimator step")]
    # 10 steps an epoch: rank 0 reports after steps 4 and 8, and at each epoch's end.
    assert model.summary.progressReports == len(lines) == 9
    assert [r.args[1] for r in lines] == [4, 8, 10, 14, 18, 20, 24, 28, 30]
    ends = [r for r in lines if "epoch loss" in r.getMessage()]
    assert [r.args[3] for r in ends] == model.summary.lossHistory
    assert all("rows/s ETA" in r.getMessage() for r in lines)
    # Live: the first epoch's report came while later epochs were still training.
    assert ends[0].created < ends[-1].created - 0.5 * model.summary.epochSeconds[-1]


def test_fsdp_shards_the_model_and_takes_ddp_s_steps(spark, digits_data, tmp_path):
    train = digits_data[0].limit(400)

    def fit(strategy, workers, epochs, directory):
        return TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=workers,
                              epochs=epochs, batchSize=32, labelDtype="int64", seed=3,
                              strategy=strategy, checkpointDir=str(tmp_path / directory),
                              progressInterval=-1).fit(train)

    ddp, fsdp = fit("ddp", 2, 3, "ddp"), fit("fsdp", 2, 3, "fsdp")
    assert fsdp.summary.strategy == "fsdp"
    np.testing.assert_allclose(fsdp.summary.lossHistory, ddp.summary.lossHistory, rtol=1e-6)
    theirs = state_arrays(ddp.module())
    for name, value in state_arrays(fsdp.module()).items():
        np.testing.assert_allclose(value, theirs[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # Sharding: digits_mlp has 64*32+32 + 32*10+10 = 2410 float32 parameters; each Linear
    # is split by rows over the 2 ranks, so rank 0 holds exactly half of them and of
    # Adam's two moments.
    assert ddp.summary.parameterBytesPerRank == 2410 * 4
    assert fsdp.summary.parameterBytesPerRank == 2410 * 4 // 2
    assert ddp.summary.optimizerStateBytesPerRank == 2 * 2410 * 4
    assert fsdp.summary.optimizerStateBytesPerRank == 2410 * 4
    # (checkpoints of FSDP runs, sharded or full: tests/test_torch_checkpoints.py)
    with pytest.raises(ValueError, match="strategy"):
        fit("ddp", 2, 4, "fsdp")  # its optimizer state is FSDP's


def test_worker_error_surfaces_its_traceback(spark, digits_data):
    def broken_loss(output, target):
        raise ArithmeticError("loss exploded on purpose")

    with pytest.raises(TorchTrainingError) as caught:
        TorchEstimator(digits_mlp, broken_loss, numWorkers=2, epochs=1,
                       labelDtype="int64").fit(digits_data[0].limit(50))
    message = str(caught.value)
    assert "loss exploded on purpose" in message and "Traceback" in message
    assert "broken_loss" in message


def test_too_many_workers_or_gpus_fail_fast(spark, digits_data):
    train = digits_data[0].limit(20)
    with pytest.raises(ValueError, match="numWorkers=3 needs 3 concurrent barrier tasks"):
        TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), numWorkers=3).fit(train)
    with pytest.raises(ValueError, match="spark.task.resource.gpu.amount"):
        TorchEstimator(digits_mlp, torch.nn.CrossEntropyLoss(), useGpu=True).fit(train)
    with pytest.raises(ValueError, match="needs model_fn and loss_fn"):
        TorchEstimator(digits_mlp).fit(train)


def test_gpu_conf_and_device_checks_name_the_problem(spark):
    """useGpu needs a whole GPU per task, and distinct GPUs per rank (found by running
    the GPU checks on a real H200: a fraction or a discovery script that hands every
    executor GPU 0 failed deep inside NCCL with "Duplicate GPU detected")."""
    from pyspark import SparkConf

    from gradspark.neural.process_group import duplicate_devices
    from gradspark.stages.slots import check_gpu_conf

    with pytest.raises(ValueError, match="no GPUs"):
        check_gpu_conf(SparkConf(loadDefaults=False))
    with pytest.raises(ValueError, match="amount >= 1, got 0.5"):
        check_gpu_conf(SparkConf(loadDefaults=False).set("spark.task.resource.gpu.amount",
                                                         "0.5"))
    assert check_gpu_conf(SparkConf(loadDefaults=False).set("spark.task.resource.gpu.amount",
                                                            "1"))
    # Executors own GPUs, tasks ask for none: the training stage asks (stage-level
    # scheduling; tests/test_cluster.py runs it), which local masters cannot do.
    executors_only = SparkConf(loadDefaults=False).set("spark.executor.resource.gpu.amount", "1")
    assert check_gpu_conf(executors_only, "spark://host:7077") is False
    with pytest.raises(ValueError, match="stage-level scheduling, which local masters lack"):
        check_gpu_conf(executors_only, "local[2]")
    assert duplicate_devices(["a/0", "a/1", "b/0"]) is None
    assert duplicate_devices(["a/0", "b/0", "a/0"]) == "ranks 0 and 2 were both given GPU a/0"


def test_bad_input_is_named(spark):
    rows = [(Vectors.dense([0.0, 1.0]), 1.0), (Vectors.dense([float("nan"), 1.0]), 0.0)]
    df = spark.createDataFrame(rows, ["x", "y"])
    two_inputs = TorchEstimator(lambda: torch.nn.Linear(2, 1), torch.nn.MSELoss(),
                                featuresCol="x", labelCol="y", numWorkers=1)
    with pytest.raises(InvalidDataError, match="column 'x' has NaN or infinite values"):
        two_inputs.fit(df)
    halves = spark.createDataFrame([(Vectors.dense([0.0, 1.0]), 0.5)], ["x", "y"])
    with pytest.raises(InvalidDataError, match="label column 'y' has non-integral"):
        two_inputs.copy({two_inputs.labelDtype: "int64"}).fit(halves)
    ragged = spark.createDataFrame([(Vectors.dense([0.0, 1.0]), 0.0),
                                    (Vectors.dense([1.0]), 1.0)], ["x", "y"])
    with pytest.raises(InvalidDataError, match="vector of size 1 where 2 was expected"):
        two_inputs.copy({two_inputs.numWorkers: 1}).fit(ragged)
    with pytest.raises(InvalidDataError, match="the training DataFrame is empty"):
        two_inputs.copy({two_inputs.numWorkers: 2}).fit(df.limit(0))
    with pytest.raises(ValueError, match="label column 'label' not found"):
        TorchEstimator(lambda: torch.nn.Linear(2, 1), torch.nn.MSELoss(),
                       featuresCol="x").fit(df)
    with pytest.raises(InvalidDataError, match="expected a vector"):
        TorchEstimator(lambda: torch.nn.Linear(2, 1), torch.nn.MSELoss(),
                       featuresCol="y", labelCol="y").fit(df)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_validation_split_stops_at_the_best_epoch(spark, strategy):
    """validationIndicatorCol: held-out rows are measured before training and after every
    epoch; the fit stops by MLlib's rule and keeps the best epoch, which is the
    single-process full-batch run on the training rows stopped there."""
    X, y = regression_arrays(301)
    held = np.random.default_rng(1).random(301) < 0.3
    df = spark.createDataFrame([(Vectors.dense(x), float(t), bool(h))
                                for x, t, h in zip(X, y, held)], ["features", "label", "held"])
    # lr 0.1, not 0.2: at 0.2 this trajectory turns chaotic after ~120 epochs (float32
    # and float64 runs part by 0.2 at epoch 150), so no run could be compared with it.
    model = TorchEstimator(small_regressor, torch.nn.MSELoss(), sgd(0.1), numWorkers=2,
                           batchSize=1000, epochs=300, seed=5, validationIndicatorCol="held",
                           validationTol=0.005, strategy=strategy).fit(df)
    s = model.summary
    history = s.validationHistory
    assert len(history) - 1 == len(s.lossHistory) < 300
    best = np.minimum.accumulate(history)
    stalls = [i for i in range(1, len(history))
              if best[i - 1] - history[i] < 0.005 * max(history[i], 0.01)]
    assert stalls and stalls[0] == len(history) - 1
    assert s.bestEpoch == int(np.argmin(history)) > 0
    assert s.numInstances == int((~held).sum())
    # float32 sums in another order over ~100 epochs: compare with the exact trajectory,
    # within the distance float32 rounding measurably carries a run from it.
    bounds = float32_drift_bound(small_regressor, X[~held], y[~held], lr=0.1,
                                 epochs=s.bestEpoch, seed=5)
    ours = state_arrays(model.module())
    # The bound must still tell a right fit from a wrong one: leaving out one training
    # row moves these parameters by >1e-2 at this many epochs.
    assert max(float(bound.max()) for _, bound in bounds.values()) < 1e-3
    for name, (exact, bound) in bounds.items():
        gap = np.abs(ours[name].astype(np.float64) - exact)
        assert np.all(gap <= bound), (name, s.bestEpoch, float(gap.max()), float(bound.max()))
    with torch.no_grad():
        output = model.module()(torch.from_numpy(X[held]))[:, 0].numpy()
    assert np.mean((output - y[held]) ** 2) == pytest.approx(min(history), rel=1e-5)
    with pytest.raises(InvalidDataError, match="true on no row"):
        TorchEstimator(small_regressor, torch.nn.MSELoss(), numWorkers=2, epochs=1,
                       validationIndicatorCol="none").fit(
            df.withColumn("none", df.held & ~df.held))


def test_torch_model_transforms_a_streaming_dataframe(spark, tmp_path):
    X, y = regression_arrays(60)
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                               ["features", "label"])
    model = TorchEstimator(small_regressor, torch.nn.MSELoss(), sgd(0.2), numWorkers=1,
                           batchSize=1000, epochs=2, seed=5).fit(df)
    rows = transform_stream(spark, model, df, tmp_path, ["prediction"])
    assert len(rows) == 40
    with torch.no_grad():
        direct = model.module()(torch.tensor([r.x for r in rows], dtype=torch.float32))
    np.testing.assert_allclose([r.prediction for r in rows], direct[:, 0].numpy(), rtol=1e-6)


def test_the_rendezvous_store_listens_on_the_rank_0_task_address_only(spark):
    """torch's TCPStore listens on every interface by default and takes unauthenticated
    keys; ours is bound to rank 0's task address (issue 30, item 3)."""

    def rank(index, _):
        import subprocess

        from gradspark.neural.process_group import process_group

        with process_group(use_gpu=False, timeout_seconds=60) as group:
            port = os.environ["MASTER_PORT"]
            # Only this process's sockets: a test running beside this one may listen on
            # the same port number on another address (loopback), which is no leak.
            lines = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"],
                                   capture_output=True, text=True).stdout.splitlines()
            listening = [line.split() for line in lines if f"pid={os.getpid()}," in line]
            yield group.rank, os.environ["MASTER_ADDR"], port, listening

    answers = sorted(spark.sparkContext.parallelize(range(2), 2).barrier()
                     .mapPartitionsWithIndex(rank).collect())
    _, address, port, listening = answers[0]
    local = [field for line in listening for field in line if field.endswith(":" + port)]
    assert local == [f"{address}:{port}"], listening  # not 0.0.0.0 / * / [::]
