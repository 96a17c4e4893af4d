"""MLflow: our models in ``mlflow.pyspark.ml.autolog()`` runs, and our training curves.

MLflow's autolog patches ``Estimator.fit``, so it already logs our Params; it
logs the fitted *model* only for classes on its allowlist, a file a library
ships and the session's conf names. ::

    from gradspark.integrations.mlflow_tracking import use_mlflow_allowlist

    use_mlflow_allowlist(spark)          # before autolog: it reads the file then
    mlflow.pyspark.ml.autolog()
    model = SGDLogisticRegression().fit(df)   # Params, loss curve, metrics, model

While autologging for ``pyspark.ml`` is on and a run is active, every fit of
a linear estimator also logs (:func:`log_training`):

* ``training_loss``: the summary's ``objectiveHistory``, one step per entry;
* the training summary's final metrics, prefixed ``training_``: accuracy,
  weighted precision/recall/F1 and, for binary models, areaUnderROC; RMSE,
  MAE, r2 and explained variance for regression.

Nothing here imports MLflow unless the caller already has: a fit in a process
that never imported it pays nothing. MLflow is an optional extra
(``pip install gradspark[mlflow]``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Dict

logger = logging.getLogger(__name__)

ALLOWLIST_CONF = "spark.mlflow.pysparkml.autolog.logModelAllowlistFile"
ALLOWLIST_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "mlflow_allowlist.txt")
_FLAVOR = "pyspark.ml"


def use_mlflow_allowlist(spark) -> str:
    """Point this session's ``logModelAllowlistFile`` at the packaged allowlist (MLflow's
    defaults plus our models); call it before ``mlflow.pyspark.ml.autolog()``. Returns
    the file's path. A path the user already set is left alone (with a warning)."""
    conf = spark.sparkContext._conf
    current = conf.get(ALLOWLIST_CONF, None)
    if current and current != ALLOWLIST_FILE:
        logger.warning("%s is already %s: left as it is; add our models to it from %s",
                       ALLOWLIST_CONF, current, ALLOWLIST_FILE)
        return current
    conf.set(ALLOWLIST_CONF, ALLOWLIST_FILE)
    return ALLOWLIST_FILE


def _autologging() -> bool:
    if "mlflow" not in sys.modules:
        return False
    import mlflow
    from mlflow.utils.autologging_utils import autologging_is_disabled

    return mlflow.active_run() is not None and not autologging_is_disabled(_FLAVOR)


def training_metrics(summary) -> Dict[str, float]:
    """The final metrics of a training summary, by MLlib's names."""
    names = ("accuracy", "weightedPrecision", "weightedRecall", "areaUnderROC",
             "rootMeanSquaredError", "meanAbsoluteError", "r2", "explainedVariance")
    metrics = {name: float(getattr(summary, name)) for name in names
               if hasattr(type(summary), name)}
    if hasattr(summary, "weightedFMeasure"):
        metrics["weightedFMeasure"] = float(summary.weightedFMeasure())
    return metrics


def log_training(model) -> None:
    """Log ``model``'s loss curve and final training metrics to the active MLflow run,
    when MLflow's pyspark.ml autologging is on (see the module doc). Never fails a fit."""
    try:
        if not _autologging():
            return
        import mlflow
        from mlflow.entities import Metric

        summary = model.summary() if callable(model.summary) else model.summary
        history = list(summary.objectiveHistory)
        client, run = mlflow.MlflowClient(), mlflow.active_run().info.run_id
        stamp = int(time.time() * 1000)
        client.log_batch(run, metrics=[Metric("training_loss", float(v), stamp, step)
                                       for step, v in enumerate(history)])
        mlflow.log_metrics({f"training_{k}": v for k, v in training_metrics(summary).items()})
    except Exception as error:  # noqa: BLE001 - tracking must never cost the user a model
        logger.warning("could not log the training curve to MLflow: %s", error)
