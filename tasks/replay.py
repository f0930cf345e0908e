"""Recorded answers of real models (replay tables): typed loading, lookups, prices and the held-out rule.

Interface (what the replay provider, the routers, ``conductor record`` and training use):
- ``ReplayRecord`` / ``ReplayAnswer``: one line of a table (``tasks/data/replay/README.md``, "Format").
- ``read_table(path)`` -> list of records; ``load_index(spec)`` -> ``ReplayIndex`` over every table of a
  ``:``-separated spec of files or folders ("" = the shipped tables, ``SHIPPED``), loaded once per spec (cached).
- ``ReplayIndex``: ``get(set, id)``, ``by_question(text)`` (normalised text), ``find(prompt)`` (the longest
  recorded question inside a prompt), ``by_task_id(task_id)`` (``item_task_id``), ``lookup(...)``, ``models(set)``.
- ``load_prices(path=None)`` -> ``{model: Price}`` (USD per 1M tokens; ``sourced``, ``source``).
- ``is_held_out(set, id)``: the tables' split rule (sha256 of ``set:id``, first byte < 64); ``in_test_split``: the
  registry entries' train/test rule over the shipped (public) part.
- ``problems(path, set)``: a table as registry ``Problem``s (the ``replay-*`` entries; ``conductor eval --data``).
- ``SETS``, ``ZEROEVAL_MODELS`` (the 12 in price order of the README), ``MMLU_MODELS`` (the 14).
- Errors: ``ReplayError`` (a ``TaskError``) and its kinds: ``ReplayFileError`` (missing/unreadable file),
  ``ReplayFormatError`` (``file:line``), ``UnknownModelError``, ``NoRecordError``. Each message is one line.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import re
import tomllib
import zlib
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path

import msgspec

from schemas.verify import TextReference
from tasks.answers import LITERAL_DOMAIN
from tasks.datasets import LETTERS, render_choices
from tasks.errors import DatasetError, MissingDataError, TaskError
from tasks.problem import Problem

REPLAY_PATH_ENV = "CONDUCTOR_REPLAY_PATH"
"""Files or folders of replay tables, separated by ``:``; unset or empty: the shipped tables."""

SETS = ("math-l5", "gsm", "crux", "mmlu-redux")
ZEROEVAL_SETS = ("math-l5", "gsm", "crux")
HELD_OUT_BELOW = 64
"""A record is held out of the public tables when sha256(set:id)[0] < 64 (about 25%); ../shared/replay/README.md."""
TEST_SALT = "conductor-replay-test"
TEST_BELOW = 77
"""Registry split of the public part: test when sha256(salt:set:id)[0] < 77 (about 30%), train otherwise."""

ZEROEVAL_MODELS = (
    "o1-mini-2024-09-12",
    "claude-3-5-sonnet-20241022",
    "gpt-4o-2024-08-06",
    "Mistral-Large-2",
    "gpt-4o-mini-2024-07-18",
    "deepseek-v2.5-0908",
    "Meta-Llama-3.1-70B-Instruct",
    "gemini-1.5-pro",
    "Qwen2-72B-Instruct",
    "gemini-1.5-flash",
    "gemma-2-9b-it",
    "Meta-Llama-3.1-8B-Instruct",
)
MMLU_MODELS = (
    "anthropic_claude-3-5-sonnet-20240620",
    "anthropic_claude-3-opus-20240229",
    "meta_llama-3.1-405b-instruct-turbo",
    "openai_gpt-4o-2024-05-13",
    "qwen_qwen2.5-72b-instruct-turbo",
    "google_gemini-1.5-pro-001",
    "openai_gpt-4-0613",
    "qwen_qwen2-72b-instruct",
    "writer_palmyra-x-004",
    "openai_gpt-4-turbo-2024-04-09",
    "google_gemini-1.5-pro-preview-0409",
    "meta_llama-3.2-90b-vision-instruct-turbo",
    "meta_llama-3.1-70b-instruct-turbo",
    "mistralai_mistral-large-2407",
)


class ReplayError(TaskError):
    """Bad replay input: a table, a model or a question the tables cannot answer."""


class ReplayFileError(ReplayError, MissingDataError):
    """A table (or prices file) that does not exist or cannot be read."""


class ReplayFormatError(ReplayError, DatasetError):
    """A line that is not a replay record; the message names ``file:line``."""


class UnknownModelError(ReplayError):
    """A model key the tables do not record."""


class NoRecordError(ReplayError):
    """A question (or item id) without a record: a replay worker never invents an answer."""


class ReplayAnswer(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    chars: int


class ReplayRecord(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    set: str
    question: str
    answers: dict[str, ReplayAnswer]
    gold: str | int
    prompt: str | None = None
    choices: list[str] | None = None
    subject: str = ""
    error_type: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.set, self.id)


class Price(msgspec.Struct, frozen=True, kw_only=True):
    input: float
    output: float
    sourced: bool = True
    source: str = ""
    note: str = ""


def shipped_dir() -> Path:
    return Path(str(resources.files("tasks") / "data" / "replay"))


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def is_held_out(set_name: str, item_id: str) -> bool:
    """The tables' public/held-out rule; the shipped tables hold no held-out record."""
    return _digest(f"{set_name}:{item_id}")[0] < HELD_OUT_BELOW


def in_test_split(set_name: str, item_id: str) -> bool:
    """The registry entries' split of the public part (docs/datasets.md): test about 30%, train the rest."""
    return _digest(f"{TEST_SALT}:{set_name}:{item_id}")[0] < TEST_BELOW


def item_task_id(set_name: str, item_id: str) -> str:
    """A task id naming one record (``replay.gsm.gsm8k-main-test-_12``): the provider then looks the item up by it.

    Task ids allow letters, digits, ``-``, ``_`` and ``.``; anything else in the id becomes ``_``.
    """
    return "replay." + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{set_name}.{item_id}")


def normalise_question(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


_DECODER = msgspec.json.Decoder(ReplayRecord)


def read_table(path: Path) -> list[ReplayRecord]:
    """Every record of one table (``.jsonl.gz`` or plain ``.jsonl``); bad input is one typed line."""
    try:
        raw = path.read_bytes()
        data = gzip.decompress(raw) if path.name.endswith(".gz") else raw
        lines = data.decode("utf-8").split("\n")  # not splitlines(): questions hold U+0085
    except FileNotFoundError:
        raise ReplayFileError(f"replay table {path} does not exist") from None
    except (gzip.BadGzipFile, EOFError, zlib.error, UnicodeDecodeError) as exc:  # BadGzipFile is an OSError
        raise ReplayFormatError(f"{path}: not a gzip UTF-8 JSON Lines table ({exc})") from None
    except OSError as exc:
        raise ReplayFileError(f"replay table {path}: {exc.strerror or exc}") from None
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = _DECODER.decode(line)
        except msgspec.DecodeError as exc:
            raise ReplayFormatError(f"{path}:{n}: not a replay record: {exc}") from None
        if not record.question.strip() or not record.answers:
            raise ReplayFormatError(f"{path}:{n}: a record needs a question and at least one answer")
        records.append(record)
    return records


def table_files(spec: str) -> list[Path]:
    """The tables a spec names: each file as given, each folder's ``*.jsonl.gz`` / ``*.jsonl`` (sorted)."""
    files: list[Path] = []
    for part in (p for p in (spec or str(shipped_dir())).split(":") if p.strip()):
        path = Path(part).expanduser()
        if path.is_dir():
            found = sorted([*path.glob("*.jsonl.gz"), *path.glob("*.jsonl")])
            if not found:
                raise ReplayFileError(f"replay folder {path} holds no *.jsonl.gz table")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise ReplayFileError(f"replay table {path} does not exist")
    if not files:
        raise ReplayFileError(f"{REPLAY_PATH_ENV} names no table")
    return files


class ReplayIndex:
    """Every record of some tables, indexed by (set, id), by normalised question and by task id."""

    def __init__(self, records: Iterable[ReplayRecord], sources: Sequence[str] = ()) -> None:
        self.sources = list(sources)
        self.records: list[ReplayRecord] = []
        self._by_key: dict[tuple[str, str], ReplayRecord] = {}
        for r in records:
            if r.key not in self._by_key:  # the first table on the path wins, as on a search path
                self._by_key[r.key] = r
                self.records.append(r)
        self._by_text = {normalise_question(r.question): r for r in reversed(self.records)}
        self._by_task = {item_task_id(r.set, r.id): r for r in self.records}
        self._by_prefix: dict[str, list[ReplayRecord]] = {}
        for r in self.records:
            self._by_prefix.setdefault(r.question[:48], []).append(r)

    def __len__(self) -> int:
        return len(self.records)

    def get(self, set_name: str, item_id: str) -> ReplayRecord | None:
        return self._by_key.get((set_name, item_id))

    def by_question(self, text: str) -> ReplayRecord | None:
        return self._by_text.get(normalise_question(text))

    def by_task_id(self, task_id: str) -> ReplayRecord | None:
        """The record a task id names: ``item_task_id(set, id)`` itself or as the id's last dotted part."""
        if not task_id:
            return None
        found = self._by_task.get(task_id)
        if found is None and ".replay." in task_id:
            found = self._by_task.get(task_id[task_id.rindex(".replay.") + 1 :])
        return found

    def find(self, prompt: str) -> ReplayRecord | None:
        """The longest recorded question inside ``prompt`` (a question-first prompt is a dictionary hit)."""
        hits = [r for r in self._by_prefix.get(prompt[:48], []) if prompt.startswith(r.question)]
        if not hits:
            hits = [r for r in self.records if r.question in prompt]
        return max(hits, key=lambda r: (len(r.question), _shows_choices(r, prompt)), default=None)

    def lookup(self, *, task_id: str = "", prompt: str = "") -> ReplayRecord:
        """By task id when it names a record, else by the question found in ``prompt``; else ``NoRecordError``."""
        found = self.by_task_id(task_id) or (self.find(prompt) if prompt else None)
        if found is None:
            head = " ".join(prompt.split())[:80]
            raise NoRecordError(f"no replay record for task {task_id!r} or its question {head!r}")
        return found

    def models(self, set_name: str | None = None) -> set[str]:
        """The model keys recorded for every record (of one set, or of every set that has the model)."""
        rows = [r for r in self.records if set_name is None or r.set == set_name]
        return set().union(*(r.answers for r in rows)) if rows else set()

    def check_models(self, models: Iterable[str]) -> None:
        known = self.models()
        missing = sorted(set(models) - known)
        if missing:
            raise UnknownModelError(
                f"model(s) {missing} not in the replay tables ({', '.join(self.sources) or 'none'}); "
                f"they record: {', '.join(sorted(known))}"
            )

    def answer(self, record: ReplayRecord, model: str) -> ReplayAnswer:
        found = record.answers.get(model)
        if found is None:
            raise UnknownModelError(f"{record.set}:{record.id} has no answer of {model!r}")
        return found


def _shows_choices(record: ReplayRecord, prompt: str) -> bool:
    """Whether every option is in the prompt: tells apart multiple-choice records that share a question."""
    return bool(record.choices) and all(c in prompt for c in record.choices or ())


@functools.lru_cache(maxsize=8)
def load_index(spec: str = "") -> ReplayIndex:
    """Every table of a ``:``-separated spec ("" = the shipped tables), read once per spec and process."""
    files = table_files(spec)
    records: list[ReplayRecord] = []
    for f in files:
        records += read_table(f)
    return ReplayIndex(records, [str(f) for f in files])


def default_spec(env: Mapping[str, str]) -> str:
    """The spec ``CONDUCTOR_REPLAY_PATH`` names in ``env`` (the caller's settings mapping); "" = shipped."""
    return env.get(REPLAY_PATH_ENV, "").strip()


def load_prices(path: Path | None = None) -> dict[str, Price]:
    """USD per 1M tokens per model key, from ``prices.toml`` (the shipped one by default)."""
    path = path or shipped_dir() / "prices.toml"
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayFileError(f"prices file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ReplayFormatError(f"prices file {path}: not TOML ({exc})") from None
    try:
        return msgspec.convert(raw.get("models", {}), dict[str, Price])
    except msgspec.ValidationError as exc:
        raise ReplayFormatError(f"prices file {path}: {exc}") from None


def select(records: Sequence[ReplayRecord], *, test: bool) -> list[ReplayRecord]:
    """The registry split: the records in (``test=True``) or out of the test part."""
    return [r for r in records if in_test_split(r.set, r.id) == test]


DOMAINS = {"math-l5": "math", "gsm": "math", "crux": LITERAL_DOMAIN, "mmlu-redux": "mcq"}
TABLES = {
    "math-l5": "math-l5.jsonl.gz",
    "gsm": "gsm.jsonl.gz",
    "crux": "crux.jsonl.gz",
    "mmlu-redux": "mmlu-redux.jsonl.gz",
}


def problem(record: ReplayRecord, benchmark: str) -> Problem:
    """One record as the registry presents it: the original question (options rendered for multiple choice) and
    the gold as the project's verifiers read it (math equivalence, evaluated literals, a letter)."""
    gold = str(record.gold)
    question = record.question
    if record.set == "mmlu-redux":
        choices = record.choices or []
        if len(choices) != 4 or not gold.isdigit() or int(gold) >= len(choices):
            raise ReplayFormatError(
                f"{record.set}:{record.id}: expected 4 choices and a gold index, got {gold!r}"
            )
        question = render_choices(question, choices)
        reference = TextReference(answer=LETTERS[int(gold)], kind="mcq", choices=choices)
    elif record.set == "crux":
        reference = TextReference(answer=gold, kind="exact")
    elif record.set == "gsm":  # released as "# 1,234"
        reference = TextReference(answer=gold.lstrip("#").strip().replace(",", ""), kind="math")
    elif record.set == "math-l5":
        reference = TextReference(answer=gold, kind="math")
    else:
        raise ReplayFormatError(
            f"{record.set}:{record.id}: unknown set {record.set!r}; known: {', '.join(SETS)}"
        )
    return Problem(
        id=record.id,
        benchmark=benchmark,
        question=question,
        reference=reference,
        domain=DOMAINS[record.set],
        subject=record.subject,
    )


def problems(path: Path | None, set_name: str, benchmark: str) -> list[Problem]:
    """A table's records of ``set_name`` as ``Problem``s (``None``: the shipped table); a table of another set only
    is an error naming it."""
    path = path or shipped_dir() / TABLES[set_name]
    records = read_table(path)
    mine = [r for r in records if r.set == set_name]
    if not mine:
        have = sorted({r.set for r in records})
        raise ReplayFormatError(f"{path}: no {set_name!r} records (it holds {', '.join(have) or 'none'})")
    return [problem(r, benchmark) for r in mine]


def split_part(found: Sequence[Problem], set_name: str, *, test: bool) -> list[Problem]:
    """The registry split of loaded problems: held-out records (a held-out file) are always test; the public ones
    follow ``in_test_split``."""
    return [p for p in found if (is_held_out(set_name, p.id) or in_test_split(set_name, p.id)) == test]
