"""A stdin program behaves as ``python prog.py < input`` (issue 9 item 3): what it writes while the interpreter
shuts down — atexit handlers, buffered writes flushed at exit, ``__del__`` at exit, non-daemon threads finishing —
is part of its output, and its exit status is the interpreter's. Each program runs both in the sandbox and as a
plain subprocess of the same interpreter; stdout and exit status must agree."""

from __future__ import annotations

import subprocess
import sys

import pytest

from services.verifier.core import Verifier
from tests.verifier.conftest import sandbox_capable

pytestmark = pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")

PROGRAMS = {
    "atexit": "import atexit\natexit.register(lambda: print('bye'))\nprint(int(input()) * 2)",
    "atexit_after_exception": "import atexit\natexit.register(print, 'cleanup')\nraise ValueError('boom')",
    "atexit_after_sys_exit": "import atexit, sys\natexit.register(print, 'last words')\nsys.exit(3)",
    "sys_exit_message": "import sys\nprint('out')\nsys.exit('fatal: bad input')",
    "unclosed_file_on_stdout": "f = open(1, 'w', closefd=False)\nf.write('via a second stream\\n')",
    "replaced_stdout_buffer": (
        "import io, sys\nsys.stdout = io.TextIOWrapper(open(1, 'wb', closefd=False), write_through=False)\n"
        "sys.stdout.write('rewrapped ' + input())"
    ),
    "del_at_exit": "class A:\n    def __del__(self):\n        print('deleted')\nkeep = A()\nprint('made')",
    "non_daemon_thread": (
        "import threading, time\ndef late():\n    time.sleep(0.2)\n    print('from the thread')\n"
        "threading.Thread(target=late).start()\nprint('main done')"
    ),
    "no_newline": "import sys\nsys.stdout.write('42')",
    "exit_status_wraps": "import sys\nprint('x')\nsys.exit(257)",
    "failing_atexit_handler": (
        "import atexit\natexit.register(print, 'second')\natexit.register(lambda: 1 / 0)\nprint('first')"
    ),
    "del_in_a_cycle": (
        "class Node:\n    def __del__(self):\n        print('collected')\na = Node()\na.me = a\nprint('built')"
    ),
}


def reference_run(program: str, stdin: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", program], input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    return done.stdout, done.returncode


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_sandboxed_program_matches_a_plain_interpreter(name: str, verifier: Verifier) -> None:
    program, stdin = PROGRAMS[name], "21\n"
    want_out, want_code = reference_run(program, stdin)
    sandbox = verifier.sandbox
    job = {"op": "stdio", "program": program, "stdin": stdin, "limits": sandbox.limits(5)}
    async with sandbox.lease() as lease:
        got = await sandbox.run(lease, job, 5)
    assert got["status"] == "ok", got
    assert (got["stdout"], got["exit"]["code"]) == (want_out, want_code), got["stderr"]
