"""`conductor serve learner`: training jobs from a durable JetStream subject, progress events out.

The same ``pipeline.run`` as `conductor train`; here the job (schemas/learner.py) carries the config's TOML text,
rollouts go through this process's own NATS connection, and progress becomes ``LEARNER_PROGRESS`` events. One job
at a time per learner (it owns the accelerators). While a job runs the message gets an in-progress ack every third
of the AckWait; a learner that dies leaves the job unacknowledged, so JetStream redelivers it and the next learner
resumes it from the last checkpoint (a job always runs with ``resume``: its output directory is its identity).

Outcomes: finished → ack; a malformed config or a run that cannot start → error event, ack (deterministic, never
retried); rollouts unavailable or a verifier storm → error event, nak with a delay (transient: resumes later).

A finished job's policy is then shipped (``release``, services/learner/versions.py): its adapter (when the config
exports one, ``output.adapter_rank``) is published as a policy version, and the vLLM policy server is brought to it
— the adapter loaded at run time (``CONDUCTOR_POLICY_RUNTIME_LORA``), or its Deployment rolled to the full
checkpoint (``CONDUCTOR_POLICY_DEPLOYMENT``). A release that fails on NATS is retried with the job (which resumes
with every stage done); a refused roll or load is reported in the final event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import msgspec
import structlog
from faststream import AckPolicy
from faststream.nats import ConsumerConfig, JStream, NatsBroker, NatsMessage, NatsRouter, PullSub
from nats.js.api import RetentionPolicy, StorageType

from conductor import metrics
from conductor.access import inbox_prefix
from conductor.credentials import user_of
from conductor.data import adapter_path, shipped_policies
from conductor.kube import KubeError, api_client, roll_policy_server, wait_rolled
from conductor.policy_versions import DEFAULT_MAX_BYTES, MAX_BYTES, VersionError, check_adapter_config
from conductor.settings import CommonSettings, Count, Env, NonNegative, PositiveSeconds, SettingsError, read
from schemas.errors import ErrorCode, ErrorInfo
from schemas.learner import (
    JOBS_CONSUMER,
    LEARNER_PROGRESS,
    TRAIN_SUBJECT,
    TrainJob,
    TrainProgress,
)
from schemas.tasks import Names
from services.learner.config import ConfigError, LearnerConfig, parse_config
from services.learner.rollouts import RolloutClient, RolloutError, rollout_transport
from services.learner.versions import PolicyServerError, finished_policy, load_runtime_lora, publish_adapter
from tasks.errors import TaskError

log = structlog.get_logger("conductor.learner")
SHIPPED_PREFIX = "conductor/data/policies/"

ACK_WAIT_S = 60.0
PULL_EXPIRY_S = 5.0
RETRY_DELAY_S = 30.0
ROLL_POLL_S = 5.0  # how often a roll's progress is read (vLLM pods take minutes to load a checkpoint)


def _data_dir() -> Path:
    """The learner's data directory when none is set: the user's, never the working directory."""
    return Path.home() / ".local" / "share" / "conductor" / "learner"


class LearnerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Everything about a run (model, stages, GRPO, output directory) is in the job's config file
    (services/learner/config.py), so one learner can run any job; these say where runs live and how a finished
    job's policy is shipped."""

    common: CommonSettings = CommonSettings()
    checkpoint_dir: Annotated[
        Path,
        Env(
            "CONDUCTOR_LEARNER_CHECKPOINT_DIR",
            "The learner's data directory: every path a job names (output.dir, model.path, data.pool_file, "
            "data.tasks paths, output.adapter_base) is placed under it, and one outside it is refused. The chart mounts the checkpoint "
            "volume here, and read-only at the same path in the policy vLLM server, so a checkpoint or adapter path "
            "means the same file in both.",
            fallback=_data_dir,
            default_doc="~/.local/share/conductor/learner",
        ),
    ] = msgspec.field(default_factory=_data_dir)  # the same directory when built in code (tests, library use)
    publish: Annotated[
        bool,
        Env(
            "CONDUCTOR_LEARNER_PUBLISH",
            "Publish a finished job's adapter (its config's `output.adapter_rank` > 0) as a policy version: the "
            "Object Store bucket CONDUCTOR_POLICIES, then an announcement to the planners.",
        ),
    ] = True
    version_max_bytes: Annotated[Count, MAX_BYTES] = DEFAULT_MAX_BYTES
    policies_max_bytes: Annotated[
        NonNegative,
        Env(
            "CONDUCTOR_POLICIES_MAX_BYTES",
            "Size limit of the policy-version bucket when the learner creates it (every version is kept; a full "
            "bucket refuses new ones); 0: only the server's JetStream limits. An existing bucket keeps its own.",
        ),
    ] = 0
    policy_deployment: Annotated[
        str | None,
        Env(
            "CONDUCTOR_POLICY_DEPLOYMENT",
            "The policy vLLM Deployment to roll to a finished job's full checkpoint (conductor/kube.py) when "
            "run-time LoRA loading is off; unset: no roll. The chart sets it when `learner.rollPolicyServer`.",
        ),
    ] = None
    kube_namespace: Annotated[
        str | None,
        Env(
            "CONDUCTOR_KUBE_NAMESPACE",
            "The namespace of CONDUCTOR_POLICY_DEPLOYMENT (the chart: the learner's own).",
        ),
    ] = None
    kubeconfig: Annotated[
        Path | None,
        Env(
            "CONDUCTOR_KUBECONFIG",
            "A kubeconfig for the roll; unset: the pod's service account inside a cluster, else KUBECONFIG or "
            "~/.kube/config.",
        ),
    ] = None
    roll_timeout_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_POLICY_ROLL_TIMEOUT_S",
            "How long the learner waits for every policy server replica to run a rolled checkpoint.",
        ),
    ] = 1800.0
    runtime_lora: Annotated[
        bool,
        Env(
            "CONDUCTOR_POLICY_RUNTIME_LORA",
            "The policy vLLM server loads LoRA adapters at run time (`--enable-lora`, "
            "`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`): a finished job's adapter is POSTed to its "
            "`/v1/load_lora_adapter` instead of rolling the Deployment.",
        ),
    ] = False
    policy_server_url: Annotated[
        str | None,
        Env(
            "CONDUCTOR_POLICY_SERVER_URL",
            "The policy vLLM server's base URL (`http://host:8000`), for run-time LoRA loading.",
        ),
    ] = None
    lora_name: Annotated[
        str,
        msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]+$"),
        Env(
            "CONDUCTOR_POLICY_LORA_NAME",
            "The model name a run-time-loaded adapter is served under (the planner's `openai:<name>`); each new "
            "version replaces it.",
        ),
    ] = "conductor"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LearnerSettings:
        settings = read(cls, env)
        if settings.runtime_lora and not settings.policy_server_url:
            raise SettingsError(
                "CONDUCTOR_POLICY_RUNTIME_LORA is on but CONDUCTOR_POLICY_SERVER_URL is not set"
            )
        if settings.policy_deployment and not settings.kube_namespace:
            raise SettingsError("CONDUCTOR_POLICY_DEPLOYMENT is set but CONDUCTOR_KUBE_NAMESPACE is not")
        return settings


class LearnerService:
    name = "learner"

    def __init__(self, settings: LearnerSettings) -> None:
        self.settings = settings
        common = self.common = settings.common
        self.endpoints: list = []
        self.router = NatsRouter()
        self._broker: NatsBroker | None = None
        p = common.subject_prefix
        self.router.subscriber(
            p + TRAIN_SUBJECT,
            stream=JStream(
                Names.for_prefix(p).learner_jobs_stream,
                subjects=[p + TRAIN_SUBJECT],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
            ),
            durable=JOBS_CONSUMER,
            pull_sub=PullSub(
                batch_size=1, timeout=PULL_EXPIRY_S
            ),  # one job at a time; replicas share the queue
            inbox_prefix=f"{inbox_prefix(user_of(common, self.name))}.".encode(),  # its own inbox (conductor/access.py)
            config=ConsumerConfig(ack_wait=ACK_WAIT_S),
            ack_policy=AckPolicy.MANUAL,
            max_workers=1,
            title="learner-train",
        )(self.handle_job)

    async def start(self, broker: NatsBroker) -> None:
        self._broker = broker

    async def stop(self) -> None:
        self._broker = None

    async def handle_job(self, msg: NatsMessage) -> None:
        try:
            job = msgspec.json.decode(msg.body, type=TrainJob)
        except msgspec.DecodeError as exc:
            log.warning("undecodable training job dropped", error=str(exc))
            await msg.ack()
            return
        keep = asyncio.create_task(_keep_alive(msg))
        try:
            outcome = await self.train(job)
        finally:
            keep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keep
        if outcome is not None and outcome.retryable:
            await msg.nak(delay=RETRY_DELAY_S)
        else:
            await msg.ack()

    async def train(self, job: TrainJob) -> ErrorInfo | None:
        """Run the job to its end; the error that stopped it, if any (also published as the final event)."""
        loop = asyncio.get_running_loop()
        error: ErrorInfo | None = None
        try:
            config = self.placed(parse_config(job.config), job.output_dir)
            assert self._broker is not None
            transport = rollout_transport(self._broker.connection, self.common.subject_prefix, config.rollout)
            client = RolloutClient(transport, config.rollout)

            def score(rollouts):
                results = asyncio.run_coroutine_threadsafe(client.score(rollouts), loop).result()
                metrics.learner_rollouts(config.name, results)
                return results

            def progress(stage: str, step: int, total: int, figures: dict) -> None:
                numbers = {k: float(v) for k, v in figures.items() if isinstance(v, int | float)}
                metrics.learner_progress(config.name, stage, step, total, figures)
                event = TrainProgress(job_id=job.job_id, stage=stage, step=step, total=total, figures=numbers)
                asyncio.run_coroutine_threadsafe(self._publish(event), loop)

            from services.learner.pipeline import run

            await asyncio.to_thread(run, config, score, resume=True, progress=progress)
            error = await self.release(job.job_id, config)
        except (ConfigError, TaskError) as exc:  # TaskError: a task file that is missing or malformed
            error = ErrorInfo(code=ErrorCode.BAD_REQUEST, message=str(exc), field="config")
        except RolloutError as exc:
            error = exc.info
        except (
            Exception
        ) as exc:  # a crash in training: reported, not retried blindly (the run resumes on resubmit)
            log.exception("training job failed", job_id=job.job_id)
            error = ErrorInfo(
                code=ErrorCode.INTERNAL, message=f"training failed: {type(exc).__name__}: {exc}"[:500]
            )
        metrics.learner_job_finished(error)
        await self._publish(TrainProgress(job_id=job.job_id, stage="done", done=True, error=error))
        return error

    def placed(self, config: LearnerConfig, output_dir: str | None) -> LearnerConfig:
        """The config with every path it names under ``CONDUCTOR_LEARNER_CHECKPOINT_DIR``: a job is a client's
        text, and its paths are where the learner writes (output, a converted base model) or what it reads and
        may publish (a base, a pool, task files, an adapter to start from); ``ConfigError`` naming the key when one
        would leave the directory."""
        root = self.settings.checkpoint_dir.resolve()

        def inside(key: str, value: str) -> str:
            if not value:
                return value  # the default: under output.dir, or a file shipped with the package
            placed = (root / value).resolve()  # an absolute ``value`` stays itself
            if not placed.is_relative_to(root):
                raise ConfigError(f"{key}: {value} is outside CONDUCTOR_LEARNER_CHECKPOINT_DIR ({root})")
            return str(placed)

        def adapter(value: str) -> str:
            """A shipped policy by name (conductor/data/policies), else a directory placed like any other path; an
            adapter peft would obey beyond a plain LoRA is refused here, as the planner's is (issue 34)."""
            if not value:
                return value
            name = value.removeprefix(
                SHIPPED_PREFIX
            )  # the presets name shipped policies by their path in the repo
            shipped = "/" not in name and name in shipped_policies()
            placed = str(adapter_path(name)) if shipped else inside("model.adapter", value)
            try:
                check_adapter_config(Path(placed))
            except VersionError as exc:
                raise ConfigError(f"model.adapter: {exc}") from exc
            return placed

        m, d, o = config.model, config.data, config.output
        tasks = [
            msgspec.structs.replace(
                t,
                path=inside(f"data.tasks[{i}].path", t.path),
                test_path=inside(f"data.tasks[{i}].test_path", t.test_path),
            )
            for i, t in enumerate(d.tasks)
        ]
        return msgspec.structs.replace(
            config,
            model=msgspec.structs.replace(m, path=inside("model.path", m.path), adapter=adapter(m.adapter)),
            data=msgspec.structs.replace(d, pool_file=inside("data.pool_file", d.pool_file), tasks=tasks),
            output=msgspec.structs.replace(
                o,
                dir=inside("output.dir", output_dir or o.dir),
                adapter_base=inside("output.adapter_base", o.adapter_base),
            ),
        )

    async def release(self, job_id: str, config: LearnerConfig) -> ErrorInfo | None:
        """Ship the run's finished policy: publish its adapter as a version, then bring the vLLM policy server to it
        (run-time LoRA load, or a roll of its Deployment). The error that stopped it, if any."""
        s, final = self.settings, finished_policy(config)
        if final is None:
            log.info("nothing to ship: the run trained no model", job_id=job_id)
            return None
        version = f"{config.name}@{final.step}"
        try:
            if s.publish and final.adapter is not None:
                assert self._broker is not None
                published = await publish_adapter(
                    self._broker.connection,
                    final.adapter,
                    base_dir=config.model_dir(),
                    run=config.name,
                    step=final.step,
                    prefix=self.common.subject_prefix,
                    max_bytes=s.version_max_bytes,
                    bucket_max_bytes=s.policies_max_bytes,
                )
                await self._publish(
                    TrainProgress(
                        job_id=job_id,
                        stage="publish",
                        step=1,
                        total=1,
                        figures={"bytes": float(published.size)},
                    )
                )
            elif s.publish:
                log.info("no adapter to publish (output.adapter_rank = 0)", job_id=job_id, version=version)
            if s.runtime_lora:
                if final.adapter is None:
                    raise PolicyServerError(
                        "run-time LoRA loading needs the run's adapter: set output.adapter_rank"
                    )
                assert s.policy_server_url is not None
                await load_runtime_lora(s.policy_server_url, s.lora_name, str(final.adapter.resolve()))
            elif s.policy_deployment:
                await asyncio.to_thread(self._roll, str(final.model.resolve()), version)
                await self._publish(TrainProgress(job_id=job_id, stage="roll", step=1, total=1))
        except VersionError as exc:
            retry = exc.reason == "unavailable"
            code = ErrorCode.UNAVAILABLE if retry else ErrorCode.BAD_REQUEST
            return ErrorInfo(code=code, message=f"publishing {version}: {exc}", retryable=retry)
        except (KubeError, PolicyServerError) as exc:
            log.error(
                "the policy server was not brought to the new policy",
                job_id=job_id,
                version=version,
                error=str(exc),
            )
            return ErrorInfo(code=ErrorCode.UNAVAILABLE, message=f"shipping {version}: {exc}"[:500])
        return None

    def _roll(self, model: str, version: str) -> None:
        s = self.settings
        assert s.policy_deployment is not None and s.kube_namespace is not None
        api = api_client(str(s.kubeconfig) if s.kubeconfig else None)
        generation = roll_policy_server(api, s.kube_namespace, s.policy_deployment, model, version)
        log.info("policy server rolling", deployment=s.policy_deployment, model=model, version=version)
        wait_rolled(api, s.kube_namespace, s.policy_deployment, generation, s.roll_timeout_s, ROLL_POLL_S)
        log.info("policy server rolled", deployment=s.policy_deployment, version=version)

    async def _publish(self, event: TrainProgress) -> None:
        if self._broker is not None:
            subject = self.common.subject_prefix + LEARNER_PROGRESS.subject(job_id=event.job_id)
            await self._broker.connection.publish(subject, msgspec.json.encode(event))


async def _keep_alive(msg: NatsMessage) -> None:
    while True:
        await asyncio.sleep(ACK_WAIT_S / 3)
        await msg.in_progress()


def create_service(env: Mapping[str, str] | None = None) -> LearnerService:
    return LearnerService(LearnerSettings.from_env(env))
