"""The permission table (conductor/access.py) and how a process finds its login (conductor/credentials.py), without
a server: what each role may do, the rendered authorization block (checked by `nats-server -t`), the credentials
file's mode, and which user and inbox prefix a process connects with."""

from __future__ import annotations

import os
import subprocess

import pytest

from conductor import access, credentials
from conductor.app.runtime import SERVICES
from conductor.liveness import MIN_BEAT_S
from conductor.natsserver import find_binary
from conductor.settings import CommonSettings
from schemas.plan import PLAN_SUBJECT
from schemas.verify import VERIFY_SUBJECT
from schemas.work import WORK_SUBJECT


def test_every_service_has_a_role():
    assert set(SERVICES) <= set(access.ROLES) and access.CLIENT in access.ROLES


@pytest.mark.parametrize("role", access.ROLES)
def test_no_role_reaches_everything_or_another_inbox(role):
    perms = access.permissions(role)
    for subject in perms.publish + perms.subscribe:
        assert subject not in {">", "$JS.API.>", "$JS.>", "$KV.>", "$O.>", "_INBOX.>"}, subject
        assert ".DELETE." not in subject or ".CONSUMER.DELETE." in subject, subject  # never a stream or a key
    assert not [s for s in perms.publish if s.startswith("_INBOX")]  # replies: allow_responses only
    assert [s for s in perms.subscribe if s.startswith("_INBOX")] == [f"_INBOX.{role}.>"]


def test_only_the_serving_role_receives_a_request_subject():
    receivers = {
        s: [r for r in access.ROLES if s in access.grant(r).subscribe]
        for s in (PLAN_SUBJECT, WORK_SUBJECT, VERIFY_SUBJECT, "conductor.solve.*", "conductor.rollout")
    }
    assert receivers == {
        PLAN_SUBJECT: ["planner"],
        WORK_SUBJECT: ["worker-adapter"],
        VERIFY_SUBJECT: ["verifier"],
        "conductor.solve.*": ["executor"],
        "conductor.rollout": ["executor"],
    }


def test_only_executors_write_results_and_checkpoints_and_only_adapters_their_state():
    buckets = (
        "CONDUCTOR_RESULTS",
        "CONDUCTOR_CHECKPOINTS",
        "CONDUCTOR_CACHE",
        "CONDUCTOR_LIMITS",
        "CONDUCTOR_CALLS",
    )
    writers = {b: [r for r in access.ROLES if f"$KV.{b}.>" in access.grant(r).publish] for b in buckets}
    assert writers == {
        "CONDUCTOR_RESULTS": ["executor"],
        "CONDUCTOR_CHECKPOINTS": ["executor"],
        "CONDUCTOR_CACHE": ["worker-adapter"],
        "CONDUCTOR_LIMITS": ["worker-adapter"],
        "CONDUCTOR_CALLS": ["worker-adapter"],
    }
    assert [r for r in access.ROLES if "conductor.results.>" in access.grant(r).publish] == ["executor"]


def test_responders_may_send_a_beat_at_the_fastest_rate_for_their_whole_window():
    for role, window in access.RESPONSE_WINDOW_S.items():
        grant = access.grant(role)
        assert grant.window_s == window and grant.max_responses is not None
        assert grant.max_responses >= window / MIN_BEAT_S + 1
    assert access.grant("client").max_responses is None  # it answers nothing


def test_a_prefix_moves_subjects_streams_and_buckets():
    grant = access.grant("worker-adapter", prefix="t1.")
    assert grant.subscribe == ("t1.conductor.work",)
    assert "$KV.CONDUCTOR_CACHE_T1.>" in grant.publish and "$KV.CONDUCTOR_CACHE.>" not in grant.publish


def test_each_tenant_is_granted_its_own_namespace_only():
    """Issue 19, item 4: two tenants' grants share no subject of the public API, and neither may read the results
    bucket any way but a direct get of its own keys (docs/tenancy.md)."""
    acme, beta = (access.permissions(access.role_of(t), user=t) for t in ("acme", "beta"))
    public = (
        "conductor.learner.",
        "$JS.API.CONSUMER.INFO.CONDUCTOR_TASKS.",
    )  # training news, the intake's lag
    own = {s for s in acme.publish + acme.subscribe if not s.startswith(public)}
    assert own and all(".acme." in s or s.endswith(".acme") for s in own), own
    assert not own & set(beta.publish + beta.subscribe)
    reads = [s for s in acme.publish if "RESULTS" in s]
    assert reads == ["$JS.API.DIRECT.GET.KV_CONDUCTOR_RESULTS.$KV.CONDUCTOR_RESULTS.acme.>"]
    gateway = access.grant("gateway")
    assert (
        "conductor.results.gateway.>" in gateway.subscribe and "conductor.results.>" not in gateway.subscribe
    )
    assert access.grant("client", tenant="acme") == access.grant(access.role_of("acme"), tenant="acme")


@pytest.mark.parametrize("names", [["a.b"], ["executor"], ["client"], ["x", "x"], ["*"], [""]])
def test_a_tenant_is_one_subject_token_and_no_roles_name(names):
    with pytest.raises(ValueError, match="tenant"):
        access.tenants(names)


def test_the_accounts_block_is_valid_server_config(tmp_path):
    passwords = credentials.generate()
    conf = tmp_path / "nats.conf"
    conf.write_text(access.accounts(passwords))
    check = subprocess.run([find_binary(), "-c", str(conf), "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert conf.read_text().count("user:") == len(access.ROLES)
    conf.write_text(access.accounts(credentials.generate((*access.ROLES, "acme", "beta-2"))))
    check = subprocess.run([find_binary(), "-c", str(conf), "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert 'user: "acme"' in conf.read_text() and "conductor.results.beta-2.>" in conf.read_text()


def test_the_credentials_file_is_private_and_refused_when_it_is_not(tmp_path):
    path = credentials.write(tmp_path / "credentials", {"worker-adapter": "pw"})
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert credentials.read(path) == {"NATS_PASSWORD_WORKER_ADAPTER": "pw"}
    path.chmod(0o644)
    with pytest.raises(credentials.CredentialsError, match="readable by others"):
        credentials.read(path)


def test_a_process_connects_as_the_urls_user_else_its_role_from_the_file(tmp_path):
    path = credentials.write(tmp_path / "credentials", {"planner": "s3cret"})
    with_file = CommonSettings(nats_url="nats://127.0.0.1:4222", nats_credentials=path)
    conn = credentials.connection(with_file, "planner")
    assert conn.url == "nats://planner:s3cret@127.0.0.1:4222" and conn.inbox_prefix == "_INBOX.planner"
    assert conn.shown == "nats://127.0.0.1:4222"  # what logs may print
    with pytest.raises(credentials.CredentialsError, match="no password for the NATS user 'verifier'"):
        credentials.connection(with_file, "verifier")
    in_url = CommonSettings(nats_url="tls://ops:pw@nats:4222", nats_credentials=path)
    assert credentials.connection(in_url, "planner").url == "tls://ops:pw@nats:4222"  # the URL's user wins
    assert credentials.connection(in_url, "planner").inbox_prefix == "_INBOX.ops"
    open_server = credentials.connection(CommonSettings(nats_url="nats://h:4222"), "executor")
    assert open_server.url == "nats://h:4222" and open_server.inbox_prefix == "_INBOX.executor"


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        ("_INBOX.client.AbC.1", True),
        ("_INBOX.executor.x9", True),
        ("_INBOX.NUIDNUIDNUID.7", True),  # nats-py's default inbox on a server without users
        ("$KV.CONDUCTOR_RESULTS.t-1", False),
        ("conductor.results.t-1", False),
        ("$JS.API.STREAM.PURGE.CONDUCTOR_RESULT_EVENTS", False),
        ("_INBOX.client", False),  # a prefix, not a reply subject
        ("_INBOX", False),
        ("_INBOX.*.x", False),
        ("_INBOX.client.>", False),
        ("_INBOX..x", False),
        ("_inbox.client.x", False),
        ("xx._INBOX.client.x", False),
        (
            "_R_.AbCdEf.GhIjKl",
            True,
        ),  # a service import's reply: it leads back into the requester's account only
        ("_R_.AbCdEf", False),
        ("_R_.AbCdEf.GhIjKl.x", False),
        ("_R_.*.x", False),
        ("_R_.>", False),
    ],
)
def test_a_reply_goes_only_into_an_inbox(reply, ok):
    assert access.is_reply_inbox(reply) is ok


def test_every_tenant_is_alone_in_its_account_and_imports_only_its_own_doors():
    """Issue 34, item 1: a tenant's doors name only itself (or nobody: the learner's public subjects, the intake's
    lag), the services share the account that owns JetStream, and the rendered block gives each outside user an
    account of its own whose imports are exactly its doors."""
    users = (*access.ROLES, "acme", "beta")
    for tenant in ("client", "gateway", "acme"):
        assert access.account_of(tenant) == tenant
        for door in access.doors(access.role_of(tenant), tenant=tenant):
            others = {t for t in ("client", "gateway", "acme", "beta") if f".{t}." in door.subject + "."} - {
                tenant
            }
            assert not others, (tenant, door)
    assert access.account_of("trainer") == "trainer"
    for role in ("executor", "planner", "worker-adapter", "verifier", "learner"):
        assert access.account_of(role) == access.SERVICES_ACCOUNT and access.doors(role) == ()
    conf = access.accounts(credentials.generate(users))
    block = conf.split('"acme" {', 1)[1].split("\n  }", 1)[0]
    imported = {
        line.split('subject: "', 1)[1].split('"', 1)[0] for line in block.splitlines() if "subject:" in line
    }
    assert imported == {d.subject for d in access.doors("client", tenant="acme")}
    assert (
        "jetstream" not in block and "jetstream: enabled" in conf.split('"gateway" {', 1)[1].split("\n  }")[0]
    )
    assert '{service: "conductor.solve.acme", accounts: ["acme"], response_type: stream' in conf
    assert (
        '{service: "$JS.API.DIRECT.GET.KV_CONDUCTOR_RESULTS.$KV.CONDUCTOR_RESULTS.beta.>", accounts: ["beta"]}'
        in conf
    )


def test_no_tenant_takes_the_services_account_name():
    with pytest.raises(ValueError, match="services' account"):
        access.tenants([access.SERVICES_ACCOUNT])
