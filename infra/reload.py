"""Development only (the Tiltfile's image): run a command and restart it whenever a Python file under /app changes.

Why: Tilt's live update syncs edited source into the running container; the service must then restart to load it,
and PID 1 cannot be restarted from outside without rebuilding. Polling mtimes once a second is enough for a human
editing files and needs nothing beyond the standard library. SIGTERM is passed on, so pods still drain on stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOTS = [Path(p) for p in os.environ.get("CONDUCTOR_RELOAD_ROOTS", "/app").split(":")]
INTERVAL_S = 1.0


def snapshot() -> dict[str, float]:
    return {str(p): p.stat().st_mtime for root in ROOTS if root.is_dir() for p in root.rglob("*.py")}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: reload.py -- COMMAND...", file=sys.stderr)
        return 2
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        seen = snapshot()
        child = subprocess.Popen(argv)
        while child.poll() is None:
            time.sleep(INTERVAL_S)
            if not stopping and snapshot() != seen:
                print("reload.py: source changed; restarting", file=sys.stderr, flush=True)
                child.terminate()
                child.wait()
                break
        else:
            return child.returncode if stopping or child.returncode else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
