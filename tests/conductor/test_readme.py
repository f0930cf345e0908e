"""The README and docs/ stay honest where a test can tell: the README is short, every `conductor ...` and `make ...`
command in its fenced blocks parses (the CLI's own parser; nothing runs), and every relative link resolves."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conductor.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 300  # issue 35: the anchors a newcomer compares it with are 150-250 lines

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)
SHELL = {"", "bash", "sh", "shell", "console"}
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks in a shell language (or none named), continuation lines joined."""
    return [m.group(2).replace("\\\n", " ") for m in FENCE.finditer(text) if m.group(1) in SHELL]


def commands(block: str, program: str) -> list[list[str]]:
    """Each invocation of `program` in a shell block, as argv after the program: at a line's start, after
    environment assignments, or after `$(`, `|`, `&&` or `;`; up to the next operator, redirection or comment."""
    found: list[list[str]] = []
    for line in block.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError as exc:  # an unclosed quote: the block is not shell, or the command is broken
            raise ValueError(f"cannot read the shell line {line!r}: {exc}") from exc
        at_start, argv = True, None
        for token in [*tokens, ";"]:
            operator = bool(token) and set(token) <= set("();<>|&")
            if argv is not None:
                if not operator:
                    argv.append(token)
                    continue
                found.append(argv)
                argv = None
            if operator:
                at_start = True
            elif at_start and token == program:
                argv, at_start = [], False
            elif at_start and (ENV.match(token) or token == "$"):
                continue
            else:
                at_start = False
    return found


def relative_links(text: str) -> list[str]:
    """The link targets of Markdown text that name a file in the repository (code spans and blocks skipped)."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def docs() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


def readme_commands() -> list[list[str]]:
    return [
        argv
        for block in shell_blocks(README.read_text(encoding="utf-8"))
        for argv in commands(block, "conductor")
    ]


def test_the_readme_shows_the_tour() -> None:
    shown = {argv[0] for argv in readme_commands()}
    assert {"serve", "solve", "eval", "train", "record"} <= shown, shown


@pytest.mark.parametrize("argv", readme_commands(), ids=" ".join)
def test_every_conductor_command_of_the_readme_parses(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way to refuse: usage and the reason on stderr
        pytest.fail(f"conductor {shlex.join(argv)}: {capsys.readouterr().err.strip()} (exit {exc.code})")
    assert callable(args.func)


def test_every_make_target_of_the_readme_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z0-9_-]+):", makefile, flags=re.M))
    named = [
        argv[0]
        for block in shell_blocks(README.read_text(encoding="utf-8"))
        for argv in commands(block, "make")
        if argv
    ]
    assert {"demo", "test", "demo-replay"} <= set(named)
    assert [name for name in named if name not in targets] == []


@pytest.mark.parametrize("path", docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_an_existing_file(path: Path) -> None:
    missing = [
        target
        for target in relative_links(path.read_text(encoding="utf-8"))
        if not (path.parent / target.split("#", 1)[0]).exists()
    ]
    assert missing == [], f"{path.relative_to(ROOT)} links to files that do not exist"


def test_the_extractors_find_what_they_should() -> None:
    """The checks above are only as good as what they extract: a command after an assignment or inside `$(...)`,
    a comment and a redirection cut off, a continued line joined; links in code are not links."""
    block = shell_blocks(
        "```bash\nX=1 conductor solve 'a b' --json  # note\nID=$(conductor result T --wait 1)\n"
        "conductor eval --benchmark sim \\\n  --out o >> log\n```\n```python\nconductor = 1\n```\n"
    )
    assert commands(block[0], "conductor") == [
        ["solve", "a b", "--json"],
        ["result", "T", "--wait", "1"],
        ["eval", "--benchmark", "sim", "--out", "o"],
    ]
    assert len(block) == 1
    text = "[a](b.md) ![c](../d.png#x) `[e](f.md)` [g](https://h) [i](#j)\n```\n[k](l.md)\n```\n"
    assert relative_links(text) == ["b.md", "../d.png#x"]
