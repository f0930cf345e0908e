"""Policy versions, the learner's side: an adapter directory packed, put into the Object Store and announced; what a
reader checks (sha256, size, a flat adapter directory, the object still being the announced one); a finished job's
adapter published and loaded by a vLLM policy server at run time (a local HTTP server speaking vLLM's two LoRA
endpoints). Real nats-server; the tiny model and adapters of tests/adapters.py."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import time
from pathlib import Path

import msgspec
import nats
import pytest
from aiohttp import web
from nats.js.api import ObjectMeta

from conductor.policy_versions import (
    VersionError,
    announcement_subject,
    fetch,
    list_versions,
    pack,
    put_version,
    sha256_file,
    unpack,
)
from schemas.errors import ErrorCode
from schemas.learner import PolicyVersion
from schemas.tasks import Names
from services.learner.app import LearnerService, LearnerSettings
from services.learner.config import ConfigError, LearnerConfig, OutputSection, parse_config
from services.learner.versions import base_fingerprint, finished_policy, publish_adapter

OTHER_BASE = "sha256:" + "0" * 64


def _tar(members: dict[str, bytes], *, link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return buf.getvalue()


def test_pack_is_byte_identical_and_unpack_gives_back_the_adapter(tiny_adapters, tmp_path):
    first, second = tmp_path / "1.tar", tmp_path / "2.tar"
    pack(tiny_adapters.a, first)
    time.sleep(0.01)
    pack(tiny_adapters.a, second)
    assert first.read_bytes() == second.read_bytes()
    out = unpack(first, tmp_path / "out", max_bytes=1 << 30)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (out / name).read_bytes() == (tiny_adapters.a / name).read_bytes()


@pytest.mark.parametrize(
    ("members", "link"),
    [
        (
            {"adapter_config.json": b"{}", "../adapter_model.safetensors": b"x"},
            None,
        ),  # a path out of the directory
        ({"adapter_config.json": b"{}", "sub/adapter_model.safetensors": b"x"}, None),  # not flat
        (
            {"adapter_config.json": b"{}", "adapter_model.safetensors": b"x", "adapter_model.bin": b"x"},
            None,
        ),  # pickle
        ({"adapter_config.json": b"{}", "adapter_model.safetensors": b"x"}, "README.md"),  # a symlink
        ({"adapter_config.json": b"{}"}, None),  # no weights
        ({"adapter_config.json": b"{}", "adapter_model.safetensors": b"x" * 4096}, None),  # over the limit
    ],
    ids=["traversal", "nested", "pickle", "symlink", "no-weights", "too-big"],
)
def test_unpack_refuses_anything_but_a_flat_adapter_directory(tmp_path, members, link):
    packed = tmp_path / "v.tar"
    packed.write_bytes(_tar(members, link=link))
    with pytest.raises(VersionError) as info:
        unpack(packed, tmp_path / "out", max_bytes=1024)
    assert info.value.reason == "corrupt"
    assert not (tmp_path / "adapter_model.safetensors").exists()


def test_unpack_refuses_what_is_not_a_tar(tmp_path):
    packed = tmp_path / "v.tar"
    packed.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(VersionError, match="not a readable tar"):
        unpack(packed, tmp_path / "out", max_bytes=1 << 20)


def test_the_base_fingerprint_identifies_the_weights(tiny_adapters, tmp_path):
    from services.learner.export import load_with_adapter

    fp = base_fingerprint(tiny_adapters.base)
    assert fp == base_fingerprint(tiny_adapters.base) and fp.startswith("sha256:")
    tuned = tmp_path / "tuned"
    load_with_adapter(tiny_adapters.base, tiny_adapters.a).save_pretrained(str(tuned))
    assert base_fingerprint(tuned) != fp


@pytest.fixture
async def nc(nats_url):
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


@pytest.mark.nats
async def test_publish_announces_and_a_reader_gets_the_same_files_back(
    nc, subject_prefix, tiny_adapters, tmp_path
):
    heard: list[PolicyVersion] = []

    async def on_msg(msg) -> None:
        heard.append(msgspec.json.decode(msg.data, type=PolicyVersion))

    await nc.subscribe(announcement_subject("tiny run", subject_prefix), cb=on_msg)
    version = await publish_adapter(
        nc, tiny_adapters.a, base_dir=tiny_adapters.base, run="tiny run", step=60, prefix=subject_prefix
    )
    for _ in range(100):
        if heard:
            break
        await asyncio.sleep(0.02)
    assert heard == [version]
    assert version.version == "tiny run@60" and version.object == "tiny_run/60" and version.rank == 4
    assert version.base == base_fingerprint(tiny_adapters.base)
    bucket = Names.for_prefix(subject_prefix).policies_bucket
    assert await list_versions(nc.jetstream(), bucket) == [version]
    adapter = await fetch(nc.jetstream(), bucket, version, tmp_path, max_bytes=1 << 30)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (adapter / name).read_bytes() == (tiny_adapters.a / name).read_bytes()
    assert not (tmp_path / "version.tar").exists()


@pytest.mark.nats
async def test_a_reader_refuses_missing_oversized_and_corrupt_versions(
    nc, subject_prefix, tiny_adapters, tmp_path
):
    js, bucket = nc.jetstream(), Names.for_prefix(subject_prefix).policies_bucket
    with pytest.raises(VersionError) as info:  # no bucket yet
        await fetch(js, bucket, _version("r", 1, "f" * 64, 10), tmp_path, max_bytes=1 << 20)
    assert info.value.reason == "missing"
    good = await put_version(js, bucket, tiny_adapters.a, run="r", step=1, base=OTHER_BASE, max_bytes=1 << 30)
    with pytest.raises(VersionError) as info:
        await fetch(js, bucket, msgspec.structs.replace(good, object="r/404"), tmp_path, max_bytes=1 << 30)
    assert info.value.reason == "missing"
    with pytest.raises(VersionError) as info:
        await fetch(js, bucket, good, tmp_path, max_bytes=good.size - 1)
    assert info.value.reason == "too_large"
    with pytest.raises(VersionError) as info:  # the learner refuses to publish past its own limit too
        await put_version(js, bucket, tiny_adapters.a, run="r", step=2, base=OTHER_BASE, max_bytes=1000)
    assert info.value.reason == "too_large"
    full = bucket + "_FULL"  # a bucket created with room for one version: the second is refused, not retried
    await put_version(
        js,
        full,
        tiny_adapters.a,
        run="r",
        step=1,
        base=OTHER_BASE,
        max_bytes=1 << 30,
        bucket_max_bytes=good.size + 4096,
    )
    with pytest.raises(VersionError, match="is full") as info:
        await put_version(js, full, tiny_adapters.b, run="r", step=2, base=OTHER_BASE, max_bytes=1 << 30)
    assert info.value.reason == "too_large"

    # Bytes that are not the announced ones: the object's description claims the good digest.
    store = await js.object_store(bucket)
    packed = tmp_path / "b.tar"
    pack(tiny_adapters.b, packed)
    forged = msgspec.structs.replace(good, object="r/3", size=packed.stat().st_size)
    await store.put(
        "r/3", packed.read_bytes(), meta=ObjectMeta(description=msgspec.json.encode(forged).decode())
    )
    (tmp_path / "x").mkdir()
    with pytest.raises(VersionError, match="sha256") as info:
        await fetch(js, bucket, forged, tmp_path / "x", max_bytes=1 << 30)
    assert info.value.reason == "corrupt"
    # The announced digest, but not an adapter inside.
    junk = b"\0" * 2048
    digest = _sha(junk)
    junk_version = msgspec.structs.replace(good, object="r/4", size=len(junk), sha256=digest)
    await store.put("r/4", junk, meta=ObjectMeta(description=msgspec.json.encode(junk_version).decode()))
    (tmp_path / "y").mkdir()
    with pytest.raises(VersionError) as info:
        await fetch(js, bucket, junk_version, tmp_path / "y", max_bytes=1 << 30)
    assert info.value.reason == "corrupt"
    # An announcement whose object was replaced since (another digest in the bucket).
    (tmp_path / "z").mkdir()
    with pytest.raises(VersionError, match="not the one announced") as info:
        await fetch(
            js, bucket, msgspec.structs.replace(junk_version, object="r/1"), tmp_path / "z", max_bytes=1 << 30
        )
    assert info.value.reason == "corrupt"


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _version(run: str, step: int, sha: str, size: int) -> PolicyVersion:
    return PolicyVersion(
        version=f"{run}@{step}",
        run=run,
        step=step,
        object=f"{run}/{step}",
        base=OTHER_BASE,
        sha256=sha,
        size=size,
        created=time.time(),
    )


def _finished_run(root: Path, tiny_adapters, *, adapter: bool = True, steps: int = 7) -> LearnerConfig:
    """A run directory as the pipeline leaves it after GRPO and the adapter export (no training here)."""
    import shutil

    out = root / "run"
    out.mkdir()
    shutil.copytree(tiny_adapters.base, out / "base-model")
    (out / "policy").mkdir()
    stages = {"base": {}, "before_grpo": {}, "grpo": {"policy": str(out / "policy")}, "after_grpo": {}}
    if adapter:
        shutil.copytree(tiny_adapters.a, out / "adapter")
        stages["adapter"] = {"rank": 4}
    (out / "stages.json").write_text(json.dumps(stages))
    config = parse_config(f'name = "tiny-sim"\n[model]\nsource = "tiny"\n[grpo]\nsteps = {steps}\n')
    return msgspec.structs.replace(config, output=OutputSection(dir=str(out)))


def test_the_finished_policy_of_a_run(tiny_adapters, tmp_path):
    config = _finished_run(tmp_path, tiny_adapters)
    final = finished_policy(config)
    assert final is not None and final.step == 7
    assert (
        final.model == Path(config.output.dir) / "policy"
        and final.adapter == Path(config.output.dir) / "adapter"
    )
    assert (
        finished_policy(msgspec.structs.replace(config, output=OutputSection(dir=str(tmp_path / "none"))))
        is None
    )


def test_a_jobs_output_directory_stays_under_the_checkpoint_directory(tmp_path):
    svc = LearnerService(LearnerSettings.from_env({"CONDUCTOR_LEARNER_CHECKPOINT_DIR": str(tmp_path)}))
    config = parse_config('[model]\nsource = "tiny"\n[output]\ndir = "runs/a"\n')
    assert svc.placed(config, None).output.dir == str(tmp_path / "runs" / "a")
    assert svc.placed(config, str(tmp_path / "b")).output.dir == str(tmp_path / "b")
    for escape in ("../elsewhere", "/etc", "runs/../../x"):
        with pytest.raises(ConfigError, match="outside CONDUCTOR_LEARNER_CHECKPOINT_DIR"):
            svc.placed(config, escape)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        (
            '[model]\nsource = "smollm2"\npath = "/tmp/elsewhere/model"\n',
            "model.path",
        ),  # where it converts to
        ('[model]\nsource = "path"\npath = "../../root/model"\n', "model.path"),  # a base read from anywhere
        ('[model]\nsource = "tiny"\n[data]\npool_file = "/etc/passwd"\n', "data.pool_file"),
        ('[model]\nsource = "tiny"\n[output]\nadapter_base = "/home/x/base"\n', "output.adapter_base"),
    ],
)
def test_no_path_a_job_names_leaves_the_learners_data_directory(tmp_path, toml, key):
    """Issue 19, item 2: a job is a client's text; every path in it is placed under the data directory."""
    svc = LearnerService(LearnerSettings.from_env({"CONDUCTOR_LEARNER_CHECKPOINT_DIR": str(tmp_path)}))
    with pytest.raises(ConfigError, match=f"^{key}: .* is outside CONDUCTOR_LEARNER_CHECKPOINT_DIR"):
        svc.placed(parse_config(toml), None)


def test_paths_inside_the_data_directory_are_placed_there(tmp_path):
    svc = LearnerService(LearnerSettings.from_env({"CONDUCTOR_LEARNER_CHECKPOINT_DIR": str(tmp_path)}))
    config = svc.placed(
        parse_config('[model]\nsource = "path"\npath = "models/base"\n[data]\npool_file = "pools/p.toml"\n'),
        None,
    )
    assert (config.model.path, config.data.pool_file) == (
        str(tmp_path / "models/base"),
        str(tmp_path / "pools/p.toml"),
    )


def test_the_data_directory_has_a_safe_default():
    assert (
        LearnerSettings.from_env({}).checkpoint_dir
        == Path.home() / ".local" / "share" / "conductor" / "learner"
    )


def test_a_learning_rate_that_destroys_the_model_is_refused():
    with pytest.raises(ConfigError, match=r"grpo\.learning_rate"):
        parse_config("[grpo]\nlearning_rate = 10\n")
    with pytest.raises(ConfigError, match=r"cold_start\.learning_rate"):
        parse_config("[cold_start]\nlearning_rate = 0.5\n")


@pytest.mark.nats
async def test_a_published_version_is_never_replaced(nc, subject_prefix, tiny_adapters):
    """Issue 19, item 2: the same bytes again (a resumed job) return the stored version; other bytes are refused."""
    js, bucket = nc.jetstream(), Names.for_prefix(subject_prefix).policies_bucket + "_IMMUTABLE"
    first = await put_version(
        js, bucket, tiny_adapters.a, run="prod", step=1, base=OTHER_BASE, max_bytes=1 << 30
    )
    again = await put_version(
        js, bucket, tiny_adapters.a, run="prod", step=1, base=OTHER_BASE, max_bytes=1 << 30
    )
    assert again == first
    with pytest.raises(VersionError) as info:
        await put_version(js, bucket, tiny_adapters.b, run="prod", step=1, base=OTHER_BASE, max_bytes=1 << 30)
    assert info.value.reason == "exists" and "never reused" in str(info.value)
    assert (await list_versions(js, bucket)) == [first]


class FakeVllm:
    """vLLM's run-time LoRA endpoints as a vLLM without ``load_inplace`` answers them: a name already loaded is a
    400 until it is unloaded."""

    def __init__(self) -> None:
        self.loaded: dict[str, str] = {"conductor": "/old/adapter"}
        self.calls: list[tuple[str, dict]] = []
        self.app = web.Application()
        self.app.router.add_post("/v1/load_lora_adapter", self.load)
        self.app.router.add_post("/v1/unload_lora_adapter", self.unload)

    async def load(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("load", body))
        if body["lora_name"] in self.loaded:
            return web.json_response(
                {"message": f"The lora adapter '{body['lora_name']}' has already been loaded."}, status=400
            )
        if not await asyncio.to_thread(Path(body["lora_path"], "adapter_config.json").is_file):
            return web.json_response({"message": "no adapter there"}, status=404)
        self.loaded[body["lora_name"]] = body["lora_path"]
        return web.Response(text=f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

    async def unload(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("unload", body))
        self.loaded.pop(body["lora_name"], None)
        return web.Response(text="Success")


@pytest.fixture
async def vllm():
    fake = FakeVllm()
    runner = web.AppRunner(fake.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield fake
    await runner.cleanup()


class _Broker:
    def __init__(self, connection) -> None:
        self.connection = connection


@pytest.mark.nats
async def test_a_finished_job_is_published_and_loaded_by_the_policy_server_at_run_time(
    nc, nats_url, subject_prefix, tiny_adapters, tmp_path, vllm
):
    config = _finished_run(tmp_path, tiny_adapters)
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POLICY_RUNTIME_LORA": "1",
        "CONDUCTOR_POLICY_SERVER_URL": vllm.url + "/v1",
    }
    svc = LearnerService(LearnerSettings.from_env(env))
    await svc.start(_Broker(nc))  # type: ignore[arg-type]
    heard: list[PolicyVersion] = []

    async def on_msg(msg) -> None:
        heard.append(msgspec.json.decode(msg.data, type=PolicyVersion))

    await nc.subscribe(announcement_subject("tiny-sim", subject_prefix), cb=on_msg)
    assert await svc.release("j-1", config) is None
    adapter = str((Path(config.output.dir) / "adapter").resolve())
    assert [c[0] for c in vllm.calls] == ["load", "unload", "load"]  # replaced under the same name
    assert vllm.calls[-1][1] == {"lora_name": "conductor", "lora_path": adapter, "load_inplace": True}
    assert vllm.loaded == {"conductor": adapter}
    (version,) = await list_versions(nc.jetstream(), Names.for_prefix(subject_prefix).policies_bucket)
    assert version.version == "tiny-sim@7" and version.base == base_fingerprint(
        Path(config.output.dir) / "base-model"
    )
    assert version.sha256 == _packed_sha(tiny_adapters.a, tmp_path)
    for _ in range(50):
        if heard:
            break
        await asyncio.sleep(0.02)
    assert heard == [version]


def _packed_sha(adapter: Path, tmp: Path) -> str:
    packed = tmp / "check.tar"
    pack(adapter, packed)
    return sha256_file(packed)


@pytest.mark.nats
async def test_a_refused_run_time_load_is_the_jobs_error(
    nc, nats_url, subject_prefix, tiny_adapters, tmp_path, vllm
):
    config = _finished_run(tmp_path, tiny_adapters, adapter=False)  # output.adapter_rank = 0: nothing to load
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POLICY_RUNTIME_LORA": "1",
        "CONDUCTOR_POLICY_SERVER_URL": vllm.url,
    }
    svc = LearnerService(LearnerSettings.from_env(env))
    await svc.start(_Broker(nc))  # type: ignore[arg-type]
    error = await svc.release("j-2", config)
    assert error is not None and error.code is ErrorCode.UNAVAILABLE and "adapter_rank" in error.message
    assert (
        vllm.calls == []
        and await list_versions(nc.jetstream(), Names.for_prefix(subject_prefix).policies_bucket) == []
    )
