"""A warm math worker: math-verify in this process's main thread, where its signal.alarm timeouts work.

Speaks the same frames as the sandbox supervisor on stdin/stdout. The host kills and replaces it if it ever misses
the outer deadline, so a pathological expression can cost one worker restart, never a stuck service.
"""

from __future__ import annotations

import logging
import sys

from services.verifier import math_equiv
from services.verifier.sandbox.runtime import frames


def main() -> None:
    logging.getLogger("math_verify").setLevel(
        logging.CRITICAL
    )  # its timeout warnings are reported in our verdicts
    import math_verify  # noqa: F401 - pay the sympy import before saying hello

    math_equiv.equivalent("1", "1")  # warm the parser caches
    out = sys.stdout.fileno()
    frames.write(out, {"hello": True, "layers": {}})
    while True:
        try:
            req = frames.read(sys.stdin.fileno())
        except frames.FrameError:
            return
        try:
            verdict = math_equiv.grade(
                req["answers"], req["gold"], req.get("question", ""), req.get("domain"), req.get("timeout", 5)
            )
        except Exception as exc:  # our failure on this input: an infrastructure error, worker lives on
            frames.write(out, {"error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        frames.write(out, {"correct": verdict.correct, "reason": verdict.reason})


if __name__ == "__main__":
    main()
