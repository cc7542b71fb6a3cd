"""The layering of STYLE.md §1: the import-linter contracts in pyproject.toml, and this file's own
check of every module of every package (docs/architecture.md, "How the layers are enforced").

``pkgutil.walk_packages`` finds the modules; each is read (its ``import`` statements, also those
inside functions) and imported in a fresh interpreter per package (what it and its libraries load).
"""

import ast
import importlib.util
import json
import pkgutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

MINER_PURE = frozenset({"dagchain.template", "miner.search", "miner._kernel"})
"""miner's modules without threads, processes or HTTP: all the simulator may use."""


@dataclass(frozen=True)
class Layer:
    """What the modules of one top-level package may import (first-party) and must not load."""

    may_import: frozenset[str]
    """First-party packages (or modules) this package's own ``import`` statements may name."""
    never_loaded: frozenset[str] = frozenset()
    """Modules that importing every module of the package must not load, directly or through
    libraries (a name covers its submodules)."""


SHELL_AND_IO = frozenset({"asyncio", "aiohttp", "uvloop", "plyvel"})

LAYERS: dict[str, Layer] = {
    "dagchain": Layer(
        frozenset({"dagchain"}),
        frozenset({"p2p", "node", "miner", "simulator", "wallet", "apiclient", "pydantic"})
        | SHELL_AND_IO,
    ),
    # The protocol engine: sans-I/O, the one home of the P2P rules (docs/architecture.md).
    "p2p": Layer(
        frozenset({"p2p", "dagchain"}),
        frozenset({"node", "miner", "simulator", "wallet", "apiclient", "pydantic"}) | SHELL_AND_IO,
    ),
    "miner": Layer(
        frozenset({"miner", "dagchain", "apiclient"}),
        frozenset({"p2p", "node", "simulator", "wallet"}),
    ),
    "node": Layer(
        frozenset({"node", "p2p", "dagchain", "apiclient.models"}),
        frozenset({"simulator", "wallet", "miner"}),
    ),
    "simulator": Layer(
        frozenset({"simulator", "dagchain", "p2p"}) | MINER_PURE,
        frozenset({"node", "wallet", "apiclient", "dagchain.storage.leveldb"}) | SHELL_AND_IO,
    ),
    # The wallet and the API client are HTTP clients of the node, not parts of the daemon.
    "wallet": Layer(
        frozenset({"wallet", "apiclient", "dagchain"}),
        frozenset({"p2p", "node", "miner", "simulator"}),
    ),
    "apiclient": Layer(
        frozenset({"apiclient"}),
        frozenset({"dagchain", "p2p", "node", "miner", "simulator", "wallet"}),
    ),
}
DAGCHAIN_NEVER_IMPORTS = frozenset({"threading", "time", "random"})
"""dagchain's own code takes time and randomness as arguments (its libraries may use these)."""


def _covers(names: Iterable[str], module: str) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def _root_packages() -> list[str]:
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        roots: list[str] = tomllib.load(f)["tool"]["importlinter"]["root_packages"]
    present = [p for p in LAYERS if (REPO_ROOT / p / "__init__.py").is_file()]
    return sorted(set(roots) | set(present))


def _modules(package: str) -> list[str]:
    """The package and every module and subpackage below it (``__main__`` included)."""
    path = [str(REPO_ROOT / package)]
    return [package, *sorted(m.name for m in pkgutil.walk_packages(path, package + "."))]


def _all_modules() -> dict[str, list[str]]:
    return {p: _modules(p) for p in _root_packages()}


def _imports(module: str) -> Iterator[tuple[str, list[str], int]]:
    """(``from`` base or "", names, line) of each ``import`` statement, relative ones resolved."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    if not spec.origin.endswith(".py"):
        return  # an extension module (miner._kernel)
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    package = module if spec.submodule_search_locations is not None else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield "", [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            yield base, [a.name for a in node.names], node.lineno


def _first_party_imports(module: str, known: frozenset[str]) -> list[tuple[str, int]]:
    """(first-party module imported, line): ``from pkg import mod`` names pkg and pkg.mod."""
    roots = {k.partition(".")[0] for k in known}
    found = []
    for base, names, line in _imports(module):
        if base:
            names = [base] + [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
        found += [(n, line) for n in names if n.partition(".")[0] in roots]
    return found


def _is_shell(module: str) -> bool:
    """A module the simulator must not reach: any of node/ (the daemon), or of miner/ but its
    pure search (the miner package itself is fine: its ``__init__`` imports nothing)."""
    return _covers({"node"}, module) or (
        _covers({"miner"}, module) and "." in module and not _covers(MINER_PURE, module)
    )


def test_every_package_has_a_layer_and_modules() -> None:
    """A package added to root_packages must state its layer here; the walk finds real modules."""
    found = _all_modules()
    assert set(found) <= set(LAYERS), f"add a Layer for {sorted(set(found) - set(LAYERS))}"
    assert {"dagchain", "p2p", "node", "miner", "simulator"} <= set(found)
    assert "dagchain.storage.leveldb" in found["dagchain"]
    assert "simulator.network_attack" in found["simulator"]
    assert all(len(mods) > 2 for mods in found.values()), found


def test_each_module_imports_only_lower_layers() -> None:
    """Every ``import`` statement of every module, also inside functions, names an allowed layer;
    following first-party imports transitively, the simulator reaches no node or miner shell."""
    found = _all_modules()
    known = frozenset(m for mods in found.values() for m in mods)
    graph = {m: _first_party_imports(m, known) for m in known}
    bad = []
    for package, mods in found.items():
        allowed = LAYERS[package].may_import
        # ``from p2p import wire`` also names the package ``node`` itself.
        allowed_packages = {m.partition(".")[0] for m in allowed}
        bad += [
            f"{module}:{line} imports {name} ({package} may import {sorted(allowed)})"
            for module in mods
            for name, line in graph[module]
            if not _covers(allowed, name) and name not in allowed_packages
        ]
    reached, todo = set(found["simulator"]), list(found["simulator"])
    while todo:
        for name, _ in graph[todo.pop()]:
            if name in known and name not in reached:
                reached.add(name)
                todo.append(name)
    bad += [f"the simulator reaches the shell module {m}" for m in sorted(reached) if _is_shell(m)]
    for module in found["dagchain"]:
        for base, names, line in _imports(module):
            bad += [
                f"{module}:{line} imports {n}"
                for n in ([base] if base else names)
                if _covers(DAGCHAIN_NEVER_IMPORTS, n)
            ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", _root_packages())
def test_importing_every_module_loads_nothing_forbidden(package: str) -> None:
    """Import every module of the package in a fresh interpreter: it must import (no module is
    broken or untested by this), and what it and its libraries load keeps the layers.

    threading is not checked for dagchain here: coincurve imports it (the AST check above forbids
    dagchain's own use). ``__main__`` modules are read above but not imported (they run a CLI).
    """
    layer = LAYERS[package]
    modules = [m for m in _modules(package) if not m.endswith(".__main__")]
    code = (
        "import importlib, json, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *modules],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout)
    unwanted = sorted(m for m in loaded if _covers(layer.never_loaded, m))
    if package == "simulator":
        unwanted += [m for m in loaded if _is_shell(m)]
    # asyncio stands for asyncio.events, asyncio.tasks, ...
    shown = sorted(m for m in set(unwanted) if not _covers(set(unwanted) - {m}, m))
    assert not shown, f"importing all of {package} loads {shown}"


def test_import_contracts_are_kept() -> None:
    """A layer importing upwards, or dagchain importing I/O, fails here with the linter's report."""
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"lint-imports failed:\n{result.stdout}\n{result.stderr}"


MODULE_LINES_MAX = 600
"""Issue 22: a module of the daemon's shell or of the protocol engine over this is split."""


@pytest.mark.parametrize("package", ["node", "p2p"])
def test_no_module_of_the_shell_or_the_engine_is_over_600_lines(package: str) -> None:
    long = {
        str(path.relative_to(REPO_ROOT)): n
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MODULE_LINES_MAX
    }
    assert long == {}
