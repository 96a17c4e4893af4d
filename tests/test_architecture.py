"""The package's architecture, checked from its source (docs/architecture.md draws it).

Layers, lowest first: a module may import from its own layer or one below it, never
from one above. The two wings (``trainer``: linear models, ``neural``: torch) never
import each other. No import circle, not even through imports inside functions. No
module over 400 lines. Test-only fault injection (``gradspark.testing``) enters
through one seam per wing. A fit's execution path is decided in ``gradspark.fit``.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict
from typing import Dict, List, Set, Tuple

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "python" / "gradspark"

LAYERS: List[Set[str]] = [
    {"connect", "comm", "testing", "report", "storage", "pyspark_fixes", "accessors"},
    {"rpc"},  # authenticated RPC between the driver and tasks
    {"stages"},  # block sources for long-running stages, task slots
    {"jvm"},  # the kernels jar: build and load
    {"data"},  # DataFrames -> validated, cached blocks and statistics
    {"losses", "optim", "checkpoints", "params", "persistence", "summaries"},
    {"integrations"},  # progress, TensorBoard, MLflow
    {"engine"},  # gradient sums: job per step, resident rounds, the worker step
    {"trainer", "neural"},  # the two wings: linear models, torch models
    {"fit"},  # the fit plan: a linear fit's path, decided once
    {"estimators"},  # the public pyspark.ml classes
    {"jobs", "cli"},  # the gradspark command
    {"__init__"},
]
WINGS = ("trainer", "neural")
MAX_LINES = 400
# The only modules that read the fault-injection plan: a linear fit's plan, and
# TorchEstimator (the neural wing's counterpart of the plan).
FAULT_SEAMS = {"gradspark.fit.plan", "gradspark.estimators.torch_estimator"}


def _modules() -> Dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(path: pathlib.Path) -> List[Tuple[str, int]]:
    """(imported gradspark module, line) for every import, also inside functions, except
    those under ``if TYPE_CHECKING:`` (annotations only: nothing runs)."""
    tree = ast.parse(path.read_text())
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(sub) for sub in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            targets = [n for n in names if n in MODULES] or [node.module]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        found += [(t, node.lineno) for t in targets if t.split(".")[0] == "gradspark"]
    return found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(package: str) -> int:
    for index, members in enumerate(LAYERS):
        if package in members:
            return index
    raise AssertionError(f"package {package!r} is in no layer: add it to LAYERS and to "
                         "docs/architecture.md")


def test_every_package_has_a_layer():
    for module in MODULES:
        _layer(_package(module))


def test_no_import_climbs_a_layer_and_the_wings_stay_apart():
    wrong = []
    for module, path in MODULES.items():
        here = _package(module)
        for target, line in _imports(path):
            there = _package(target)
            if there == here:
                continue
            if _layer(there) > _layer(here):
                wrong.append(f"{path.name}:{line} {module} imports {target} (a layer up)")
            if {here, there} == set(WINGS):
                wrong.append(f"{path.name}:{line} {module} imports {target} (the other wing)")
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    graph: Dict[str, Set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        for target, _ in _imports(path):
            # a package's __init__ is imported with any of its modules
            target = target if target in MODULES else target.rsplit(".", 1)[0]
            if target != module and target in MODULES:
                graph[module].add(target)
    # Tarjan's strongly connected components
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    circles: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in list(MODULES):
        if module not in index:
            visit(module)
    assert not circles, f"import circles: {circles}"


def test_no_module_over_the_size_limit():
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    too_long = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


def test_fault_injection_enters_through_its_seams_only():
    readers = {module for module, path in MODULES.items()
               for target, _ in _imports(path)
               if target.startswith("gradspark.testing") and _package(module) != "testing"}
    assert readers == FAULT_SEAMS


@pytest.mark.parametrize("call", ["getExecutionStrategy()", "getEngine()"])
def test_the_execution_path_is_decided_in_the_fit_plan(call):
    deciders = {module for module, path in MODULES.items() if call in path.read_text()}
    assert deciders <= {"gradspark.fit.plan", "gradspark.fit.rules"}, deciders


def test_one_worker_step():
    """Sampling, the fault seam and the sums of a worker's rows live in the worker step:
    the long-running loops call it instead of repeating it."""
    callers = {module for module, path in MODULES.items()
               if "grouped_sums(" in path.read_text() or "before_batch(" in path.read_text()}
    # python.py defines grouped_sums and runs the job-per-step partition task; touched.py
    # sums a sparse batch; testing/faults.py defines the hooks.
    assert callers <= {"gradspark.engine.worker_step", "gradspark.engine.python",
                       "gradspark.engine.touched", "gradspark.testing.faults"}, callers
