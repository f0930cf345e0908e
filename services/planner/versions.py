"""The planner's side of policy versions: hear the learner's announcements, fetch and verify the version, hot-load
it into the local backend without a restart (the format and the checks: conductor/policy_versions.py).

``CONDUCTOR_POLICY_VERSIONS``: ``watch`` loads, at start-up, the newest version in the bucket whose base is this
planner's base model, then every version announced; ``<run>@<step>`` loads that version only, at start-up when it
is already in the bucket or when it is announced. Samples wait for the start-up load, so a watching planner does
not answer from the untrained base while its policy is a download away.

Versions load one at a time, in the order heard; announcements that arrive during a load collapse into the newest.
A version that cannot be used — missing, too large, corrupt, for another base, or an adapter peft cannot apply —
is refused with a log line and a count (``conductor_policy_version_loads{outcome}``), and the model being served
stays. The served version is logged and exposed as ``conductor_policy_version_info``. An announcement missed
while the planner was disconnected is picked up at the next announcement or restart (announcements are not
durable; the bucket is).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import structlog

from conductor import metrics
from conductor.policy_versions import VersionError, announcement_subject, fetch, list_versions
from schemas.learner import POLICY_SUBJECT_PREFIX, PolicyVersion
from schemas.tasks import Names
from services.planner.config import ConfigError, PlannerSettings, serving
from services.planner.policies.local import LocalPolicy
from services.planner.policy import PolicyError

log = structlog.get_logger("conductor.planner.versions")


class VersionWatcher:
    def __init__(self, policy: LocalPolicy, settings: PlannerSettings) -> None:
        self.settings = settings
        self.policy = policy
        self.pinned = None if settings.versions == "watch" else settings.versions
        self.max_bytes = settings.version_max_bytes
        self.prefix = settings.common.subject_prefix
        self.bucket = Names.for_prefix(self.prefix).policies_bucket
        self._js: Any = None
        self._sub: Any = None
        self._task: asyncio.Task | None = None
        self._heard: PolicyVersion | None = None
        self._wake = asyncio.Event()

    async def start(self, nc: Any) -> None:
        """Subscribe to announcements, then load the start-up version in the background (samples wait for it)."""
        self._js = nc.jetstream()
        self._sub = await nc.subscribe(self.prefix + POLICY_SUBJECT_PREFIX + ".>", cb=self._on_announcement)
        self.policy.hold()
        self._task = asyncio.create_task(self._run(), name="policy-versions")

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.policy.release()

    async def _on_announcement(self, msg: Any) -> None:
        try:
            version = msgspec.json.decode(msg.data, type=PolicyVersion)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("undecodable policy announcement ignored", subject=msg.subject, error=str(exc))
            return
        if msg.subject != announcement_subject(version.run, self.prefix):
            log.warning(
                "policy announcement on another run's subject ignored",
                subject=msg.subject,
                version=version.version,
            )
            return
        self._heard = version
        self._wake.set()

    async def _run(self) -> None:
        try:
            await self._startup()
        except Exception:  # a bug: the planner keeps serving what it has
            log.exception("loading the start-up policy version failed")
        finally:
            self.policy.release()
        while True:
            await self._wake.wait()
            self._wake.clear()
            version, self._heard = self._heard, None
            if version is None:
                continue
            try:
                await self.apply(version)
            except Exception:
                log.exception("loading a policy version failed", version=version.version)

    async def _startup(self) -> None:
        try:
            found = await list_versions(self._js, self.bucket)
        except VersionError as exc:
            log.warning("policy versions unreadable at start-up; serving the base model", error=str(exc))
            return
        if self.pinned is not None:
            found = [v for v in found if v.version == self.pinned]
        else:
            try:
                base = await self.policy.base_fingerprint()
            except PolicyError as exc:
                log.error("the local policy's base model does not load", error=str(exc))
                return
            found = [v for v in found if v.base == base]
        if found:
            await self.apply(found[-1])
        else:
            log.info("no policy version to load at start-up", bucket=self.bucket, pinned=self.pinned)

    async def apply(self, version: PolicyVersion) -> bool:
        """Load ``version`` into the local policy; False (logged, counted) when it was refused or skipped."""
        if self.pinned is not None and version.version != self.pinned:
            log.info(
                "policy version skipped: another one is pinned", version=version.version, pinned=self.pinned
            )
            return False
        active = self.policy.active
        if active is not None and active.sha256 == version.sha256:
            return True  # already served (announced again, or found at start-up and then announced)
        try:
            serving(self.settings, version.card)
        except (
            ConfigError
        ) as exc:  # an operator pinned a prompt or temperature these weights were not trained on
            return self._refused(version, "card_conflict", exc)
        try:
            base = await self.policy.base_fingerprint()
            if version.base != base:
                raise VersionError(
                    "wrong_base",
                    f"{version.version} is for the base {version.base}, not this planner's {base}",
                )
            with tempfile.TemporaryDirectory(prefix="conductor-policy-") as tmp:
                adapter = await fetch(self._js, self.bucket, version, Path(tmp), max_bytes=self.max_bytes)
                await self.policy.use_adapter(
                    adapter, version=version.version, base=version.base, sha256=version.sha256
                )
        except VersionError as exc:
            return self._refused(version, exc.reason, exc)
        except PolicyError as exc:
            return self._refused(version, "load_failed", exc)
        metrics.policy_version_load("ok")
        metrics.policy_version_served(version.version, version.base, version.sha256)
        log.info(
            "policy version loaded",
            version=version.version,
            sha256=version.sha256,
            size=version.size,
            base=version.base,
            previous=active.version if active else None,
        )
        return True

    def _refused(self, version: PolicyVersion, reason: str, exc: Exception) -> bool:
        metrics.policy_version_load(reason)
        active = self.policy.active
        log.warning(
            "policy version refused; the served model stays",
            version=version.version,
            reason=reason,
            error=str(exc),
            serving=(active.version if active else None) or "the base model",
        )
        return False
