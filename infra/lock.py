"""Write infra/constraints.txt: the exact versions of the core image's dependency closure, read from this venv.

Why: pyproject.toml states ranges (a library's contract); an image must be reproducible, so it installs the set the
default test run passed with. Run from the repository root after changing the core dependencies:
``.venv/bin/python infra/lock.py > infra/constraints.txt``. Of the extras only the image's (``otel``, ``kube``) are followed.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys

from packaging.requirements import Requirement

IMAGE_EXTRAS = ("otel", "kube")  # the CPU image exports traces and can run `conductor status` in the cluster


def closure(name: str, extras: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed versions of ``name``'s requirements, transitively, for the given extras only."""
    found: dict[str, str] = {}

    def walk(dist_name: str, wanted: tuple[str, ...]) -> None:
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in found:
            return
        try:
            dist = md.distribution(dist_name)
        except md.PackageNotFoundError:
            return  # a requirement for another platform (uvloop on Windows) is not installed here
        found[key] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in ("", *wanted)):
                continue
            walk(req.name, tuple(req.extras))

    walk(name, extras)
    found.pop(re.sub(r"[-_.]+", "-", name).lower(), None)
    return found


def main(argv: list[str]) -> int:
    if argv[:1] == ["--extra"] and len(argv) == 2:
        # One extra's own pins, beside the core's: e.g. the verifier image's BigCodeBench libraries,
        # ``python infra/lock.py --extra bigcodebench > infra/constraints-bigcodebench.txt``.
        core = closure("conductor", IMAGE_EXTRAS)
        extra = {k: v for k, v in closure("conductor", (*IMAGE_EXTRAS, argv[1])).items() if k not in core}
        print(
            f"# Exact versions of the `{argv[1]}` extra's closure beyond the core image's (infra/constraints.txt)."
        )
        print(f"# Regenerate: python infra/lock.py --extra {argv[1]} > infra/constraints-{argv[1]}.txt")
        for key, version in sorted(extra.items()):
            print(f"{key}=={version}")
        return 0
    print("# Exact versions of the core image's dependencies: the set the default test run passed with.")
    print(
        "# Regenerate after changing pyproject.toml's core dependencies: python infra/lock.py > infra/constraints.txt"
    )
    for key, version in sorted(closure("conductor", IMAGE_EXTRAS).items()):
        print(f"{key}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
