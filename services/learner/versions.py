"""The learner's side of policy versions: publish an adapter directory as a version, and bring the vLLM policy
server to a finished job's policy (the format and the checks: conductor/policy_versions.py).

``publish_adapter`` takes any peft adapter directory on a base model — a run's exported ``adapter/``
(services/learner/export.py, ``output.adapter_rank``), or one made elsewhere — puts it into the Object Store bucket
``CONDUCTOR_POLICIES`` as ``<run>@<step>`` (the name the run's rollouts record as their policy version) and
announces it on ``conductor.learner.policy.<run>``; planners watching versions hot-load it
(services/planner/versions.py).

The vLLM policy server (charts/conductor, ``vllm.servers.policy``) gets a new policy one of two ways:

- run-time LoRA loading (``CONDUCTOR_POLICY_RUNTIME_LORA``): vLLM started with ``--enable-lora`` and the
  environment variable ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` serves ``POST /v1/load_lora_adapter`` with
  ``{"lora_name", "lora_path"}``; the adapter is then a model name of its own in ``/v1/models``, which the
  planner's ``openai:<lora_name>`` policy asks for. The path is read by the vLLM server, so it must be on a volume
  both pods mount (the chart mounts the learner's checkpoint volume read-only in the policy server at the same
  path). vLLM refuses a name that is already loaded unless ``load_inplace`` is true (newer vLLM; older releases
  ignore the field): on that refusal the adapter is unloaded (``/v1/unload_lora_adapter``) and loaded again,
  during which requests for that name fail and the planner resamples or falls back.
- a new rollout (``CONDUCTOR_POLICY_DEPLOYMENT``): the Deployment's ``POLICY_MODEL`` is patched to the job's full
  merged checkpoint (conductor/kube.py ``roll_policy_server``) and the learner waits until every replica runs it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import structlog

from conductor.policy_versions import (
    DEFAULT_MAX_BYTES,
    MODEL_LOAD_LOCK,
    announcement_subject,
    fingerprint,
    put_version,
)
from schemas.learner import PolicyVersion
from schemas.tasks import Names
from services.learner.config import LearnerConfig

log = structlog.get_logger("conductor.learner.versions")


class FinishedPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What a finished run leaves to ship: its full merged checkpoint, its adapter on the base model if the run
    exported one (``output.adapter_rank``), and the GRPO step it is the policy of."""

    model: Path
    adapter: Path | None
    step: int


class PolicyServerError(RuntimeError):
    """The vLLM policy server did not take the adapter; the message has its status and answer."""


def finished_policy(config: LearnerConfig) -> FinishedPolicy | None:
    """The last trained model of the run in ``config.output.dir`` (stages.json, services/learner/pipeline.py):
    GRPO's ``policy/``, else the cold start's; None when no stage trained anything."""
    out = Path(config.output.dir)
    try:
        done = json.loads((out / "stages.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    adapter = out / "adapter"
    if "grpo" in done and (out / "policy").is_dir():
        exported = "adapter" in done and (adapter / "adapter_config.json").is_file()
        return FinishedPolicy(
            model=out / "policy", adapter=adapter if exported else None, step=config.grpo.steps
        )
    for stage in ("rejection", "sft"):
        if stage in done and (out / stage).is_dir():
            return FinishedPolicy(model=out / stage, adapter=None, step=0)
    return None


def base_fingerprint(base_dir: Path) -> str:
    """The fingerprint of the base model at ``base_dir`` (conductor/policy_versions.py)."""
    import torch
    from transformers import AutoModelForCausalLM

    with MODEL_LOAD_LOCK:
        model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    return fingerprint(model)


async def publish_adapter(
    nc: Any,
    adapter_dir: Path,
    *,
    base_dir: Path,
    run: str,
    step: int,
    prefix: str = "",
    max_bytes: int = DEFAULT_MAX_BYTES,
    bucket_max_bytes: int = 0,
    base: str | None = None,
) -> PolicyVersion:
    """Put ``adapter_dir`` (a peft adapter on the model at ``base_dir``) into the bucket as ``<run>@<step>``, then
    announce it; the announced ``PolicyVersion``. ``base`` skips computing the base's fingerprint."""
    if base is None:
        base = await asyncio.to_thread(base_fingerprint, base_dir)
    version = await put_version(
        nc.jetstream(),
        Names.for_prefix(prefix).policies_bucket,
        adapter_dir,
        run=run,
        step=step,
        base=base,
        base_name=str(base_dir),
        max_bytes=max_bytes,
        bucket_max_bytes=bucket_max_bytes,
    )
    await nc.publish(announcement_subject(run, prefix), msgspec.json.encode(version))
    await nc.flush()
    log.info("policy version published", version=version.version, size=version.size, sha256=version.sha256)
    return version


async def load_runtime_lora(url: str, name: str, path: str, *, timeout_s: float = 300.0) -> None:
    """Have the vLLM server at ``url`` serve the adapter at ``path`` (a path on the server) as ``name``."""
    base = url.rstrip("/").removesuffix("/v1")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
        load = {"lora_name": name, "lora_path": path, "load_inplace": True}
        status, text = await _post(http, f"{base}/v1/load_lora_adapter", load)
        if status == 400 and "already" in text.lower():  # a vLLM without load_inplace
            status, text = await _post(http, f"{base}/v1/unload_lora_adapter", {"lora_name": name})
            if status == 200:
                status, text = await _post(http, f"{base}/v1/load_lora_adapter", load)
    if status != 200:
        raise PolicyServerError(f"{base} did not load the adapter {path} as {name!r}: {status} {text[:300]}")
    log.info("policy adapter loaded by the vLLM server", url=base, name=name, path=path)


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, str]:
    try:
        async with http.post(
            url, data=json.dumps(body), headers={"Content-Type": "application/json"}
        ) as resp:
            return resp.status, await resp.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise PolicyServerError(f"{url}: {type(exc).__name__}: {exc}") from exc
