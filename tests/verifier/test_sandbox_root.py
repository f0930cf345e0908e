"""The sandbox's / (issue 20): a correct program sees the host root filesystem's size, as it would without a
sandbox (BigCodeBench/377 prints the disk usage of /), and still cannot write there; the host directory that backs
/ holds nothing of the host and goes with its sandbox."""

from __future__ import annotations

import os
import stat

import pytest

from schemas.verify import IOTest, Outcome, StdioTestsReference, VerifyRequest
from services.verifier.core import Verifier
from services.verifier.sandbox import launcher
from services.verifier.sandbox.client import Sandbox
from tests.verifier.conftest import TEST_ENV, make_settings, sandbox_capable

PARENT = launcher.root_parent()
pytestmark = [
    pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap"),
    pytest.mark.skipif(
        PARENT is None or os.stat(PARENT).st_dev != os.stat("/").st_dev,
        reason="no writable temporary directory on the root filesystem",
    ),
]

LOOK_AT_ROOT = """
import os
s = os.statvfs('/')
print(s.f_blocks * s.f_frsize)
for path in ('/x', '/usr/x', '/tmp/x'):
    try:
        open(path, 'w').write('x')
        print('wrote', path)
    except OSError:
        print('refused', path)
t = os.statvfs('/tmp')
print(t.f_blocks * t.f_frsize)
"""


def host_root_total() -> int:
    s = os.statvfs("/")
    return s.f_blocks * s.f_frsize


@pytest.mark.asyncio(loop_scope="session")
async def test_root_reports_the_host_root_filesystem_and_is_read_only(verifier: Verifier) -> None:
    """Before: / was bubblewrap's own tmpfs, and statvfs('/') reported that (12.6 GB, 0% used, on this machine).
    /tmp stays the private tmpfs of CONDUCTOR_SANDBOX_TMP_MB."""
    tmp = int(TEST_ENV["CONDUCTOR_SANDBOX_TMP_MB"]) * 1024 * 1024
    expected = f"{host_root_total()}\nrefused /x\nrefused /usr/x\nwrote /tmp/x\n{tmp}"
    verdict = await verifier.verify(
        VerifyRequest(
            id="root",
            response=f"```python\n{LOOK_AT_ROOT}\n```",
            reference=StdioTestsReference(tests=[IOTest(input="", output=expected)]),
        )
    )
    assert verdict.outcome == Outcome.CORRECT, verdict.reason


def other_than_mount_points(holder: str) -> list[str]:
    """What is in a sandbox's host directory besides directories and symlinks (bubblewrap's empty mount points)."""
    return [
        os.path.join(top, name)
        for top, _, files in os.walk(holder)
        for name in files
        if not os.path.islink(os.path.join(top, name))
    ]


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.asyncio(loop_scope="session")
async def test_the_root_directory_is_private_holds_no_host_file_and_goes_with_its_sandbox() -> None:
    base = int(TEST_ENV["CONDUCTOR_SANDBOX_UID_BASE"]) + 8  # uids the session's verifier does not use
    sandbox = Sandbox(make_settings(CONDUCTOR_SANDBOX_WORKERS="1", CONDUCTOR_SANDBOX_UID_BASE=str(base)))
    try:
        await sandbox.start()
        assert sandbox.layers.active.get("rofs"), sandbox.layers.describe()  # "/" is among the paths probed
        (holder,) = sandbox.scratch_dirs.values()
        root = os.path.join(holder, "root")
        assert (mode(holder), os.listdir(holder), mode(root)) == (0o700, ["root"], 0o755)
        assert other_than_mount_points(holder) == []
        assert {"usr", "tmp", "proc", "dev"} <= set(os.listdir(root))
    finally:
        await sandbox.close()
    assert not os.access(holder, os.F_OK)


def test_roots_a_killed_verifier_left_behind_are_removed_and_no_others(tmp_path) -> None:
    """A verifier killed by SIGKILL cannot remove its sandboxes' roots; the next one to make a root does, and
    leaves a live process's roots and names that are not its own alone."""
    import subprocess

    from services.verifier.sandbox.launcher import ROOT_PREFIX, make_root

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = tmp_path / f"{ROOT_PREFIX}{gone.pid}-0-abc"
    (stale / "root" / "usr").mkdir(parents=True)
    live = tmp_path / f"{ROOT_PREFIX}1-0-def"  # pid 1 is alive
    live.mkdir()
    other = tmp_path / "conductor-sandbox-rootless"
    other.mkdir()
    holder, root = make_root(str(tmp_path), 3)
    assert not stale.exists() and live.is_dir() and other.is_dir()
    assert os.path.basename(holder).startswith(f"{ROOT_PREFIX}{os.getpid()}-3-") and os.path.isdir(root)
