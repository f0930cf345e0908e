"""The neighbourhoods hold: every top-level package imports only the layers below it, and no service another.

Layers, bottom to top (README "Layout"; ../shared/ARCHITECTURE.md): ``schemas/`` (the wire contract) → the
foundation (``conductor/`` outside ``conductor/app/``: plumbing and the domain — workflow language, pool, reward,
the Conductor prompt) → ``tasks/`` (the task registry training and evaluation both read: the ``sim`` family,
benchmark loaders, answer formats and the answer helpers they share with the verifier) → ``services/<name>/`` and
``evaluation/`` (side by side: none imports another; the eval is a client of the running services) → the
application (``conductor/app/``: CLI, demo, runtime, AsyncAPI export) → the tools beside it: ``infra/``,
``scripts/``, ``bench/`` (none imports another, nor ``tests/``). Every import statement counts, including ones inside functions, so a lazy import cannot hide a
dependency; loading a module by file path (``spec_from_file_location``) goes around the graph and counts too.
Imports are read with ``ast``: nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top; a unit may import itself and the units of lower layers, never a peer or anything higher.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("schemas",),
    ("conductor",),
    ("tasks",),
    ("evaluation", "services.*"),
    ("conductor.app",),
    ("infra", "scripts", "bench"),
)
PACKAGES = ("schemas", "conductor", "tasks", "evaluation", "services", "infra", "scripts", "bench")

# Edges that stand for now, each with its reason; the test fails when one goes away, so the list stays true.
KNOWN: dict[tuple[str, str], str] = {}

FILE_LOADER = "<loads a module by file path>"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute name) of every module an import statement in ``path`` names (relative imports resolved),
    and of every call to ``spec_from_file_location`` (as ``FILE_LOADER``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "spec_from_file_location":
                yield node.lineno, FILE_LOADER


def _unit(name: str) -> str | None:
    """The layered unit a module belongs to (``services.<name>``, ``conductor.app``, ...), or None (outside)."""
    parts = name.split(".")
    if parts[0] == "conductor" and parts[1:2] == ["app"]:
        return "conductor.app"
    if parts[0] == "services":
        return f"services.{parts[1]}" if len(parts) > 1 else None  # the namespace itself holds nothing
    if parts[0] in (*PACKAGES, "tests"):
        return parts[0]
    return None


def _layer(unit: str) -> int:
    """The unit's layer; ``tests`` sits above them all."""
    for i, units in enumerate(LAYERS):
        if unit in units or (unit.startswith("services.") and "services.*" in units):
            return i
    return len(LAYERS)


def _allowed(importer: str, imported: str) -> bool:
    return imported == importer or _layer(imported) < _layer(importer)


def _files() -> list[Path]:
    return sorted(p for d in PACKAGES for p in (ROOT / d).rglob("*.py"))


def _edges() -> Iterator[tuple[str, int, str, str]]:
    """(file, line, importer unit, imported name) for every import out of a unit into another layered unit."""
    for path in _files():
        importer = _unit(_module(path))
        if importer is None:  # services/__init__.py: the namespace's docstring, nothing to import
            assert not list(_imports(path)), path
            continue
        for line, name in _imports(path):
            imported = FILE_LOADER if name == FILE_LOADER else _unit(name)
            if imported is not None and imported != importer:
                yield str(path.relative_to(ROOT)), line, importer, name


def _violations() -> list[tuple[str, int, str]]:
    """(file, line, module) per offending statement: ``from a.b import c`` names ``a.b``, not also ``a.b.c``."""
    found: dict[tuple[str, int, str], str] = {}
    for file, line, importer, name in _edges():
        imported = FILE_LOADER if name == FILE_LOADER else _unit(name) or ""
        if name == FILE_LOADER or not _allowed(importer, imported):
            key = (file, line, imported)
            found[key] = min(found.get(key, name), name, key=len)
    return sorted((file, line, name) for (file, line, _), name in found.items())


def test_the_helper_sees_imports_inside_functions_relative_ones_and_file_loads() -> None:
    probe = ROOT / "conductor" / "_import_graph_probe.py"
    probe.write_text(
        "def f():\n    from services.planner import core\n    from .app import cli\n"
        "    import importlib.util\n    importlib.util.spec_from_file_location('x', 'scripts/x.py')\n"
    )
    try:
        found = {name for _, name in _imports(probe)}
    finally:
        probe.unlink()
    assert {"services.planner.core", "conductor.app.cli", FILE_LOADER} <= found


def test_the_layers_are_ordered_as_documented() -> None:
    assert _allowed("conductor", "schemas") and not _allowed("schemas", "conductor")
    assert (
        _allowed("services.learner", "tasks")
        and _allowed("evaluation", "tasks")
        and _allowed("tasks", "conductor")
    )
    assert not _allowed("tasks", "services.verifier") and not _allowed("tasks", "evaluation")
    assert not _allowed("services.learner", "evaluation") and not _allowed("evaluation", "services.verifier")
    assert not _allowed("services.planner", "services.executor") and not _allowed(
        "conductor", "conductor.app"
    )
    assert _allowed("conductor.app", "services.learner") and not _allowed("services.learner", "conductor.app")
    assert (
        _allowed("bench", "conductor.app")
        and not _allowed("bench", "tests")
        and not _allowed("bench", "infra")
    )
    assert {_unit(_module(p)) for p in _files()} >= {
        "schemas",
        "conductor",
        "conductor.app",
        "tasks",
        "evaluation",
        "services.learner",
        "infra",
        "scripts",
        "bench",
    }


def test_every_package_imports_only_the_layers_below_it() -> None:
    found = [(file, line, name) for file, line, name in _violations() if (file, name) not in KNOWN]
    assert found == [], "\n".join(f"{file}:{line} imports {name}" for file, line, name in found)


def test_every_known_exception_still_stands() -> None:
    standing = {(file, name) for file, _, name in _violations()}
    assert set(KNOWN) <= standing, f"fixed, drop from KNOWN: {sorted(set(KNOWN) - standing)}"
