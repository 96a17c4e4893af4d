"""pyspark-style ``setX``/``getX`` methods, generated for every Param a class declares.

pyspark.ml writes one setter and one getter per Param by hand; MLlib code chains them
(``LogisticRegression().setMaxIter(10).setRegParam(0.01)``). A class that mixes in
:class:`ParamAccessors` gets them generated at class creation for every Param it has,
MLlib's and ours alike, so no Param can be added without its accessors. Methods the
class (or a base, such as MLlib's own Params mixins) already defines are kept: MLlib's
``setThreshold`` clears ``thresholds``, and that rule must hold here too.

Estimators get a setter for every Param. Models, as MLlib's, get setters only for the
Params that change what ``transform`` writes (:data:`MODEL_SETTERS`); getters for all.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, FrozenSet, Optional

from pyspark.ml.param import Param, Params

# The setters MLlib's linear models have (JavaPredictionModel, the classification
# models' probability/raw columns and thresholds).
MODEL_SETTERS: FrozenSet[str] = frozenset({
    "featuresCol", "predictionCol", "rawPredictionCol", "probabilityCol",
    "threshold", "thresholds",
})


def accessor_name(prefix: str, param: str) -> str:
    """``accessor_name("set", "maxIter") == "setMaxIter"``."""
    return prefix + param[0].upper() + param[1:]


def _getter(name: str) -> Callable[[Params], Any]:
    def get(self: Params) -> Any:
        return self.getOrDefault(name)

    get.__name__ = accessor_name("get", name)
    get.__doc__ = f"Gets the value of :py:attr:`{name}` or its default value."
    return get


def _setter(name: str) -> Callable[[Params, Any], Params]:
    def set_(self: Params, value: Any) -> Params:
        return self._set(**{name: value})

    set_.__name__ = accessor_name("set", name)
    set_.__doc__ = f"Sets the value of :py:attr:`{name}`."
    return set_


def declared_params(cls: type) -> Dict[str, Param]:
    """Every Param declared on ``cls`` or a base, by name."""
    found: Dict[str, Param] = {}
    for klass in reversed(cls.__mro__):
        found.update({k: v for k, v in vars(klass).items() if isinstance(v, Param)})
    return found


class ParamAccessors(Params):
    """Mixin: generates the missing ``getX``/``setX`` of every Param at class creation.

    ``_setter_params`` says which Params get setters: ``None`` for all (estimators),
    or a set of names (models: :data:`MODEL_SETTERS`).
    """

    _setter_params: Optional[FrozenSet[str]] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        setters = cls._setter_params
        for name in declared_params(cls):
            getter = accessor_name("get", name)
            if not hasattr(cls, getter):
                setattr(cls, getter, _getter(name))
            setter = accessor_name("set", name)
            if (setters is None or name in setters) and not hasattr(cls, setter):
                setattr(cls, setter, _setter(name))
