"""A CPU hog for the chaos suite: one busy-loop process per core at the services' own priority, so the suite runs
the way a loaded machine runs it (issue 19: calls paid twice only under CPU pressure).

``cpu_hog()`` is a context manager: the loops start on entry and are SIGKILLed and reaped on exit, whatever the
body raised. Each loop also ends itself once its parent is gone (a test runner killed with SIGKILL runs no
``finally``), so no hog outlives the run that started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

# Niceness 0 (the default priority) when allowed: a hog niced below the services would barely load them. Checks
# its parent every ~10 M iterations (well under a second) and exits when it has been re-parented.
_LOOP = """
import os, sys
parent = int(sys.argv[1])
try:
    os.setpriority(os.PRIO_PROCESS, 0, 0)
except OSError:
    pass
while os.getppid() == parent:
    for _ in range(10_000_000):
        pass
"""


@contextlib.contextmanager
def cpu_hog(processes: int | None = None) -> Iterator[list[int]]:
    """Busy loops on every core (``os.cpu_count()``) or on ``processes`` of them; yields their pids."""
    count = processes if processes is not None else os.cpu_count() or 1
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(
                subprocess.Popen([sys.executable, "-c", _LOOP, str(os.getpid())], start_new_session=True)
            )
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
