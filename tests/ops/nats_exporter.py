"""A stand-in for prometheus-nats-exporter's JetStream collector (``-jsz=all``, what the NATS chart's
``promExporter`` runs), which Debian does not package: it reads nats-server's ``/jsz`` monitoring endpoint and serves
the consumer gauges the dashboard's queue-lag panel and the stream-lag alert query, under the exporter's names and
labels (nats-io/prometheus-nats-exporter, collector/jsz.go). Only those series: a query that needs another one of
the real exporter's finds nothing here and fails the ops test, rather than passing on an imitation."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_SERVER = ("server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader")
_STREAM = (*_SERVER, "account", "account_id", "stream_name", "stream_leader", "is_stream_leader")
_CONSUMER = (
    *_STREAM,
    "consumer_name",
    "consumer_leader",
    "is_consumer_leader",
    "consumer_desc",
    "consumer_created",
)
# series name → (help, the /jsz consumer field it reads)
GAUGES = {
    "jetstream_consumer_num_pending": ("Number of pending messages from a consumer", "num_pending"),
    "jetstream_consumer_num_ack_pending": ("Number of pending acks from a consumer", "num_ack_pending"),
    "jetstream_consumer_num_redelivered": (
        "Number of redelivered messages from a consumer",
        "num_redelivered",
    ),
}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _leader(cluster: dict[str, Any] | None, server_name: str) -> tuple[str, str]:
    """(leader, is_leader) as the exporter writes them: an unclustered server leads everything."""
    if not cluster:
        return "", "true"
    leader = cluster.get("leader", "")
    return leader, "true" if leader == server_name else "false"


class JszCollector(Collector):
    """Scrapes ``monitor_url`` (``http://host:8222``) on every collect, as the exporter does."""

    def __init__(self, monitor_url: str) -> None:
        self.monitor_url = monitor_url.rstrip("/")

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jsz = _get(f"{self.monitor_url}/jsz?consumers=true&config=true")
        varz = _get(f"{self.monitor_url}/varz")
        name = varz.get("server_name", "")
        meta = jsz.get("meta_cluster") or {}
        server = (
            jsz.get("server_id", ""),
            name,
            meta.get("name", ""),
            (jsz.get("config") or {}).get("domain", ""),
            meta.get("leader", ""),
            "true" if not meta or meta.get("leader") == name else "false",
        )
        families = {
            metric: GaugeMetricFamily(metric, doc, labels=_CONSUMER) for metric, (doc, _) in GAUGES.items()
        }
        for account in jsz.get("account_details") or []:
            for stream in account.get("stream_detail") or []:
                stream_labels = (
                    *server,
                    account.get("name", ""),
                    account.get("id", ""),
                    stream["name"],
                    *_leader(stream.get("cluster"), name),
                )
                for consumer in stream.get("consumer_detail") or []:
                    labels = (
                        *stream_labels,
                        consumer["name"],
                        *_leader(consumer.get("cluster"), name),
                        (consumer.get("config") or {}).get("description", ""),
                        consumer.get("created", ""),
                    )
                    for metric, (_, field) in GAUGES.items():
                        families[metric].add_metric(labels, float(consumer.get(field, 0)))
        yield from families.values()


def serve(monitor_url: str, port: int) -> Any:
    """Serve the gauges on ``127.0.0.1:port``/metrics from a thread; returns the HTTP server (``shutdown()``)."""
    registry = CollectorRegistry()
    registry.register(JszCollector(monitor_url))
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    return server
