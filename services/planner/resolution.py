"""The one place the Conductor is chosen for a served pool (docs/policies.md).

An explicit ``CONDUCTOR_POLICY`` wins (a registered policy's name stands for its model and adapter). Unset, or ``default``: the registered default policy whose card covers the
pool's workers (conductor/policies.py ``covering``), when this install can run it; otherwise the settings' default
baseline, with the reason. ``conductor serve`` (so the gateway's ``conductor`` model too), ``conductor demo`` and
``conductor eval`` (the embedded planner) resolve here, and the planner's own factory resolves ``default``: the same
pool always gets the same Conductor, and ``Resolution.policy`` is what results record about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from conductor import policies
from conductor.policies import PolicyRecord
from conductor.pool import PoolError, load_pool
from conductor.settings import CommonSettings
from services.planner.config import PlannerSettings

DEFAULT = "default"
"""``CONDUCTOR_POLICY=default``: the same as unset, for a deployment that wants to say so."""


@dataclass(frozen=True)
class Resolution:
    env: dict[str, str]  # the planner's environment, with the chosen policy (and adapter) set
    line: str  # "Conductor: <which> (<why>)", printed once by whoever starts the planner
    policy: PolicyRecord  # what runs: name, version, adapter sha256, card


def resolve(env: Mapping[str, str]) -> Resolution:
    """The Conductor for the pool ``env`` serves (``CONDUCTOR_POOL``; unset: the bundled demo pool).
    ``conductor.policies.RegistryError`` (a ``SettingsError``) when an explicit adapter is not there."""
    env = dict(env)
    spec = env.get("CONDUCTOR_POLICY", "").strip()
    if spec in policies.REGISTRY:  # a registered policy by name: its model and adapter
        return _registered(env, policies.REGISTRY[spec], "named by CONDUCTOR_POLICY")
    if spec and spec != DEFAULT:
        return Resolution(env, f"Conductor: {spec} (CONDUCTOR_POLICY)", policies.record(env))
    env.pop(
        "CONDUCTOR_POLICY", None
    )  # the settings' default baseline, unless a registered policy covers the pool
    try:
        pool = load_pool(CommonSettings.from_env(env).pool_file)
    except PoolError as exc:
        return _baseline(env, str(exc))
    chosen, why = policies.covering(pool)
    if chosen is None:
        return _baseline(env, f"no registered policy covers this pool's workers: {why}")
    missing = chosen.missing()
    if missing:
        install = policies.INSTALL[chosen.base]
        return _baseline(
            env, f"the registered {chosen.name} covers this pool but needs {', '.join(missing)}: {install}"
        )
    return _registered(
        env, chosen, f"the registered default whose card covers this pool's {len(pool.workers)} workers"
    )


def _registered(env: dict[str, str], chosen: policies.Registered, why: str) -> Resolution:
    missing = chosen.missing()
    if missing:  # named explicitly: refused, not replaced by a baseline the caller did not ask for
        install = policies.INSTALL[chosen.base]
        raise policies.RegistryError(f"CONDUCTOR_POLICY={chosen.name} needs {', '.join(missing)}: {install}")
    env |= {"CONDUCTOR_POLICY": chosen.base, "CONDUCTOR_POLICY_ADAPTER": chosen.adapter}
    fallback = PlannerSettings.from_env(env).fallback
    return Resolution(
        env,
        f"Conductor: {chosen.name} v{chosen.version} ({chosen.base} + {chosen.adapter}: {why}; other worker "
        f"views: {fallback})",
        chosen.record(),
    )


def _baseline(env: dict[str, str], why: str) -> Resolution:
    spec = PlannerSettings.from_env(env).policy
    return Resolution(env, f"Conductor: {spec} ({why})", PolicyRecord(name=spec, spec=spec))
