"""The floors of docs/architecture.md hold: every import goes down, nothing circles.

The contracts live in pyproject.toml (`[tool.importlinter]`, import-linter's `layers` and
`forbidden` contracts); import-linter is the field's tool for exactly this, and its graph
(grimp) also answers the cycle questions below.  Each check is shown to fail on a planted
import in a copy of the tree, so a contract that checks nothing would be caught.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MOVED_ROOMS = ("kai_ray.rpc", "kai_ray.cli", "kai_ray.server", "kai_ray.split", "kai_ray.cluster.kube")
"""The rooms issue 36 moved or carved: no import circle in them even under TYPE_CHECKING."""


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over `tree`'s packages with `tree`'s pyproject.toml, in a process of its own
    so that the tree's modules, not the installed ones, are the ones read."""
    environment = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'operators'}"}
    script = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports('pyproject.toml', no_cache=True, no_logo=True))"
    )
    return subprocess.run(
        [sys.executable, "-c", script], cwd=tree, env=environment, capture_output=True, text=True, timeout=120
    )


def copied_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "kai_ray", tree / "kai_ray", ignore=ignore)
    shutil.copytree(ROOT / "operators", tree / "operators", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def plant(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The import circles among `modules` (strongly connected sets of more than one module)."""
    edges = {
        m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in modules) for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            circle = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(circle) > 1:
                found.append(sorted(circle))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_every_import_goes_down_the_floors() -> None:
    answer = lint_imports(ROOT)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "Contracts: 4 kept, 0 broken." in answer.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("kai_ray.engine.plan", "from kai_ray.server import scheduler", "every import goes down the floors"),
        ("kai_ray.rpc.api", "import kai_ray.split.cycle", "every import goes down the floors"),
        ("kai_ray.convert.pods", "from kai_ray_operators import GroupingConfig", "import the operators"),
        ("kai_ray.devcluster.binaries", "import kai_ray.engine.cycle", "imports only the API models"),
    ],
)
def test_a_planted_wrong_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    tree = copied_tree(tmp_path)
    plant(tree, module, line)
    answer = lint_imports(tree)
    assert answer.returncode != 0
    broken = [row for row in answer.stdout.splitlines() if row.endswith("BROKEN")]
    assert any(contract in row for row in broken), answer.stdout


def test_nothing_circles_at_run_time() -> None:
    graph = grimp.build_graph(
        "kai_ray", "kai_ray_operators", cache_dir=None, exclude_type_checking_imports=True
    )
    assert cycles(graph, set(graph.modules)) == []


def test_the_moved_rooms_do_not_circle_even_for_the_type_checker() -> None:
    graph = grimp.build_graph("kai_ray", "kai_ray_operators", cache_dir=None)
    for room in MOVED_ROOMS:
        modules = {m for m in graph.modules if m == room or m.startswith(room + ".")}
        assert cycles(graph, modules) == [], room


def test_the_cycle_finder_finds_a_planted_circle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.z", "a.w")]:
        graph.add_import(importer=importer, imported=imported)
    assert cycles(graph, {"a.w", "a.x", "a.y", "a.z"}) == [["a.x", "a.y", "a.z"]]
    assert cycles(graph, {"a.w", "a.x", "a.y"}) == []


MAX_MODULE_LINES = 600
"""Over this a module holds two rooms (docs/architecture.md): split it."""


def test_no_module_is_over_six_hundred_lines() -> None:
    sources = [*(ROOT / "kai_ray").rglob("*.py"), *(ROOT / "operators").rglob("*.py")]
    generated = ROOT / "kai_ray" / "v1"
    long = {
        str(path.relative_to(ROOT)): count
        for path in sources
        if generated not in path.parents and (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
