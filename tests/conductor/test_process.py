"""Process-level settings of `conductor serve`: GC thresholds and the event loop, parsed with typed errors."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys

import pytest

from conductor.app.process import (
    DEFAULT_GC_THRESHOLDS,
    ProcessSettings,
    ProcessSettingsError,
    loop_name,
    run,
    settle_gc,
)


def test_defaults_and_overrides():
    assert ProcessSettings.from_env({}) == ProcessSettings(
        gc_thresholds=DEFAULT_GC_THRESHOLDS, full_gc_every_s=60.0, event_loop="auto"
    )
    assert ProcessSettings.from_env({"CONDUCTOR_GC_FULL_EVERY_S": "0"}).full_gc_every_s == 0
    s = ProcessSettings.from_env({"CONDUCTOR_GC": "1000, 5, 5", "CONDUCTOR_EVENT_LOOP": "asyncio"})
    assert s.gc_thresholds == (1000, 5, 5) and s.event_loop == "asyncio"
    assert ProcessSettings.from_env({"CONDUCTOR_GC": "python"}).gc_thresholds is None


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"CONDUCTOR_GC": "1000,5"}, "CONDUCTOR_GC"),
        ({"CONDUCTOR_GC": "a,b,c"}, "CONDUCTOR_GC"),
        ({"CONDUCTOR_GC": "0,5,5"}, "CONDUCTOR_GC"),
        ({"CONDUCTOR_EVENT_LOOP": "trio"}, "CONDUCTOR_EVENT_LOOP"),
        ({"CONDUCTOR_GC_FULL_EVERY_S": "soon"}, "CONDUCTOR_GC_FULL_EVERY_S"),
        ({"CONDUCTOR_GC_FULL_EVERY_S": "-1"}, "CONDUCTOR_GC_FULL_EVERY_S"),
    ],
)
def test_malformed_settings_name_the_variable(env, names):
    with pytest.raises(ProcessSettingsError, match=names):
        ProcessSettings.from_env(env)


def test_the_chosen_loop_runs_the_coroutine():
    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run(kind(), ProcessSettings(event_loop="asyncio")).startswith("asyncio")
    uvloop = pytest.importorskip("uvloop")
    assert loop_name(ProcessSettings()) == "uvloop"
    assert run(kind(), ProcessSettings(event_loop="uvloop")) == uvloop.Loop.__module__


def test_settle_gc_freezes_and_sets_thresholds():
    """In a child process: freezing is process-wide and must not leak into this test session."""
    code = (
        "import gc; from conductor.app.process import ProcessSettings, settle_gc\n"
        "settle_gc(ProcessSettings(gc_thresholds=(1234, 5, 6), full_gc_every_s=0))\n"
        "print(gc.get_threshold(), gc.get_freeze_count() > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(1234, 5, 6) True"


def test_python_thresholds_are_left_alone():
    before = gc.get_threshold()
    settle_gc(ProcessSettings(gc_thresholds=None))
    assert gc.get_threshold() == before


def test_serve_refuses_a_malformed_setting_before_starting(capsys, monkeypatch):
    from conductor.app.cli import main

    monkeypatch.setenv("CONDUCTOR_GC", "lots")
    assert main(["serve", "planner"]) == 2
    assert "CONDUCTOR_GC" in capsys.readouterr().err


def test_full_collections_run_on_the_timer():
    """In a child process: thresholds high enough that only the timer can trigger a full collection."""
    code = (
        "import asyncio, gc; from conductor.app.process import ProcessSettings, settle_gc\n"
        "async def main():\n"
        "    timer = settle_gc(ProcessSettings(gc_thresholds=(10**9, 1000, 1000), full_gc_every_s=0.05))\n"
        "    before = gc.get_stats()[2]['collections']\n"
        "    await asyncio.sleep(0.3)\n"
        "    timer.cancel()\n"
        "    print(gc.get_stats()[2]['collections'] - before)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) >= 3
