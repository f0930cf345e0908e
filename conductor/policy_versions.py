"""Policy versions in the JetStream Object Store: pack, put, list, fetch and verify one; the base model's fingerprint.

A version is a peft LoRA adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``) on a base
model. The learner packs it as one tar object in the bucket ``CONDUCTOR_POLICIES`` with its ``PolicyVersion``
(schemas/learner.py) as the object's description, then announces the same ``PolicyVersion``
(services/learner/versions.py); a planner's local backend downloads, verifies and hot-loads it
(services/planner/versions.py). Both sides use this module, so what one packs the other can check.

What a reader checks, each failure a ``VersionError`` with a reason (a bounded metric label): the object exists
(``missing``); it is no larger than the reader's limit (``too_large``); it still is the object that was announced,
its bytes hash to the announced sha256 and it unpacks to a flat adapter directory of JSON, safetensors and Markdown
files only (``corrupt``: no links, paths, pickles or anything executable — ``torch.load`` of a ``.bin`` would run
code); the base fingerprint is the reader's (``wrong_base``, checked by the planner). nats-py also checks
JetStream's own per-object digest. NATS failures on the way are ``unavailable``.

The fingerprint identifies the base model's weights however they were stored (safetensors, or a GGUF that
transformers dequantised): sha256 over every tensor's name and shape and an evenly strided sample of at most 4,096
of its values as float32. It costs well under a second for SmolLM2-135M; another model, another fine-tune or the
same weights at a lower precision give another fingerprint.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.js.api import ObjectMeta, ObjectStoreConfig, StorageType

from conductor import stored
from conductor.settings import Env
from schemas.learner import POLICY_SUBJECT_PREFIX, PolicyCard, PolicyVersion

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ALLOWED_SUFFIXES = frozenset({".json", ".safetensors", ".md"})
"""What a packed adapter may hold: peft's config and weights, our export manifest, peft's model card."""
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_TOKEN = re.compile(r"[^A-Za-z0-9_-]")
FINGERPRINT_SAMPLE = 4096
REASONS = ("missing", "too_large", "corrupt", "wrong_base", "unavailable", "exists")

MAX_BYTES = Env(
    "CONDUCTOR_POLICY_VERSION_MAX_BYTES",
    "The largest packed policy version (a LoRA adapter) the learner publishes and a planner downloads. Read by "
    "the learner and the planner.",
)
DEFAULT_MAX_BYTES = 1 << 30

MODEL_LOAD_LOCK = threading.Lock()
"""Held around every model load on the policy-version paths (the planner's local backend, the learner's base
fingerprint): transformers 5's ``from_pretrained`` is not thread-safe — two loads in two threads of one process
(``serve all,learner``, or a swap while a fingerprint is taken) leave tensors on the meta device."""


class VersionError(RuntimeError):
    """A policy version that cannot be published or used; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def run_token(run: str) -> str:
    """A run name as one subject token and object-name part: anything but letters, digits, - and _ becomes _."""
    return _TOKEN.sub("_", run) or "_"


def object_name(run: str, step: int) -> str:
    return f"{run_token(run)}/{step}"


def announcement_subject(run: str, prefix: str = "") -> str:
    return f"{prefix}{POLICY_SUBJECT_PREFIX}.{run_token(run)}"


def fingerprint(model: Any) -> str:
    """``sha256:<hex>`` of a loaded torch model's weights (see the module docstring)."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().reshape(-1)
        stride = max(1, flat.numel() // FINGERPRINT_SAMPLE)
        sample = flat[::stride][:FINGERPRINT_SAMPLE].to(device="cpu", dtype=torch.float32).contiguous()
        h.update(f"{name}:{tuple(tensor.shape)}:".encode())
        h.update(sample.numpy().tobytes())
    return "sha256:" + h.hexdigest()


def adapter_files(adapter_dir: Path) -> list[Path]:
    """The files of an adapter directory that make up a version; ``VersionError`` when it is not one."""
    if not (adapter_dir / ADAPTER_CONFIG).is_file() or not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        raise VersionError(
            "corrupt", f"{adapter_dir} is not a peft adapter ({ADAPTER_CONFIG} + {ADAPTER_WEIGHTS})"
        )
    return sorted(
        p
        for p in adapter_dir.iterdir()
        if p.is_file() and not p.is_symlink() and _FILE_NAME.match(p.name) and p.suffix in ALLOWED_SUFFIXES
    )


MAX_RANK = 256
MAX_TARGETS = 64
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z0-9_]{1,64}){0,8}$")
_NEUTRAL = (None, False, {}, [], "")


def _text_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and len(value) <= 512)


def _flag(value: Any) -> bool:
    return value is True or value is False


def _group_size(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 4096)


_REVIEWED: dict[str, tuple[Callable[[Any], bool], str]] = {
    # Read only by AutoPeftModel and the Hub, never by ``PeftModel.from_pretrained`` on a base we load ourselves.
    "base_model_name_or_path": (_text_or_none, "a name of at most 512 characters, or null"),
    "revision": (_text_or_none, "a name of at most 512 characters, or null"),
    "peft_version": (_text_or_none, "a version string, or null"),
    "inference_mode": (_flag, "true or false"),
    # Any other value is an initialisation peft *runs* at load (issue 34): "pissa"/"pissa_niter_<n>" (an SVD of
    # every target weight, n iterations), "olora" (a QR), "loftq", "eva", "corda", "gaussian", ... — some rewrite
    # the base weights themselves. Loaded weights overwrite a plain init; a named one has run by then.
    "init_lora_weights": (_flag, "only true or false (any other value is an initialisation run at load)"),
    # peft imports the module named here when ``megatron_config`` is set (which must be neutral): its default only.
    "megatron_core": (lambda v: v in (None, "megatron.core"), "null or 'megatron.core'"),
    "qalora_group_size": (_group_size, "a whole number 1..4096, or null (used only with use_qalora)"),
    "use_rslora": (_flag, "true or false (the scale alpha/sqrt(r) instead of alpha/r)"),
}
"""Keys of a peft ``adapter_config.json`` that may hold a non-neutral value, each reviewed: what peft does with it,
and the values allowed. ``auto_mapping`` is not among them (AutoPeftModel imports the library it names): only
neutral."""


def check_adapter_config(adapter_dir: Path) -> dict[str, Any]:
    """``adapter_config.json`` against an allow-list; ``VersionError('corrupt')`` naming the key otherwise.

    peft obeys whatever the file says, and a version comes from the bus (issue 19, item 5): a *string*
    ``target_modules`` is a regular expression matched against every module name (a pathological one held the
    model-load lock for minutes), ``modules_to_save`` replaces whole modules (``lm_head``) with the file's copy,
    ``layer_replication`` grows the model, ``rank_pattern``/``alpha_pattern`` are regex-keyed. So: a plain LoRA
    (``peft_type`` LORA, causal LM, no bias, no DoRA), rank 1..256, ``target_modules`` a list of at most 64 module
    names, each of those keys absent or empty, each reviewed key (``_REVIEWED``) one of its allowed values, and any
    other key neutral (null, false, empty) — a newer peft's new feature is refused until it is reviewed, not obeyed."""
    path = adapter_dir / ADAPTER_CONFIG
    try:
        raw = path.read_bytes()
        config = json.loads(raw) if len(raw) <= 64 * 1024 else None
    except (OSError, ValueError) as exc:
        raise VersionError("corrupt", f"{path} is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise VersionError("corrupt", f"{path} is not a JSON object of at most 64 KiB")

    def bad(key: str, why: str) -> VersionError:
        return VersionError("corrupt", f"{path}: {key} = {json.dumps(config.get(key))[:80]}: {why}")

    if config.get("peft_type") != "LORA" or config.get("task_type") not in ("CAUSAL_LM", None):
        raise bad("peft_type", "only a LoRA adapter for a causal LM is served")
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= MAX_RANK:
        raise bad("r", f"the rank must be a whole number 1..{MAX_RANK}")
    alpha = config.get("lora_alpha")
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not 0 < alpha <= 4 * MAX_RANK:
        raise bad("lora_alpha", f"must be a number in (0, {4 * MAX_RANK}]")
    dropout = config.get("lora_dropout", 0.0)
    if not isinstance(dropout, int | float) or not 0 <= dropout <= 1:
        raise bad("lora_dropout", "must be in [0, 1]")
    targets = config.get("target_modules")
    if (
        not isinstance(targets, list)
        or not 1 <= len(targets) <= MAX_TARGETS
        or not all(isinstance(t, str) and _MODULE_NAME.match(t) for t in targets)
    ):
        raise bad("target_modules", f"must be a list of 1..{MAX_TARGETS} module names (a string is a regex)")
    if config.get("bias", "none") != "none":
        raise bad("bias", "only 'none'")
    checked = {"peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "target_modules", "bias"}
    for key, value in config.items():
        if key in _REVIEWED:
            allowed, what = _REVIEWED[key]
            if not allowed(value):
                raise bad(key, f"must be {what}")
        elif key not in checked and value not in _NEUTRAL:
            raise bad(key, "not allowed in a served adapter (only neutral values: null, false, empty)")
    return config


CARD_FILE = "conductor-policy.json"
"""The policy card beside an adapter's weights (schemas.learner.PolicyCard): how the weights must be served."""


def read_card(adapter_dir: Path) -> PolicyCard | None:
    """The card of an adapter directory; None when it has none (an adapter made before cards, or elsewhere);
    ``VersionError('corrupt')`` naming the file when it is there but not a valid card."""
    path = adapter_dir / CARD_FILE
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=PolicyCard)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise VersionError("corrupt", f"{path} is not a policy card: {exc}") from exc


def write_card(adapter_dir: Path, card: PolicyCard) -> None:
    (adapter_dir / CARD_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(card), indent=2) + b"\n")


def adapter_rank(adapter_dir: Path) -> int | None:
    try:
        rank = json.loads((adapter_dir / ADAPTER_CONFIG).read_text(encoding="utf-8")).get("r")
    except (OSError, ValueError, AttributeError):
        return None
    return rank if isinstance(rank, int) else None


def pack(adapter_dir: Path, dest: Path) -> None:
    """Write the adapter's files as an uncompressed tar (safetensors do not compress), byte-identical for the same
    files: names sorted, times, owners and modes fixed."""
    with tarfile.open(dest, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in adapter_files(adapter_dir):
            info = tarfile.TarInfo(path.name)
            info.size, info.mtime, info.mode = path.stat().st_size, 0, 0o644
            with path.open("rb") as fh:
                tar.addfile(info, fh)


def unpack(tar_path: Path, into: Path, *, max_bytes: int) -> Path:
    """The adapter directory ``into``, from a packed version; ``VersionError('corrupt')`` for anything else."""
    into.mkdir(parents=True, exist_ok=False)
    total = 0
    try:
        with tarfile.open(tar_path, mode="r:") as tar:
            for member in tar:
                name = member.name
                if (
                    not member.isreg()
                    or not _FILE_NAME.match(name)
                    or Path(name).suffix not in ALLOWED_SUFFIXES
                ):
                    raise VersionError(
                        "corrupt", f"the packed version holds {name!r}, which is not an adapter file"
                    )
                total += member.size
                target = into / name
                if total > max_bytes or target.exists():
                    raise VersionError(
                        "corrupt", f"the packed version is not a flat adapter directory ({name!r})"
                    )
                source = tar.extractfile(member)
                assert source is not None  # a regular file
                with source, target.open("wb") as out:
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise VersionError("corrupt", f"the packed version is not a readable tar: {exc}") from exc
    adapter_files(into)  # the two files peft needs are there
    check_adapter_config(into)  # and nothing in its config peft would obey to the model's harm
    return into


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _unavailable(what: str, exc: Exception) -> VersionError:
    return VersionError("unavailable", f"{what}: {type(exc).__name__}: {exc}")


async def open_bucket(js: Any, bucket: str, *, create: bool = False, max_bytes: int = 0) -> Any:
    """The Object Store ``bucket``; created (file storage, ``max_bytes`` in total, 0 = no limit but the server's)
    when ``create`` and it does not exist yet. An existing bucket is used as it is, whatever its limits."""
    try:
        return await js.object_store(bucket)
    except nats.js.errors.BucketNotFoundError:
        if not create:
            raise VersionError(
                "missing", f"no policy versions yet: the bucket {bucket} does not exist"
            ) from None
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        raise _unavailable(f"opening {bucket}", exc) from exc
    config = ObjectStoreConfig(
        description="Conductor policy versions (peft LoRA adapters)",
        max_bytes=max_bytes or -1,
        storage=StorageType.FILE,
    )
    try:
        return await js.create_object_store(bucket, config=config)
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        raise _unavailable(f"creating {bucket}", exc) from exc


async def put_version(
    js: Any,
    bucket: str,
    adapter_dir: Path,
    *,
    run: str,
    step: int,
    base: str,
    base_name: str = "",
    max_bytes: int,
    bucket_max_bytes: int = 0,
) -> PolicyVersion:
    """Pack ``adapter_dir`` and put it as the version ``<run>@<step>``; the ``PolicyVersion`` to announce.
    A published version is immutable: putting the same bytes again (a resumed job) returns the stored version;
    other bytes under a name already taken are ``VersionError('exists')`` — a name a planner may have pinned or
    served never changes its weights."""
    with tempfile.TemporaryDirectory(prefix="conductor-version-") as tmp:
        packed = Path(tmp) / "version.tar"
        await asyncio.to_thread(pack, adapter_dir, packed)
        size = packed.stat().st_size
        if size > max_bytes:
            raise VersionError(
                "too_large", f"{adapter_dir} packs to {size} bytes, more than the limit {max_bytes}"
            )
        fields = dict(
            version=f"{run}@{step}",
            run=run,
            step=step,
            object=object_name(run, step),
            base=base,
            base_name=base_name,
            sha256=await asyncio.to_thread(sha256_file, packed),
            size=size,
            created=time.time(),
            rank=adapter_rank(adapter_dir),
            card=read_card(adapter_dir),
        )
        try:  # the bounds readers check, checked before anything is written
            version = msgspec.convert(fields, PolicyVersion)
        except msgspec.ValidationError as exc:
            raise VersionError("corrupt", f"not a valid policy version: {exc}") from exc
        store = await open_bucket(js, bucket, create=True, max_bytes=bucket_max_bytes)
        if (stored := await _stored(store, version.object)) is not None:
            if stored.sha256 == version.sha256:
                return stored
            raise VersionError(
                "exists",
                f"{version.version} is already published with other weights "
                f"(sha256 {stored.sha256[:12]}); a version name is never reused",
            )
        meta = ObjectMeta(description=msgspec.json.encode(version).decode())
        fh = await asyncio.to_thread(packed.open, "rb")
        try:
            await store.put(version.object, fh, meta=meta)
        except nats.js.errors.APIError as exc:
            if "maximum bytes" in (exc.description or ""):  # JetStream refuses it until versions are deleted
                raise VersionError("too_large", f"{bucket} is full: {version.version} does not fit") from exc
            raise _unavailable(f"putting {version.version} into {bucket}", exc) from exc
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            raise _unavailable(f"putting {version.version} into {bucket}", exc) from exc
        finally:
            fh.close()
    return version


async def _stored(store: Any, name: str) -> PolicyVersion | None:
    """The version already stored under ``name`` (None: the name is free). An object there without a valid
    description still takes the name."""
    try:
        info = await store.get_info(name)
    except nats.js.errors.ObjectNotFoundError:
        return None
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        raise _unavailable(f"reading {name}", exc) from exc
    found = _described(info)
    if found is None:
        raise VersionError("exists", f"{name} is taken by an object that is not a policy version")
    return found


def _described(info: Any) -> PolicyVersion | None:
    try:
        return msgspec.json.decode(info.description or "", type=PolicyVersion)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


LIST_TIMEOUT_S = 10.0
"""The longest listing the bucket may take: a planner starting up must not wait on it forever (issue 34)."""
VERSIONS_STORE = "policy_versions"  # ``conductor_store_entries_refused`` label


class _Meta(msgspec.Struct, kw_only=True):
    """The part of an Object Store meta message (nats-py's ``ObjectInfo`` as JSON) a listing reads."""

    name: str
    description: str | None = None
    deleted: bool | None = None


_meta_dec = msgspec.json.Decoder(_Meta)


async def list_versions(js: Any, bucket: str, *, timeout: float = LIST_TIMEOUT_S) -> list[PolicyVersion]:
    """Every version in the bucket, oldest first, within ``timeout`` (else ``VersionError('unavailable')``).

    Read meta by meta (the stream's meta subjects, then each one's last message) rather than with nats-py's
    ``ObjectStore.list``: its watch stops for good at a meta that does not decode — any message aimed at a meta
    subject as a reply is stored there (issue 34) — and the listing then never ends. A meta that does not decode,
    or whose description is no ``PolicyVersion``, is skipped (logged, counted)."""
    stream, metas = f"OBJ_{bucket}", f"$O.{bucket}.M.>"
    try:
        async with asyncio.timeout(timeout):
            try:
                info = await js.stream_info(stream, subjects_filter=metas)
            except nats.js.errors.NotFoundError:  # no bucket yet
                return []
            found = []
            for subject in sorted(info.state.subjects or {}):
                msg = await js.get_last_msg(stream, subject)
                version = _version_of(msg.data, subject)
                if version is not None:
                    found.append(version)
    except TimeoutError as exc:
        raise VersionError("unavailable", f"listing {bucket} took longer than {timeout:g}s") from exc
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        raise _unavailable(f"listing {bucket}", exc) from exc
    return sorted(found, key=lambda v: v.created)


def _version_of(data: bytes, subject: str) -> PolicyVersion | None:
    """The version a meta message describes; None for a deleted object (not counted) or anything else (counted)."""
    meta = stored.record(data, _meta_dec, VERSIONS_STORE, subject)
    if meta is None or meta.deleted:
        return None
    version = _described(meta)
    if version is None:
        stored.refused(VERSIONS_STORE, subject, stored.UNDECODABLE, object=meta.name[:200])
    return version


async def fetch(js: Any, bucket: str, version: PolicyVersion, into: Path, *, max_bytes: int) -> Path:
    """Download ``version`` into the directory ``into`` (which must exist), verify it, unpack it; the adapter
    directory. Raises ``VersionError``; leaves whatever it wrote under ``into`` to its caller's cleanup."""
    if version.size > max_bytes:
        raise VersionError(
            "too_large", f"{version.version} is {version.size} bytes, more than the limit {max_bytes}"
        )
    store = await open_bucket(js, bucket)
    try:
        info = await store.get_info(version.object)
    except nats.js.errors.ObjectNotFoundError:
        raise VersionError(
            "missing", f"{version.version}: no object {version.object!r} in {bucket}"
        ) from None
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        raise _unavailable(f"reading {version.object}", exc) from exc
    stored = _described(info)
    if stored is None or stored.sha256 != version.sha256 or (info.size or 0) != version.size:
        raise VersionError("corrupt", f"{version.version}: the object in {bucket} is not the one announced")
    packed = into / "version.tar"
    fh = await asyncio.to_thread(packed.open, "wb")
    try:
        await store.get(version.object, writeinto=fh)
    except nats.js.errors.DigestMismatchError:
        raise VersionError(
            "corrupt", f"{version.version}: JetStream's digest does not match its chunks"
        ) from None
    except nats.js.errors.ObjectNotFoundError:
        raise VersionError(
            "missing", f"{version.version}: the object was deleted while downloading"
        ) from None
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        raise _unavailable(f"downloading {version.object}", exc) from exc
    finally:
        fh.close()
    digest = await asyncio.to_thread(sha256_file, packed)
    if digest != version.sha256:
        raise VersionError(
            "corrupt", f"{version.version}: sha256 {digest} is not the announced {version.sha256}"
        )
    adapter = await asyncio.to_thread(unpack, packed, into / "adapter", max_bytes=max_bytes)
    packed.unlink()
    return adapter
