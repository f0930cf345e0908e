"""Plan one round: choose the policy, build the prompt, sample, parse; resample on format failures, then fall back.

Serving rules (the training reward treats a format failure as 0, docs/method.md §3; a user should get an answer):

- A model policy is sampled up to ``1 + resamples`` times; each unparseable sample's reason is recorded in
  ``format_failures``. When all fail, the configured fallback baseline writes the workflow (``fallback_used``);
  without a fallback the reply carries a non-retryable ``format_error`` (resampling already happened here).
- A backend failure (``PolicyError``) goes straight to the fallback, recorded in ``policy_error`` (the backend's
  HTTP status and words); without a fallback it is a ``planner_error`` whose ``retryable`` says whether asking
  again may help. Each rejected sample's reason and text are kept in ``rejected``, so that why a fallback planned
  can be read afterwards (the executor copies both into the round's record).
- A prompt over the policy's context (``PromptTooLong``) is a non-retryable ``planner_error`` naming both numbers,
  never a fallback: on a recursion round the fallback hands back, and the round would end with nobody told.
- ``PlanRequest.policy`` overrides the configured policy per request: a baseline spec (``moa``, ``single:2``,
  ``refine:3``, ``consensus:5@1``, optionally prefixed ``baseline:``), or ``conductor`` / the configured policy's
  own name for the model policy, or ``worker:<name>``: that pool worker writes the workflow from the same prompt
  (policies/worker.py). Anything else is ``bad_request`` naming ``policy``.
- Recursion rounds (``previous`` non-empty) use the recursion prompt and accept three empty lists (hand back).
  Baselines, including the fallback, hand back on recursion rounds (see ``baselines``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import structlog

from conductor.answer_format import answer_type
from conductor.prompt import MAX_SHOWN_RESPONSE_CHARS, policy_messages, view_refusal
from conductor.workflow import ParsedCompletion, WorkflowFormatError, parse_completion
from schemas.errors import ErrorCode, ErrorInfo
from schemas.learner import PolicyCard
from schemas.plan import REJECTED_TEXT_CHARS, PlanReply, PlanRequest, RejectedSample
from schemas.usage import Usage
from schemas.work import ChatMessage
from services.planner.baselines import (
    BaselineError,
    BaselinePlan,
    BaselineSpec,
    handback,
    parse_baseline,
    plan_baseline,
)
from services.planner.config import PlannerSettings, Serving, serving
from services.planner.policies.worker import WORKER_PREFIX
from services.planner.policy import Policy, PolicyError, PromptTooLong, Sample
from tasks.formats import as_presented

log = structlog.get_logger("conductor.planner")

MODEL_POLICY_ALIAS = "conductor"
"""``PlanRequest.policy`` value that selects the configured model policy whatever its backend."""


def bad_request(message: str, field: str) -> PlanReply:
    return PlanReply(policy="", error=ErrorInfo(code=ErrorCode.BAD_REQUEST, message=message, field=field))


class Planner:
    """``policy`` is the model policy (None when the configured policy is a baseline); ``worker_policy`` makes the
    policy for ``worker:<name>`` (None: this planner cannot reach the workers, e.g. in pure tests)."""

    def __init__(
        self,
        settings: PlannerSettings,
        policy: Policy | None,
        worker_policy: Callable[[str], Policy] | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.worker_policy = worker_policy
        self.default: BaselineSpec | None = (
            parse_baseline(settings.policy_arg)
            if policy is None and settings.policy_kind == "baseline"
            else None
        )
        if policy is None and self.default is None:
            raise ValueError(f"policy {settings.policy!r} needs a policy backend")
        self.fallback = parse_baseline(settings.fallback) if settings.fallback else None

    async def plan(self, req: PlanRequest) -> PlanReply:
        if (invalid := self._check(req)) is not None:
            return invalid
        try:
            chosen = self._choose(req.policy)
        except BaselineError as exc:
            return bad_request(str(exc), "policy")
        if isinstance(chosen, BaselineSpec):
            return self._baseline(chosen, req, per_request=req.policy is not None)
        return await self._sample(chosen, req)

    def _check(self, req: PlanRequest) -> PlanReply | None:
        """What the schema's bounds (checked on decode) cannot say: the numbering and this planner's cap."""
        for i, card in enumerate(req.workers):
            if card.index != i:
                return bad_request(
                    f"worker cards must be numbered 0..n-1 in order; found {card.index}",
                    f"workers[{i}].index",
                )
        if req.max_steps > self.settings.max_steps_cap:
            return bad_request(f"max_steps must be within 1..{self.settings.max_steps_cap}", "max_steps")
        return None

    def _choose(self, requested: str | None) -> Policy | BaselineSpec:
        name = (requested or "").strip()
        if self.policy is not None and name in {"", MODEL_POLICY_ALIAS, self.policy.name}:
            return self.policy
        if not name and self.default is not None:
            return self.default
        if name == MODEL_POLICY_ALIAS:
            raise BaselineError("no model policy is configured on this planner; name a baseline instead")
        if name.startswith(WORKER_PREFIX):
            worker = name.removeprefix(WORKER_PREFIX).strip()
            if not worker or self.worker_policy is None:
                raise BaselineError(
                    f"{name!r}: name a pool worker (worker:<name>) on a planner that reaches them"
                )
            return self.worker_policy(worker)
        return parse_baseline(name.removeprefix("baseline:"))

    def _baseline(self, spec: BaselineSpec, req: PlanRequest, *, per_request: bool) -> PlanReply:
        try:
            plan = _baseline_plan(spec, req)
        except BaselineError as exc:
            if per_request:
                return bad_request(str(exc), "policy")
            return PlanReply(
                policy=spec.name, error=ErrorInfo(code=ErrorCode.PLANNER_ERROR, message=str(exc))
            )
        return PlanReply(
            policy=spec.name,
            completion=plan.completion,
            reasoning=plan.reasoning,
            workflow=plan.workflow,
            attempts=0,
        )

    async def _sample(self, policy: Policy, req: PlanRequest) -> PlanReply:
        """Sample ``policy`` up to ``1 + resamples`` times until a sample parses; what each failure leads to is
        the module docstring's serving rules."""
        # The model policy is served as its card says (services/planner/config.py ``serving``); a pool worker
        # writing the workflow (`worker:<name>`) gets the full prompt with examples, sampled as settings say.
        card = policy.card if policy is self.policy else None
        if (refused := self._refuse_view(policy, card, req)) is not None:
            return refused
        serve = serving(self.settings, card)
        shown = self._shown(policy, card, serve, req)
        trail = _Trail(policy=policy.name)
        for attempt in range(1, self.settings.resamples + 2):
            try:
                samples = await _draw(policy, shown.messages, serve)
            except PromptTooLong as exc:
                log.warning("prompt over the policy's context", policy=policy.name, error=str(exc))
                return trail.reply(
                    ErrorInfo(code=ErrorCode.PLANNER_ERROR, message=str(exc), detail=exc.detail)
                )
            except PolicyError as exc:
                if exc.field is not None:  # the request named something that does not exist: no fallback
                    return bad_request(str(exc), exc.field)
                log.warning(
                    "policy backend failed", policy=policy.name, error=str(exc), retryable=exc.retryable
                )
                info = ErrorInfo(
                    code=ErrorCode.PLANNER_ERROR, message=str(exc), retryable=exc.retryable, detail=exc.detail
                )
                return self._fallback(req, trail.reply(info), backend=True)
            trail.drew(samples)
            try:
                parsed = parse_completion(
                    trail.text,
                    n_workers=len(req.workers),
                    max_steps=shown.max_steps,
                    allow_empty=bool(req.previous),
                )
            except WorkflowFormatError as exc:
                trail.reject(f"{exc} (cut off at max_tokens)" if samples[0].truncated else str(exc))
                log.info("format failure", policy=policy.name, attempt=attempt, reason=exc.reason)
                continue
            # A policy that decides from results recurses as many rounds as its card asks.
            return trail.reply(parsed=parsed, rounds=card.rounds if card is not None else 0)
        # Deterministic for this request: the resamples already happened here, so asking again is not advised.
        info = ErrorInfo(code=ErrorCode.FORMAT_ERROR, message=trail.failures[-1], retryable=False)
        return self._fallback(req, trail.reply(info), backend=False)

    def _refuse_view(self, policy: Policy, card: PolicyCard | None, req: PlanRequest) -> PlanReply | None:
        """Trained on one fixed view, the policy is a pointer into that numbering; trained on views of one pool, it
        knows those workers only: any other view is planned by the fallback baseline, and the record says why."""
        refusal = view_refusal(card, req.workers)
        if refusal is None:
            return None
        message = f"{policy.name} {refusal}; its card serves it on the views it was trained on only"
        info = ErrorInfo(code=ErrorCode.PLANNER_ERROR, message=message, retryable=False)
        return self._fallback(req, PlanReply(policy=policy.name, error=info), backend=True)

    def _shown(self, policy: Policy, card: PolicyCard | None, serve: Serving, req: PlanRequest) -> _Shown:
        """The prompt the policy is shown, and the step cap its workflow is parsed with."""
        # A policy trained on registry questions saw each with its answer-format instruction: a user's question
        # without one is shown so too (without it, the shipped policy wrote unusable workflows for 7 of the demo's
        # 20 questions; with it, none).
        # A request that names no answer type (a plain chat request to the gateway) is shown the one its question's
        # own text says (conductor/answer_format.py ``answer_type``): the policy routes on that line.
        domain = req.domain or answer_type(req.question)
        question = as_presented(req.question, domain) if serve.harness_questions else req.question
        # The card's step cap is obeyed: a policy trained to write at most N steps is shown and held to
        # min(N, the request's), never asked for more than it learned.
        max_steps = min(req.max_steps, card.max_steps) if card is not None else req.max_steps
        messages = policy_messages(
            question,
            req.workers,
            req.previous,
            max_steps=max_steps,
            domain=domain if serve.show_domain else None,
            style=serve.prompt if policy is self.policy else "examples",
            response_chars=card.response_chars if card is not None else MAX_SHOWN_RESPONSE_CHARS,
        )
        return _Shown(messages=messages, max_steps=max_steps)

    def _fallback(self, req: PlanRequest, failed: PlanReply, *, backend: bool) -> PlanReply:
        """The fallback baseline's workflow in place of ``failed``; ``failed`` itself when there is no fallback
        (or it does not fit the request's pool)."""
        if self.fallback is None:
            return failed
        try:
            plan = _baseline_plan(self.fallback, req)
        except BaselineError as exc:
            log.error("fallback does not fit the request", fallback=self.fallback.name, error=str(exc))
            return failed
        return msgspec.structs.replace(
            failed,
            policy=self.fallback.name,
            completion=plan.completion,
            reasoning=plan.reasoning,
            workflow=plan.workflow,
            fallback_used=True,
            error=None,
            policy_error=failed.error if backend else None,
        )


def _baseline_plan(spec: BaselineSpec, req: PlanRequest) -> BaselinePlan:
    """A baseline's workflow for the request: on a recursion round it hands back (see ``baselines``)."""
    if req.previous:
        return handback(spec.name)
    return plan_baseline(spec, n_workers=len(req.workers), max_steps=req.max_steps)


async def _draw(policy: Policy, messages: list[ChatMessage], serve: Serving) -> list[Sample]:
    """One sample of the policy, as its serving settings say; an empty answer is a transient backend failure."""
    samples = await policy.sample(messages, n=1, temperature=serve.temperature, max_tokens=serve.max_tokens)
    if not samples:
        raise PolicyError("the policy returned no samples", retryable=True)
    return samples


@dataclass(frozen=True, slots=True)
class _Shown:
    messages: list[ChatMessage]
    max_steps: int


@dataclass(slots=True)
class _Trail:
    """What one request's samples left so far: the last text, each rejected sample, the usage. ``reply`` is the
    one place a sampled policy's ``PlanReply`` is built, whether it planned, failed or hands over to the fallback."""

    policy: str
    text: str = ""
    drawn: int = 0
    failures: list[str] = field(default_factory=list)
    rejected: list[RejectedSample] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def drew(self, samples: list[Sample]) -> None:
        """The first sample is the one parsed; the usage counts every sample the backend returned."""
        self.drawn += 1
        self.usage = sum((s.usage for s in samples), self.usage)
        self.text = samples[0].text

    def reject(self, reason: str) -> None:
        self.failures.append(reason)
        self.rejected.append(RejectedSample(reason=reason, text=self.text[:REJECTED_TEXT_CHARS]))

    def reply(
        self, error: ErrorInfo | None = None, *, parsed: ParsedCompletion | None = None, rounds: int = 0
    ) -> PlanReply:
        return PlanReply(
            policy=self.policy,
            completion=self.text,
            reasoning=parsed.reasoning if parsed is not None else "",
            workflow=parsed.workflow if parsed is not None else None,
            attempts=self.drawn,
            format_failures=self.failures,
            rejected=self.rejected,
            usage=self.usage,
            error=error,
            rounds=rounds,
        )
