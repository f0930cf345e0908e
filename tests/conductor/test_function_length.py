"""No product function over 80 lines (issue 35 item 4): a function longer than a screen is split by what it decides.
Product code is what ships: schemas, conductor, tasks, services, evaluation. A function's length is its source
lines, decorators and docstring included; a nested function counts within the one it is nested in."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("schemas", "conductor", "tasks", "services", "evaluation")
MAX_LINES = 80


def long_functions(root: Path, packages: tuple[str, ...], limit: int) -> list[str]:
    """``path:line name (n lines)`` for every function or method in ``packages`` longer than ``limit`` lines."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_product_function_is_over_80_lines() -> None:
    assert not long_functions(ROOT, PRODUCT, MAX_LINES)


def test_the_count_sees_a_long_function_and_its_decorators(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        f"def fits():\n{body}\n\n\n@staticmethod\ndef over():\n{body}\n\n\nclass C:\n    async def also(self):\n"
        + body.replace("\n    ", "\n        ").replace("    x0", "        x0", 1)
        + "\n        return 1\n"
    )
    assert long_functions(tmp_path, ("pkg",), MAX_LINES) == [
        "pkg/m.py:84 over (81 lines)",
        "pkg/m.py:167 also (81 lines)",
    ]
