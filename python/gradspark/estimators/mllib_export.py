"""Export a fitted gradspark linear model as MLlib's own model class.

``saveAsMLlib(path)`` writes MLlib's persistence layout (``metadata/`` JSON naming the
JVM class, ``data/`` Parquet with MLlib's columns), so MLlib's reader loads it: in a
Scala/Java job, on a Spark Connect server without gradspark, or in pyspark as
``LogisticRegressionModel.load(path)``. ``toMLlib()`` does that into a temporary
directory and loads it back, returning pyspark.ml's model, whose ``transform`` runs in
the JVM with no Python on the executors. Only DataFrame writes are used, so both work
on classic and Connect sessions.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from typing import Any, Optional

from pyspark.ml.param import Params
from pyspark.sql import SparkSession

from gradspark.accessors import declared_params
from gradspark.storage import entries


def _simple(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str))


def mllib_metadata(model: Any, spark: SparkSession) -> str:
    """MLlib's metadata JSON for ``model``: the JVM class, our uid, and the values of the
    Params MLlib's model class has (matrices and vectors, bounds on a fit, left out:
    they do not change a prediction)."""
    names = set(declared_params(model._mllib_params))
    params, defaults = {}, {}
    for param in model.params:
        if param.name not in names:
            continue
        if model.isSet(param) and _simple(model.getOrDefault(param)):
            params[param.name] = model.getOrDefault(param)
        if model.hasDefault(param) and _simple(model._defaultParamMap[param]):
            defaults[param.name] = model._defaultParamMap[param]
    return json.dumps({"class": model._mllib_class.__module__.replace("pyspark", "org.apache.spark")
                       + "." + model._mllib_class.__name__,
                       "timestamp": int(time.time() * 1000), "sparkVersion": spark.version,
                       "uid": model.uid, "paramMap": params, "defaultParamMap": defaults})


def save_as_mllib(model: Any, path: str, overwrite: bool = False) -> None:
    """Write ``model`` in MLlib's layout at ``path``, refusing a path that exists unless
    ``overwrite`` (which replaces only the ``metadata/`` and ``data/`` it writes)."""
    spark = SparkSession.active()
    if not overwrite and entries(spark, path) is not None:
        raise FileExistsError(f"{path} already exists: saveAsMLlib never replaces what is "
                              "there; pass overwrite=True or another path")
    mode = "overwrite" if overwrite else "error"
    spark.createDataFrame([(mllib_metadata(model, spark),)], "value string").coalesce(1) \
        .write.mode(mode).text(f"{path}/metadata")
    row, schema = model._mllib_data()
    spark.createDataFrame([row], schema).coalesce(1).write.mode(mode).parquet(f"{path}/data")


def to_mllib(model: Any, path: Optional[str] = None) -> Params:
    """pyspark.ml's model class holding ``model``'s coefficients. Without ``path`` the
    layout goes through a temporary local directory, removed once MLlib has read it
    (the driver's own disk: on a cluster give a ``path`` every executor can read)."""
    if path is not None:
        save_as_mllib(model, path)
        return model._mllib_class.load(path)
    scratch = tempfile.mkdtemp(prefix="gradspark-mllib-")
    try:
        save_as_mllib(model, f"{scratch}/model")
        return model._mllib_class.load(f"{scratch}/model")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
