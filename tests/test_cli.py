"""``gradspark train`` / ``predict`` as batch jobs: sources, features, metrics, exit codes."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.classification import LogisticRegression
from pyspark.ml.evaluation import BinaryClassificationEvaluator

from gradspark import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory):
    """Parquet with two numeric columns, a string category and a binary label."""
    g = np.random.default_rng(12)
    n = 600
    a, b = g.normal(size=n), g.normal(size=n) * 3
    city = g.choice(["oslo", "lima", "pune"], size=n)
    effect = {"oslo": 1.0, "lima": -1.0, "pune": 0.0}
    margin = 1.5 * a - 0.4 * b + np.array([effect[c] for c in city])
    label = (margin + g.logistic(size=n) > 0).astype(float)
    rows = [(float(x), float(y), str(c), float(t), int(i))
            for i, (x, y, c, t) in enumerate(zip(a, b, city, label))]
    path = str(tmp_path_factory.mktemp("cli") / "people.parquet")
    spark.createDataFrame(rows, ["a", "b", "city", "label", "day"]).write.parquet(path)
    return path


def matplotlib_image():
    return pytest.importorskip("matplotlib.image")


def run(spark, *argv: str) -> int:
    return cli.main(list(argv), spark=spark)


def test_train_saves_a_pipeline_and_metrics_like_mllib(spark, table, tmp_path, capsys):
    out = str(tmp_path / "model")
    code = run(spark, "train", "--model", "logistic", "--input", table, "--features",
               "a,b,city", "--param", "regParam=0.01", "--output", out)
    assert code == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    with open(os.path.join(out, "metrics.json")) as handle:
        report = json.load(handle)
    assert printed["metrics"] == report["metrics"]
    assert report["iterations"] >= 1 and report["lossHistory"][-1] < report["lossHistory"][0]
    # loss.png: a real PNG of the loss curve (600x400 at the default size).
    image = matplotlib_image().imread(os.path.join(out, "loss.png"))
    assert image.shape[:2] == (400, 600) and image.std() > 0
    # The saved PipelineModel re-scores the held-out split to the reported AUC ...
    model = PipelineModel.load(out)
    df = spark.read.parquet(table)
    _, test = df.randomSplit([0.8, 0.2], seed=42)
    auc = BinaryClassificationEvaluator().evaluate(model.transform(test))
    assert auc == pytest.approx(report["metrics"]["areaUnderROC"], abs=1e-12)
    # ... and MLlib, with the same feature stages and split, scores the same.
    train, _ = df.randomSplit([0.8, 0.2], seed=42)
    reference = Pipeline(stages=cli.feature_stages(df, ["a", "b", "city"]) +
                         [LogisticRegression(regParam=0.01)]).fit(train)
    ref_auc = BinaryClassificationEvaluator().evaluate(reference.transform(test))
    assert auc == pytest.approx(ref_auc, abs=2e-3)
    # The category was one-hot encoded: 2 numeric + 3 cities (+1 for unseen ones).
    assert model.stages[-1].numFeatures == 2 + 4


def test_sql_source_job_file_and_predict(spark, table, tmp_path, capsys):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "model": "linear", "label": "a", "features": ["b", "day"],
        "sql": f"SELECT a, b, day FROM parquet.`{table}` WHERE day < 400",
        "params": {"regParam": 0.0, "maxIter": 300}, "test_fraction": 0.0}))
    out = str(tmp_path / "linear")
    assert run(spark, "train", "--job", str(job), "--output", out) == 0
    report = json.load(open(os.path.join(out, "metrics.json")))
    assert os.path.exists(os.path.join(out, "loss.png"))
    # With no hold-out the metrics are on the 400 training rows: ordinary least
    # squares' R^2 from numpy on exactly those rows.
    rows = spark.read.parquet(table).where("day < 400").toPandas()
    A = np.c_[rows["b"], rows["day"], np.ones(len(rows))]
    residual = A @ np.linalg.lstsq(A, rows["a"], rcond=None)[0] - rows["a"]
    r2 = 1 - residual @ residual / ((rows["a"] - rows["a"].mean()) ** 2).sum()
    assert report["metrics"]["r2"] == pytest.approx(r2, abs=1e-6)

    scored = str(tmp_path / "scored")
    assert run(spark, "predict", "--model", out, "--input", table, "--output", scored) == 0
    capsys.readouterr()
    result = spark.read.parquet(scored)
    expected = PipelineModel.load(out).transform(spark.read.parquet(table))
    assert result.count() == 600 and "prediction" in result.columns
    np.testing.assert_array_equal(
        np.array(result.orderBy("day").select("prediction").collect()).ravel(),
        np.array(expected.orderBy("day").select("prediction").collect()).ravel())


@pytest.mark.parametrize("argv, code, message", [
    (["train", "--model", "logistic", "--output", "x"], 2, "exactly one of --input"),
    (["train", "--model", "forest", "--table", "t", "--output", "x"], 2, "--model must be"),
    (["train", "--model", "logistic", "--input", "{table}", "--param", "regParam",
      "--output", "x"], 2, "--param wants NAME=VALUE"),
    (["train", "--model", "logistic", "--input", "{table}", "--label", "nope",
      "--output", "x"], 2, "label column 'nope' not found"),
    (["train", "--model", "logistic", "--input", "{table}", "--features", "a,zzz",
      "--output", "x"], 2, r"feature columns \['zzz'\] not found"),
    (["train", "--model", "svc", "--input", "{table}", "--label", "day", "--features", "a",
      "--output", "x"], 3, "label column 'day' must be 0 or 1"),
    (["train", "--model", "logistic", "--sql", "SELECT * FROM no_such_table",
      "--output", "x"], 1, "no_such_table"),
])
def test_errors_are_one_line_with_an_exit_status(spark, table, tmp_path, capsys, argv, code,
                                                 message):
    argv = [a.replace("{table}", table) for a in argv]
    argv[argv.index("x")] = str(tmp_path / "x")
    assert run(spark, *argv) == code
    # One line of ours (Spark's own log lines may come before it).
    error = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("gradspark: ")]
    assert len(error) == 1 and re.search(message, error[0])
    assert not os.path.exists(tmp_path / "x")  # nothing half-written


def test_spark_submit_runs_the_cli_file(table, tmp_path):
    # The batch path: spark-submit from the pyspark package, the CLI as a file.
    spark_submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    out = str(tmp_path / "submitted")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         os.path.join(ROOT, "python", "gradspark", "cli.py"), "train", "--model", "svc",
         "--input", table, "--features", "a,b", "--output", out],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])["metrics"]
    assert metrics["areaUnderROC"] > 0.8
    assert PipelineModel.load(out).stages[-1].numFeatures == 2


def _installed_script():
    """The console script pip installed beside this interpreter (a venv's bin/)."""
    script = os.path.join(os.path.dirname(sys.executable), "gradspark")
    if not os.path.exists(script):
        pytest.skip("no installed gradspark script beside this interpreter")
    return script


def _bare_environment(**extra):
    """cron's: no venv on PATH, no PYSPARK_PYTHON; python3 on PATH is the system's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.update(extra)
    return env


def test_installed_script_by_path_trains_quietly_on_a_local_master(table, tmp_path):
    """The script run by its path from a bare environment: its workers use its own
    interpreter (PATH's python3 cannot import gradspark), and the terminal gets the
    result line, not Spark's log lines or stage bars."""
    script, out = _installed_script(), str(tmp_path / "model")
    argv = [script, "train", "--model", "logistic", "--master", "local[2]", "--input",
            table, "--features", "a,b", "--param", "maxIter=20"]
    # The --verbose run goes alongside (its own output): two drivers start in the time of one.
    verbose = subprocess.Popen(argv + ["--output", str(tmp_path / "verbose"), "--verbose"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_bare_environment(), cwd=str(tmp_path))
    proc = subprocess.run(argv + ["--output", out], capture_output=True, text=True,
                          timeout=300, env=_bare_environment(), cwd=str(tmp_path))
    _, verbose_err = verbose.communicate(timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["metrics"]["areaUnderROC"] > 0.8
    assert PipelineModel.load(out).stages[-1].numFeatures == 2
    # The JVM's own notice of the vector module is the one line left: no flag silences it.
    spark_lines = [line for line in proc.stderr.splitlines()
                   if line.strip() and not line.startswith("WARNING: Using incubator modules")]
    assert not spark_lines, proc.stderr[-2000:]
    assert verbose.returncode == 0, verbose_err[-2000:]
    # gradspark's per-step log and Spark's own lines are back
    assert re.search(r"INFO gradspark.trainer: SGDLogisticRegression step 1/", verbose_err)
    assert "Spark" in verbose_err.replace("gradspark", "")


def test_installed_script_trains_on_spark_connect_as_on_a_classic_session(
        spark, table, tmp_path, capsys):
    """--remote local[2]: a local Connect server, the fit over DataFrame stages, the
    model saved over the classic run's output (its own kind: replaced) and readable;
    the metrics are the classic run's."""
    args = ["train", "--model", "logistic", "--input", table, "--features", "a,b",
            "--param", "maxIter=20"]
    script, out = _installed_script(), str(tmp_path / "model")
    assert run(spark, *args, "--output", out) == 0
    classic = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    before = os.path.getmtime(os.path.join(out, "metrics.json"))
    proc = subprocess.run([script, *args, "--remote", "local[2]", "--output", out],
                          capture_output=True, text=True, timeout=300,
                          env=_bare_environment(), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert os.path.getmtime(os.path.join(out, "metrics.json")) > before  # replaced
    connect = json.loads(proc.stdout.strip().splitlines()[-1])
    assert connect["iterations"] == classic["iterations"]
    for name, value in classic["metrics"].items():
        assert connect["metrics"][name] == pytest.approx(value, rel=1e-9)
    assert PipelineModel.load(out).stages[-1].numFeatures == 2
    spark_lines = [line for line in proc.stderr.splitlines()
                   if line.strip() and not line.startswith("WARNING: Using incubator modules")]
    assert not spark_lines, proc.stderr[-2000:]


LISTENING_PROBE = """
import ipaddress, json
from gradspark.jobs.session import _session

def listening(port):
    # /proc/net/tcp{,6}: addresses as 32-bit words in host (little-endian) order
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:  # LISTEN
                raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1]
                               for i in range(0, len(address), 8))
                found.append(str(ipaddress.ip_address(raw)))
    return found

spark = _session({"remote": "local[1]", "command": "probe"})
print(json.dumps({"count": spark.range(3).count(), "listening": listening(15002)}))
"""


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None)
                                  and ip.ipv4_mapped.is_loopback)


def test_a_local_spark_connect_server_listens_on_loopback_only(tmp_path):
    """``--remote local[...]`` starts pyspark's Connect server in this process: it binds
    loopback (127.0.0.1, which Java lists as ::ffff:127.0.0.1), not every interface as
    pyspark's default does, and the client reaches it."""
    proc = subprocess.run([sys.executable, "-c", LISTENING_PROBE], capture_output=True,
                          text=True, timeout=300, env=_bare_environment(), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    assert probe["count"] == 3
    assert probe["listening"] and all(map(_loopback, probe["listening"])), probe


def test_executors_without_gradspark_fail_with_one_line_that_says_how_to_fix(table,
                                                                          tmp_path):
    """Workers started with an interpreter that lacks gradspark (a cluster's, here the
    system python3 chosen on purpose): exit status 2 and one line naming the cure."""
    script, out = _installed_script(), str(tmp_path / "model")
    system_python = "/usr/bin/python3"
    probe = subprocess.run([system_python, "-c", "import gradspark"], capture_output=True)
    if not os.path.exists(system_python) or probe.returncode == 0:
        pytest.skip("needs a python3 without gradspark")
    proc = subprocess.run(
        [script, "train", "--model", "logistic", "--master", "local[2]", "--input", table,
         "--output", out, "--conf", f"spark.pyspark.python={system_python}"],
        capture_output=True, text=True, timeout=300, env=_bare_environment())
    assert proc.returncode == cli.BAD_ARGUMENTS
    lines = [line for line in proc.stderr.splitlines()
             if line.strip() and not line.startswith("WARNING: Using incubator modules")]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "cannot import gradspark" in lines[0] and system_python in lines[0]
    assert "PYSPARK_PYTHON" in lines[0] and "--py-files" in lines[0]
    assert not os.path.exists(out)


def test_summary_saves_its_loss_curve(spark, table, tmp_path):
    image = matplotlib_image()
    from gradspark import SGDLinearRegression
    from pyspark.ml.feature import VectorAssembler

    df = VectorAssembler(inputCols=["b", "day"], outputCol="features").transform(
        spark.read.parquet(table).drop("label").withColumnRenamed("a", "label"))
    summary = SGDLinearRegression(maxIter=20).fit(df).summary
    summary.saveLossPlot(str(tmp_path / "loss.png"))
    pixels = image.imread(str(tmp_path / "loss.png"))
    assert pixels.shape[:2] == (400, 600)
    # Not a blank canvas: the curve and axes are drawn in dark pixels.
    assert (pixels[..., :3].mean(axis=-1) < 0.5).mean() > 0.001


TORCH_MODULE = '''
import sys

import torch
from pyspark import cloudpickle

from gradspark import TorchEstimator

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors need not import it


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def estimator():
    return TorchEstimator(mlp, torch.nn.CrossEntropyLoss(), numWorkers=2, epochs=6,
                          batchSize=32, learningRate=0.02, labelDtype="int64", seed=3)
'''


def test_torch_model_from_a_factory(spark, table, tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    (tmp_path / "cli_torch_models.py").write_text(TORCH_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = str(tmp_path / "torch-model")
    assert run(spark, "train", "--model", "torch", "--torch", "cli_torch_models:estimator",
               "--input", table, "--features", "a,b", "--param", "epochs=8",
               "--output", out) == 0
    report = json.load(open(os.path.join(out, "metrics.json")))
    assert len(report["lossHistory"]) == 8  # --param overrode the factory's epochs
    assert report["lossHistory"][-1] < report["lossHistory"][0]
    # The saved pipeline scores like MLlib's logistic regression on a and b (the
    # label is nearly linear in them): accuracy within 0.05.
    df = spark.read.parquet(table)
    train, test = df.randomSplit([0.8, 0.2], seed=42)
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator

    reference = Pipeline(stages=cli.feature_stages(df, ["a", "b"]) +
                         [LogisticRegression()]).fit(train)
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy")
    ours = accuracy.evaluate(PipelineModel.load(out).transform(test))
    assert ours == pytest.approx(report["metrics"]["accuracy"], abs=1e-12)
    assert ours > accuracy.evaluate(reference.transform(test)) - 0.05
    assert run(spark, "train", "--model", "torch", "--input", table, "--output",
               str(tmp_path / "x")) == 2
    assert "--torch MODULE:FUNCTION" in capsys.readouterr().err


def test_output_never_replaces_what_the_user_did_not_ask_to_replace(spark, table, tmp_path,
                                                                   capsys):
    """An unrelated directory, the training data, the model: refused (exit 2, all left
    as they were) unless --overwrite; a rerun into the command's own output is fine."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    base = ["train", "--model", "logistic", "--input", table, "--features", "a,b",
            "--param", "maxIter=5"]
    assert run(spark, *base, "--output", str(precious)) == 2
    assert "not an earlier 'gradspark train' output" in capsys.readouterr().err
    assert (precious / "thesis.tex").read_text() == "years of work"

    before = sorted(os.listdir(table))
    assert run(spark, *base[:-4], "--features", "a,b", "--output", table) == 2
    assert "is also --input" in capsys.readouterr().err
    assert sorted(os.listdir(table)) == before

    model = str(tmp_path / "model")
    assert run(spark, *base, "--output", model) == 0
    assert run(spark, *base, "--output", model) == 0  # its own output: a rerun replaces it
    assert run(spark, "predict", "--model", model, "--input", table, "--output", model) == 2
    assert "is also --model" in capsys.readouterr().err
    PipelineModel.load(model)  # still the model

    scored = str(tmp_path / "scored")
    for _ in range(2):  # predictions replace earlier predictions
        assert run(spark, "predict", "--model", model, "--input", table, "--output",
                   scored) == 0
    assert run(spark, "predict", "--model", model, "--input", table, "--output",
               str(precious)) == 2
    assert (precious / "thesis.tex").exists()
    assert run(spark, *base, "--output", str(precious), "--overwrite") == 0  # asked for
    assert not (precious / "thesis.tex").exists()
    PipelineModel.load(str(precious))


@pytest.mark.parametrize("param, message", [
    ("maxIter=-5", "maxIter must be >= 0"),
    ("miniBatchFraction=0", "miniBatchFraction must be in"),
    ("stepSize=NaN", "stepSize must be a finite number"),
    ("regParam=1e400", "regParam must be a finite number"),
    ("tol=-1", "tol must be >= 0"),
])
def test_bad_params_exit_2_before_spark_starts(monkeypatch, capsys, param, message):
    def no_spark(job):
        raise AssertionError("Spark was started for a job with a bad --param")

    monkeypatch.setattr(cli, "_session", no_spark)
    assert cli.main(["train", "--model", "logistic", "--input", "x.parquet",
                     "--output", "y", "--param", param]) == 2
    assert message in capsys.readouterr().err


def test_blank_cells_and_the_label_among_features_are_named(spark, tmp_path, capsys):
    csv = tmp_path / "data.csv"
    csv.write_text("a,b,label\n1.0,2.0,1\n0.5,,0\n-1.0,3.0,0\n2.0,1.0,1\n")
    out = str(tmp_path / "out")
    assert run(spark, "train", "--model", "logistic", "--input", str(csv), "--output",
               out, "--test-fraction", "0") == 3
    assert "column 'b' is blank, null or NaN in 1 rows" in capsys.readouterr().err
    assert not os.path.exists(out)
    assert run(spark, "train", "--model", "logistic", "--input", str(csv), "--features",
               "a,label", "--output", out) == 2
    assert "label column 'label' is among --features" in capsys.readouterr().err
