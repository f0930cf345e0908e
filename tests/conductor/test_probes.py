"""The HTTP probe server: routes, port policy, and readiness that follows the NATS connection across a restart."""

from __future__ import annotations

import socket

import pytest

from conductor.app.runtime import create_services, running
from conductor.natsserver import NatsServer, free_port
from conductor.probes import ProbeServer
from conductor.service import StartupError
from conductor.settings import CommonSettings, metrics_port
from tests.conductor.scrape import http_get, wait_status


async def test_routes_and_readiness_flag():
    ready = [False]
    probes = ProbeServer("127.0.0.1", 0, lambda: ready[0])
    port = await probes.start()
    try:
        assert await http_get(port, "/healthz") == (200, b"ok\n")
        assert (await http_get(port, "/readyz"))[0] == 503
        ready[0] = True
        assert await http_get(port, "/readyz?verbose=1") == (200, b"ready\n")
        status, body = await http_get(port, "/metrics")
        assert status == 200 and b"# TYPE conductor_tasks_total counter" in body
        assert b"process_resident_memory_bytes" in body
        assert await http_get(port, "/metrics", method="HEAD") == (200, b"")
        assert (await http_get(port, "/nope"))[0] == 404
        assert (await http_get(port, "/metrics", method="POST"))[0] == 405
        assert (await http_get(port, "", method=""))[0] == 400  # no method/path/version triple
    finally:
        await probes.stop()


async def test_default_port_falls_back_when_taken_but_a_chosen_port_is_strict():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match=f"METRICS_PORT={port}: 127.0.0.1:{port} is already in use"):
            await ProbeServer("127.0.0.1", port, lambda: True, strict=True).start()
        lenient = ProbeServer("127.0.0.1", port, lambda: True, strict=False)
        bound = await lenient.start()
        try:
            assert bound != port and (await http_get(bound, "/healthz"))[0] == 200
        finally:
            await lenient.stop()


@pytest.mark.parametrize(
    ("raw", "port"), [(None, None), ("", None), ("0", None), ("off", None), ("9100", 9100)]
)
def test_metrics_port_setting(raw, port):
    assert metrics_port(raw) == port
    env = {} if raw is None else {"CONDUCTOR_METRICS_PORT": raw}
    assert CommonSettings.from_env(env).metrics_port == port


@pytest.mark.nats
async def test_readiness_follows_the_nats_connection_across_a_server_restart(tmp_path, subject_prefix):
    nats_port, http_port = free_port(), free_port()
    server = NatsServer(port=nats_port, store_dir=tmp_path / "js").start()
    env = {
        "NATS_URL": server.url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_LOG_LEVEL": "WARNING",
    }
    settings = CommonSettings.from_env({**env, "CONDUCTOR_METRICS_PORT": str(http_port)})
    try:
        async with running(create_services(["planner"], env), settings, name="probe-test"):
            await wait_status(http_port, "/readyz", 200, timeout=5)
            server.stop()
            await wait_status(http_port, "/readyz", 503, timeout=10)
            assert (await http_get(http_port, "/healthz"))[0] == 200  # alive, just not ready
            server = NatsServer(port=nats_port, store_dir=tmp_path / "js").start()
            await wait_status(http_port, "/readyz", 200, timeout=15)
    finally:
        server.stop()
