"""Write the NATS permissions of charts/conductor/values.yaml from conductor/access.py, the one declaration of who
may do what on the bus.

Why generated: the chart's lists used to be kept by hand and drifted from what the services do (every service
could publish to every inbox). Each service block's ``nats:`` entries (user, publish, subscribe, responses) and
``auth.users.client``/``auth.users.trainer`` are rewritten in place, comments and all; everything else in the file is left as it is.
tests/deploy/test_chart_security.py fails when the file is stale. Run from the repository root:
``.venv/bin/python infra/chart_permissions.py`` (then ``infra/chart_schema.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conductor.access import chart_values  # noqa: E402

VALUES = ROOT / "charts" / "conductor" / "values.yaml"
WIDTH = 110  # the repository's line length

DOCS = {
    "user": "NATS user name.",
    "publish": "Subjects it may publish to (generated from conductor/access.py; replies to requests it received "
    "go through responses).",
    "subscribe": "Subjects it may subscribe to (generated from conductor/access.py); the chart adds the user's own "
    "inbox, _INBOX.<user>.>.",
    "responses": "allow_responses: the reply and liveness beats to a request this user received, and nothing else.",
    "doors": "What its own NATS account imports from the services' account (generated from conductor/access.py): "
    "service subjects it publishes to, any answer coming back into its own account; stream subjects it hears.",
    "jetstream": "JetStream in its own account (the gateway's spend records), out of every other account's reach.",
    "max": "Messages per request: the reply and a beat every 50 ms (the fastest beat) for the whole window.",
    "expires": "How long after a request it may still be answered: the longest call this service serves.",
}


def _flow(key: str, items: list[object], indent: int) -> list[str]:
    """``key: ["a", "b", ...]`` wrapped at ``WIDTH``, continuation lines aligned after the bracket."""
    head = " " * indent + f"{key}: ["
    lines, line = [], head
    for i, item in enumerate(items):
        token = json.dumps(item) + ("," if i < len(items) - 1 else "")
        if line != head and len(line) + 1 + len(token) + 1 > WIDTH:
            lines.append(line)
            line = " " * len(head) + token
        else:
            line += ("" if line == head else " ") + token
    return [*lines, line + "]"]


def _comment(key: str, indent: int) -> list[str]:
    prefix = " " * indent + "# -- "
    words, lines, line = DOCS[key].split(), [], prefix
    for word in words:
        if line != prefix and len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = " " * indent + "# " + word
        else:
            line += ("" if line == prefix else " ") + word
    return [*lines, line]


def body(entry: dict[str, object], indent: int) -> list[str]:
    """The YAML lines of one user's entries, documented as the chart's `# --` convention wants."""
    out: list[str] = []
    for key in ("user", "publish", "subscribe", "responses", "doors", "jetstream"):
        if key not in entry:
            continue
        out += _comment(key, indent)
        value = entry[key]
        if key == "user":
            out.append(" " * indent + f"user: {value}")
        elif key == "jetstream":
            out.append(" " * indent + f"jetstream: {json.dumps(value)}")
        elif key == "responses":
            assert isinstance(value, dict)
            out.append(" " * indent + "responses:")
            for sub in ("max", "expires"):
                out += [*_comment(sub, indent + 2), " " * (indent + 2) + f"{sub}: {value[sub]}"]
        else:
            assert isinstance(value, list)
            out += _flow(key, value, indent)  # a door is a JSON object, which YAML reads as it is
    return out


def _find(lines: list[str], path: list[str]) -> tuple[int, int]:
    """(first, end) line indexes of the body of the block at ``path`` (keys at indent 0, 2, 4, ...)."""
    start, indent = 0, 0
    for key in path:
        start = next(i for i in range(start, len(lines)) if lines[i] == " " * indent + f"{key}:") + 1
        indent += 2
    end = start
    while end < len(lines) and (lines[end].startswith(" " * indent) and lines[end].strip()):
        end += 1
    return start, end


def render(text: str) -> str:
    lines = text.split("\n")
    for block, entry in chart_values().items():
        path = block.split(".") if block.startswith("auth.") else [block, "nats"]
        start, end = _find(lines, path)
        lines[start:end] = body(entry, 2 * len(path))
    return "\n".join(lines)


def main() -> int:
    VALUES.write_text(render(VALUES.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
