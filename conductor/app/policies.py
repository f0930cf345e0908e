"""`conductor policies`: the registered Conductor policies this install ships (conductor/policies.py), one line each."""

from __future__ import annotations

import argparse
import json
import sys

from conductor import policies


def add_policies_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "policies",
        help="list the registered Conductor policies: pool, adapter sha256, the pools each is the default for",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per policy, as a list")
    p.set_defaults(func=cmd_policies)


def rows() -> list[dict[str, str]]:
    """Each registered policy as the listing shows it (``default for``: its pool when it is a default, else -)."""
    out = []
    for p in policies.REGISTRY.values():
        missing = p.missing()
        out.append(
            {
                "name": p.name,
                "version": p.version,
                "base": p.base,
                "pool": p.pool,
                "adapter": p.sha256[: len("sha256:") + 12],
                "default for": p.pool if p.default else "-",
                "runs here": f"needs {', '.join(missing)}" if missing else "yes",
                "recipe": p.recipe,
                "results": p.results,
            }
        )
    return out


def cmd_policies(args: argparse.Namespace) -> int:
    try:
        found = rows()
    except policies.RegistryError as exc:
        print(f"conductor policies: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    columns = ("name", "version", "pool", "adapter", "default for", "runs here", "results")
    widths = {c: max(len(c), *(len(r[c]) for r in found)) for c in columns}
    for line in [dict(zip(columns, columns, strict=True)), *found]:
        print("  ".join(line[c].ljust(widths[c]) for c in columns).rstrip())
    return 0
