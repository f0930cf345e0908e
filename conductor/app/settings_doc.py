"""docs/settings.md, generated from the settings declarations (``conductor settings``; a test keeps it current).

The owners are found, not listed: each service's settings class is the ``settings`` parameter of the service class
its ``create_service`` returns, so a service that reads another class (or a new service) changes the document.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Iterable

from conductor.app.process import ProcessSettings
from conductor.app.runtime import SERVICES
from conductor.settings import FALSE, TRUE, CommonSettings, SettingDoc, settings_table

HEADER = f"""# Settings

Every setting Conductor reads, generated from the declarations in the code by `conductor settings -o
docs/settings.md` (`make settings`); `tests/conductor/test_settings.py` keeps this file current and checks that each
service reads every setting listed under it.

Rules, the same for every setting (`conductor/settings.py`):
- read once, at start-up, from the environment; an empty value is the same as unset;
- booleans are spelled {"/".join(sorted(TRUE))} or {"/".join(sorted(FALSE))} (any case); numbers are plain
  decimals (`1e3` is not an integer);
- a malformed or out-of-bounds value stops the service at start-up with an error naming the variable (`conductor
  serve` exits with status 2);
- `CONDUCTOR_BACKOFF_BASE_S` and `CONDUCTOR_BACKOFF_MAX_S` are refused: they used to set both the executor's
  redelivery backoff and the worker-adapter's retry backoff; each now has its own name.

Secrets are never settings: the pool file and `CONDUCTOR_POLICY_API_KEY_ENV` name the variables that hold keys.

OpenTelemetry's own variables are read as its specification defines them, by every service (`conductor/tracing.py`):
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` appended, turns OTLP export
on (it needs the `otel` extra); `OTEL_SERVICE_NAME` names the service; `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER=none` turns it off; headers, protocol and timeouts go to the exporter as its
`OTEL_EXPORTER_OTLP_*` variables. Trace context travels in NATS headers whether or not anything is exported.
"""


def owners() -> dict[str, type]:
    """Each service's settings class, by service name, from the type hints of its ``create_service``."""
    found = {}
    for name, module in SERVICES.items():
        service = typing.get_type_hints(importlib.import_module(module).create_service)["return"]
        found[name] = typing.get_type_hints(service.__init__)["settings"]
    return found


def _table(rows: Iterable[SettingDoc]) -> list[str]:
    lines = ["| variable | default | bound | type | meaning |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"`{r.env}`", r.default, r.bound, r.type, r.doc]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def settings_markdown() -> str:
    sections = [HEADER, "## Every service", "", *_table(settings_table(CommonSettings))]
    sections += ["", "## `conductor serve` (the process: event loop, garbage collector)", ""]
    sections += _table(settings_table(ProcessSettings))
    for name, cls in owners().items():
        rows = [r for r in settings_table(cls) if not r.field.startswith("common.")]
        sections += ["", f"## {name}", "", *_table(rows)]
    return "\n".join(sections) + "\n"
