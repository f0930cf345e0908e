"""Listing policy versions (issue 34, item 2): a meta message that is no object's — a PubAck aimed at a meta
subject as a reply — is skipped, counted, and does not stall the listing; a listing that does not answer ends in
a typed error within its timeout, so a watching planner starts on its base model instead of hanging."""

from __future__ import annotations

import asyncio
import base64
import io

import msgspec
import nats
import pytest
from nats.js.api import ObjectMeta

from conductor import metrics
from conductor.policy_versions import VersionError, list_versions, open_bucket
from schemas.learner import PolicyVersion
from schemas.tasks import Names


def _refused() -> float:
    labels = {"store": "policy_versions", "reason": "undecodable"}
    return metrics.REGISTRY.get_sample_value("conductor_store_entries_refused_total", labels) or 0.0


@pytest.mark.nats
async def test_a_meta_that_is_not_an_objects_is_skipped_and_the_listing_ends(nats_url, subject_prefix):
    bucket = Names.for_prefix(subject_prefix).policies_bucket
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        store = await open_bucket(js, bucket, create=True)
        version = PolicyVersion(
            version="r@1",
            run="r",
            step=1,
            object="r/1",
            base="sha256:" + "5" * 64,
            sha256="7" * 64,
            size=4,
            created=1.0,
        )
        meta = ObjectMeta(description=msgspec.json.encode(version).decode())
        await store.put("r/1", io.BytesIO(b"data"), meta=meta)
        await store.put("not-a-version", io.BytesIO(b"x"))  # an object without a version: skipped
        name = base64.urlsafe_b64encode(b"r/2").decode()
        await js.publish(
            f"$O.{bucket}.M.{name}", b'{"stream":"CONDUCTOR_TASKS","seq":3}'
        )  # a reflected PubAck
        before = _refused()
        found = await asyncio.wait_for(list_versions(js, bucket), timeout=20)
        assert found == [version]
        assert _refused() == before + 2
    finally:
        await nc.close()


class _Silent:
    """A JetStream context whose stream info never answers."""

    async def stream_info(self, name, subjects_filter=None):
        await asyncio.Event().wait()


async def test_a_listing_that_does_not_answer_is_a_typed_error_within_its_timeout():
    with pytest.raises(VersionError, match=r"longer than 0\.2s") as caught:
        await asyncio.wait_for(list_versions(_Silent(), "B", timeout=0.2), timeout=5)
    assert caught.value.reason == "unavailable"
