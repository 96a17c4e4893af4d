"""Drop-in means pyspark.ml's behaviour: introspect MLlib's classes at run time and check
ours against them, Param by Param and method by method, then summary field by field on
the same data. Nothing here lists MLlib's API by hand, so a new pyspark that adds a
Param or a method makes these tests name it."""

from __future__ import annotations

import inspect
from typing import Any, Dict

import numpy as np
import pytest
from pyspark.ml.classification import (
    LinearSVC,
    LinearSVCModel,
    LogisticRegression,
    LogisticRegressionModel,
)
from pyspark.ml.linalg import DenseMatrix, Vectors
from pyspark.ml.param import TypeConverters
from pyspark.ml.regression import LinearRegression, LinearRegressionModel

from gradspark import (
    SGDLinearRegression,
    SGDLinearRegressionModel,
    SGDLinearSVC,
    SGDLinearSVCModel,
    SGDLogisticRegression,
    SGDLogisticRegressionModel,
)
from gradspark.persistence import to_matrix
from gradspark.summaries import training_summary

PAIRS = [
    (LogisticRegression, SGDLogisticRegression, LogisticRegressionModel,
     SGDLogisticRegressionModel),
    (LinearRegression, SGDLinearRegression, LinearRegressionModel, SGDLinearRegressionModel),
    (LinearSVC, SGDLinearSVC, LinearSVCModel, SGDLinearSVCModel),
]
ESTIMATORS = [pytest.param(m, o, id=m.__name__) for m, o, _, _ in PAIRS]
MODELS = [pytest.param(m, o, id=m.__name__) for _, _, m, o in PAIRS]

# Deliberate differences, each with its reason (docs/mllib_parity.md, "Deliberate differences").
# The bound matrices' converter also reads a list of rows: our writers save a Matrix
# that way (JSON has no Matrix), so a saved estimator with bounds loads back.
SUPERSET_CONVERTERS = {"lowerBoundsOnCoefficients": (TypeConverters.toMatrix, to_matrix),
                       "upperBoundsOnCoefficients": (TypeConverters.toMatrix, to_matrix)}


def _public(cls) -> Dict[str, Any]:
    return {name: inspect.getattr_static(cls, name) for name in dir(cls)
            if not name.startswith("_")}


def _kind(value) -> str:
    if isinstance(value, property):
        return "property"
    if isinstance(value, classmethod):
        return "classmethod"
    if callable(value) or isinstance(value, staticmethod):
        return "method"
    return "attribute"


def _positional_names(function) -> list:
    parameters = list(inspect.signature(function).parameters.values())[1:]  # self
    return [p.name for p in parameters
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


@pytest.mark.parametrize("mllib_cls,our_cls", ESTIMATORS)
def test_every_mllib_param_has_our_counterpart_with_its_name_default_converter_and_doc(
        spark, mllib_cls, our_cls):
    mllib, ours = mllib_cls(), our_cls()
    for param in mllib.params:
        assert ours.hasParam(param.name), f"{our_cls.__name__} lacks Param {param.name}"
        counterpart = ours.getParam(param.name)
        assert counterpart.doc == param.doc, param.name
        expected = SUPERSET_CONVERTERS.get(param.name, (param.typeConverter,) * 2)
        assert (param.typeConverter, counterpart.typeConverter) == expected, param.name
        assert mllib.hasDefault(param) == ours.hasDefault(counterpart), param.name
        if mllib.hasDefault(param):
            assert ours.getOrDefault(counterpart) == mllib.getOrDefault(param), param.name


@pytest.mark.parametrize("mllib_cls,our_cls", ESTIMATORS + MODELS)
def test_every_public_mllib_method_exists_with_its_call_shape(spark, mllib_cls, our_cls):
    ours = _public(our_cls)
    for name, theirs in _public(mllib_cls).items():
        assert name in ours, f"{our_cls.__name__}.{name} is missing ({mllib_cls.__name__} has it)"
        kind = _kind(theirs)
        assert _kind(ours[name]) == kind, (name, kind, _kind(ours[name]))
        if kind == "method" and name not in ("__init__", "setParams"):
            theirs_fn = getattr(mllib_cls, name)
            ours_fn = getattr(our_cls, name)
            assert _positional_names(ours_fn)[:len(_positional_names(theirs_fn))] \
                == _positional_names(theirs_fn), name


@pytest.mark.parametrize("mllib_cls,our_cls", ESTIMATORS)
def test_every_param_of_ours_has_a_chaining_setter_and_a_getter(spark, mllib_cls, our_cls):
    """MLlib's constructor keywords are accepted by ours, and every Param (MLlib's and
    gradspark's own) has ``setX`` returning the estimator and ``getX`` reading it back."""
    mllib_keywords = set(inspect.signature(mllib_cls.__init__).parameters) - {"self"}
    our_keywords = set(inspect.signature(our_cls.__init__).parameters) - {"self"}
    assert mllib_keywords <= our_keywords, mllib_keywords - our_keywords
    assert mllib_keywords <= set(inspect.signature(our_cls.setParams).parameters)
    estimator = our_cls()
    for param in estimator.params:
        name = param.name[0].upper() + param.name[1:]
        assert callable(getattr(estimator, f"get{name}", None)), f"get{name}"
        if param.name == "initialModel":
            continue
        value = estimator.getOrDefault(param) if estimator.hasDefault(param) else None
        if value is None:
            continue
        assert getattr(estimator, f"set{name}")(value) is estimator, f"set{name}"
        assert getattr(estimator, f"get{name}")() == value


def test_mllib_pipeline_code_runs_with_the_class_names_swapped(spark):
    """The first lines most MLlib code has, chained setters included."""
    estimator = (SGDLogisticRegression().setMaxIter(10).setRegParam(0.01)
                 .setElasticNetParam(0.0).setFamily("binomial").setStandardization(True)
                 .setTol(1e-6).setAggregationDepth(2).setFeaturesCol("features")
                 .setLabelCol("label").setThreshold(0.5))
    assert estimator.getMaxIter() == 10 and estimator.getRegParam() == 0.01
    assert SGDLinearRegression().setSolver("l-bfgs").setLoss("huber").setEpsilon(1.5) \
        .getEpsilon() == 1.5
    assert SGDLinearSVC().setMaxBlockSizeInMB(1.0).getMaxBlockSizeInMB() == 1.0


@pytest.mark.parametrize("kwargs", [
    dict(threshold=0.42, thresholds=[0.5, 0.5]),
    dict(threshold=0.3, thresholds=[0.2, 0.3, 0.5]),
])
def test_conflicting_threshold_and_thresholds_raise_as_in_mllib(spark, kwargs):
    with pytest.raises(ValueError) as theirs:
        LogisticRegression(**kwargs)
    with pytest.raises(ValueError) as ours:
        SGDLogisticRegression(**kwargs)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError):
        SGDLogisticRegression().setParams(**kwargs)
    # MLlib's setters clear the other Param, so chained setters never conflict.
    estimator = SGDLogisticRegression(thresholds=[0.5, 0.5]).setThreshold(0.42)
    assert not estimator.isSet(estimator.thresholds) and estimator.getThreshold() == 0.42


@pytest.fixture(scope="module")
def dropin_data(spark):
    g = np.random.default_rng(11)
    X = g.normal(size=(400, 4)) * [1.0, 3.0, 0.5, 2.0]
    margin = X @ [0.8, -0.4, 1.5, 0.2] + 0.3
    binary = (margin + g.logistic(size=400) > 0).astype(float)
    real = X @ [1.0, -2.0, 0.5, 0.25] + 1.0 + g.normal(size=400)
    weight = g.uniform(0.5, 2.0, size=400)
    rows = [(Vectors.dense(x), float(b), float(r), float(w))
            for x, b, r, w in zip(X, binary, real, weight)]
    return spark.createDataFrame(rows, ["features", "label", "real", "weight"]).cache()


def _summary_fields(summary) -> Dict[str, Any]:
    """Every public numeric field of an MLlib (or our) summary, introspected."""
    fields = {}
    for name in dir(type(summary)):
        if name.startswith("_") or not isinstance(inspect.getattr_static(type(summary), name),
                                                  property):
            continue
        try:
            value = getattr(summary, name)
        except Exception:  # noqa: BLE001 - e.g. normal-solver-only fields of an L-BFGS fit
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            fields[name] = float(value)
        elif isinstance(value, list) and value and all(isinstance(v, (int, float))
                                                       for v in value):
            fields[name] = np.asarray(value, dtype=float)
    return fields


@pytest.mark.parametrize("mllib_cls,our_cls,params,rtol", [
    (LogisticRegression, SGDLogisticRegression, dict(regParam=0.01, weightCol="weight"), 1e-6),
    (LinearRegression, SGDLinearRegression, dict(regParam=0.1, weightCol="weight",
                                                 labelCol="real", solver="l-bfgs"), 1e-6),
    (LinearRegression, SGDLinearRegression, dict(regParam=0.1, weightCol="weight",
                                                 labelCol="real"), 1e-6),
    # The hinge loss is not differentiable: both L-BFGS runs stop near the optimum, not
    # at one point, so the metrics agree as far as the coefficients do.
    (LinearSVC, SGDLinearSVC, dict(regParam=0.01, weightCol="weight"), 1e-3),
], ids=["LogisticRegression", "LinearRegression-lbfgs", "LinearRegression-auto",
        "LinearSVC"])
def test_every_summary_field_equals_mllibs_on_the_same_data(spark, dropin_data, mllib_cls,
                                                           our_cls, params, rtol):
    """Both fitted on the same rows to a tight tolerance; every numeric field MLlib's
    training summary has (metrics, counts, inference statistics; not the optimizer's own
    history), ours has with the same value. The fit's uid is the estimator's, as in MLlib."""
    # Tight enough for every field to settle; the hinge loss's OWL-QN (a Spark job per
    # iteration in MLlib) would run all 300 iterations at 1e-10 for no closer agreement.
    tight = dict(params, tol=1e-8 if mllib_cls is LinearSVC else 1e-10, maxIter=300)
    estimator = our_cls(**tight)
    mllib = mllib_cls(**tight).fit(dropin_data)
    ours = estimator.fit(dropin_data)
    assert ours.uid == estimator.uid
    history_fields = {"objectiveHistory", "totalIterations"}
    theirs_fields = _summary_fields(training_summary(mllib))
    ours_fields = _summary_fields(training_summary(ours))
    assert theirs_fields, "no numeric summary field found on MLlib's summary"
    for name, value in theirs_fields.items():
        if name in history_fields:
            continue
        assert name in ours_fields, f"summary field {name} is missing"
        np.testing.assert_allclose(ours_fields[name], value, rtol=rtol, atol=1e-9,
                                   err_msg=name)


def test_bound_matrices_still_take_what_mllib_takes(spark):
    bound = DenseMatrix(1, 2, [0.0, 1.0])
    assert SGDLogisticRegression(lowerBoundsOnCoefficients=bound) \
        .getLowerBoundsOnCoefficients() == bound
    assert to_matrix([[0.0, 1.0]]) == bound


EXPORTS = {
    "LogisticRegression": (SGDLogisticRegression, LogisticRegressionModel, dict(regParam=0.01)),
    "LinearRegression": (SGDLinearRegression, LinearRegressionModel,
                         dict(labelCol="real", regParam=0.1)),
    "LinearSVC": (SGDLinearSVC, LinearSVCModel, dict(regParam=0.01)),
}


@pytest.fixture(scope="module")
def exports(spark, dropin_data, tmp_path_factory):
    """Each estimator's fit and toMLlib() model, saved as an MLlib pipeline, and the
    scores a driver that never imports gradspark gives the three (one job for all)."""
    from pyspark.ml import PipelineModel
    from pyspark.sql import functions as F

    from job_support import run_job

    work = tmp_path_factory.mktemp("exports")
    rows = dropin_data.withColumn("id", F.monotonically_increasing_id())
    rows.write.parquet(str(work / "rows"))
    fitted = {}
    for name, (our_cls, _, params) in EXPORTS.items():
        ours = our_cls(**params).fit(dropin_data)
        fitted[name] = (ours, ours.toMLlib())
        PipelineModel([fitted[name][1]]).save(str(work / name))
    elsewhere = run_job("mllib_export_job.py", str(work / "rows"),
                        *[str(work / name) for name in EXPORTS], timeout=300)
    return rows, str(work / "rows"), fitted, elsewhere


@pytest.mark.parametrize("name", list(EXPORTS))
def test_to_mllib_gives_mllibs_model_with_our_predictions(spark, exports, tmp_path, name):
    """toMLlib() is pyspark.ml's own class with our coefficients and uid; its JVM
    transform equals ours (1e-12). Saved as an MLlib pipeline, it loads and scores in a
    driver that never imports gradspark, with no Python on the executors."""
    rows, rows_path, fitted, elsewhere = exports
    mllib_model_cls = EXPORTS[name][1]
    ours, exported = fitted[name]
    assert type(exported) is mllib_model_cls and exported.uid == ours.uid
    np.testing.assert_array_equal(exported.coefficients.toArray(), ours.coefficients.toArray())
    assert exported.intercept == ours.intercept
    columns = [c for c in ("prediction", "rawPrediction", "probability")
               if ours.hasParam(f"{c}Col")]

    def scored(model):
        frame = model.transform(rows).orderBy("id").select(*columns).collect()
        return {c: np.array([r[c].toArray() if hasattr(r[c], "toArray") else r[c]
                             for r in frame], dtype=float) for c in columns}

    mine, theirs = scored(ours), scored(exported)
    for c in columns:
        np.testing.assert_allclose(theirs[c], mine[c], rtol=1e-12, atol=1e-12, err_msg=c)
    assert elsewhere["gradspark_imported"] is False
    for c in columns:
        np.testing.assert_allclose(np.array(elsewhere[name][c], dtype=float), mine[c],
                                   rtol=1e-12, atol=1e-12, err_msg=c)
    with pytest.raises(Exception, match="already exists"):
        ours.saveAsMLlib(rows_path)  # never replaces what is there
    if mllib_model_cls is LinearRegressionModel:  # MLlib writes PMML for this one
        exported.write().format("pmml").save(str(tmp_path / "pmml"))
        pmml = spark.read.text(str(tmp_path / "pmml")).collect()
        text = "\n".join(r.value for r in pmml)
        assert "<RegressionModel" in text
        for value in ours.coefficients.toArray():
            assert f'coefficient="{value!r}"' in text or f'coefficient="{value}"' in text


def test_cross_validator_sub_models_load_back_fold_by_fold(spark, dropin_data, tmp_path):
    """collectSubModels=True, saved and loaded: each fold's sub-models are that fold's
    (pyspark's reader alone gives every fold the last fold's), and each keeps its uid
    and coefficients; every sub-model's uid is the estimator's, as in MLlib."""
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.tuning import CrossValidator, CrossValidatorModel, ParamGridBuilder

    estimator = SGDLogisticRegression(maxIter=20)
    grid = ParamGridBuilder().addGrid(estimator.regParam, [0.01, 0.1]).build()
    fitted = CrossValidator(estimator=estimator, estimatorParamMaps=grid, numFolds=3, seed=7,
                            evaluator=BinaryClassificationEvaluator(),
                            collectSubModels=True).fit(dropin_data)
    fitted.write().save(str(tmp_path / "cv"))
    loaded = CrossValidatorModel.load(str(tmp_path / "cv"))
    assert len(loaded.subModels) == 3
    coefficients = [[m.coefficients.toArray() for m in fold] for fold in fitted.subModels]
    assert not np.allclose(coefficients[0][0], coefficients[2][0])  # folds do differ
    for fold, (ours, read) in enumerate(zip(fitted.subModels, loaded.subModels)):
        for index, (model, back) in enumerate(zip(ours, read)):
            assert model.uid == back.uid == estimator.uid
            np.testing.assert_array_equal(back.coefficients.toArray(),
                                          coefficients[fold][index])


@pytest.fixture(scope="module")
def breast_cancer(spark):
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, y)],
                                 ["features", "label"]).repartition(2).cache()


@pytest.mark.parametrize("path", [
    dict(engine="jvm", executionStrategy="jobPerStep"),
    dict(engine="python", executionStrategy="jobPerStep"),
    dict(engine="python", executionStrategy="resident"),
], ids=["jvm-jobPerStep", "python-jobPerStep", "resident"])
def test_default_params_agree_with_mllib_on_every_path(spark, breast_cancer, path):
    """``tol`` stops L-BFGS by MLlib's own rule (Breeze's), so with MLlib's default
    Params (tol=1e-6) each execution path lands where MLlib does, to 1e-5 relative, on
    badly scaled real data (breast cancer: features from 1e-3 to 4e3)."""
    reference = LogisticRegression(regParam=0.01).fit(breast_cancer)
    ours = SGDLogisticRegression(regParam=0.01, **path).fit(breast_cancer)
    assert training_summary(ours).extra["executionStrategy"] == path["executionStrategy"]
    expected = np.r_[reference.coefficients.toArray(), reference.intercept]
    found = np.r_[ours.coefficients.toArray(), ours.intercept]
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("ours,theirs", [
    (lambda: SGDLogisticRegression(regParam=0.01), lambda: LogisticRegression(regParam=0.01)),
    # (on these well-separated classes the hinge loss's last iterations move no prediction,
    # and MLlib's OWL-QN runs a Spark job per iteration)
    (lambda: SGDLinearSVC(regParam=0.01, maxIter=15),
     lambda: LinearSVC(regParam=0.01, maxIter=15)),
], ids=["LogisticRegression", "LinearSVC"])
def test_one_vs_rest_takes_our_classifiers_as_mllibs(spark, ours, theirs):
    """pyspark.ml's OneVsRest, unchanged, over our binary classifiers: the same
    predictions as over MLlib's (rows on a class boundary aside)."""
    from pyspark.ml.classification import OneVsRest

    g = np.random.default_rng(5)
    centers = np.array([[0.0, 3.0], [3.0, -1.0], [-3.0, -1.0]])
    labels = np.repeat([0, 1, 2], 60)
    X = centers[labels] + g.normal(size=(180, 2))
    df = spark.createDataFrame([(Vectors.dense(x), float(t)) for x, t in zip(X, labels)],
                               ["features", "label"]).cache()
    mine = OneVsRest(classifier=ours()).fit(df).transform(df).select("prediction").collect()
    # MLlib's side fits its binary classifiers concurrently (only the time changes)
    mllib = OneVsRest(classifier=theirs(), parallelism=3).fit(df).transform(df) \
        .select("prediction").collect()
    same = np.mean([a.prediction == b.prediction for a, b in zip(mine, mllib)])
    assert same >= 0.99
    assert np.mean([r.prediction == t for r, t in zip(mine, labels)]) > 0.9
