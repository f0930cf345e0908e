"""The neighbourhoods hold: the foundation never imports up, and no service imports another service.

Layers, bottom to top: ``schemas/`` (the wire contract) → the foundation (``conductor/`` outside ``conductor/app/``:
plumbing and the domain — workflow language, pool, reward, the Conductor prompt) → ``services/<name>/`` → the
application (``conductor/app/``: CLI, demo, runtime, AsyncAPI export). Every import statement counts, including
ones inside functions, so a lazy import cannot hide a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """Absolute names of every module an import statement in ``path`` names (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _foundation() -> list[Path]:
    return [p for p in _files("conductor") if not _under(_module(p), "conductor.app")]


def _violations(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{p.relative_to(ROOT)} imports {name}"
        for p in files
        for name in set(_imports(p))
        if any(_under(name, f) for f in forbidden)
    )


def test_the_helper_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    probe = ROOT / "conductor" / "_import_graph_probe.py"
    probe.write_text("def f():\n    from services.planner import core\n    from .app import cli\n")
    try:
        found = set(_imports(probe))
    finally:
        probe.unlink()
    assert {"services.planner.core", "conductor.app.cli"} <= found


def test_the_foundation_never_imports_a_service_or_the_application() -> None:
    files = _foundation()
    assert any(p.name == "prompt.py" for p in files)  # the Conductor prompt is part of the domain
    assert _violations(files, ("services", "conductor.app")) == []


def test_the_contract_imports_only_itself_and_msgspec() -> None:
    assert _violations(_files("schemas"), ("services", "conductor")) == []


@pytest.mark.parametrize(
    "service", sorted(p.name for p in (ROOT / "services").iterdir() if (p / "app.py").exists())
)
def test_no_service_imports_another_service(service: str) -> None:
    others = tuple(
        f"services.{p.name}"
        for p in (ROOT / "services").iterdir()
        if p.is_dir() and p.name not in {service, "__pycache__"}
    )
    assert _violations(_files(f"services/{service}"), (*others, "conductor.app")) == []
