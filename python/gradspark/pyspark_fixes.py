"""Fixes for pyspark bugs that give gradspark users silently wrong results.

Installed once, on ``import gradspark``; each fix is narrow, idempotent, and checks
for the bug's symptom before acting, so a pyspark that fixed it is left alone.

- ``CrossValidatorModel.load`` with persisted sub-models: pyspark's Python reader builds
  the table as ``[[None] * n] * numFolds``, one list shared by every fold, so after
  loading every fold's sub-models are the last fold's. MLlib's own estimators are read
  through the same reader; our stages have no Java side to fall back on. The fix re-reads
  the sub-models into one list per fold when the loaded table aliases its rows.
"""

from __future__ import annotations

import functools
import logging
import os

from pyspark.ml.tuning import CrossValidatorModelReader
from pyspark.ml.util import DefaultParamsReader

logger = logging.getLogger(__name__)


def _fold_lists_are_shared(sub_models) -> bool:
    return len({id(fold) for fold in sub_models}) < len(sub_models)


def _fixed_cross_validator_load(load):
    @functools.wraps(load)
    def fixed(self, path: str):
        model = load(self, path)
        sub_models = model.subModels
        if sub_models and _fold_lists_are_shared(sub_models):
            logger.debug("re-reading %s's sub-models one fold at a time (pyspark's reader "
                         "shares one list between folds)", path)
            model.subModels = [
                [DefaultParamsReader.loadParamsInstance(
                    os.path.join(path, "subModels", f"fold{fold}", f"{index}"),
                    self.sparkSession) for index in range(len(sub_models[fold]))]
                for fold in range(len(sub_models))]
        return model

    fixed._gradspark_fix = True
    return fixed


def install() -> None:
    """Install every fix (idempotent)."""
    if not getattr(CrossValidatorModelReader.load, "_gradspark_fix", False):
        CrossValidatorModelReader.load = _fixed_cross_validator_load(
            CrossValidatorModelReader.load)
