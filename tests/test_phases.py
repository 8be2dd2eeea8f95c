"""harness.phases: exclusive, nested phase times (what `evo measure -v` prints)."""

from __future__ import annotations

import time

import pytest

from harness.phases import Phases, format_phases, no_phases


def test_nested_phases_are_exclusive_and_named_by_path():
    phases = Phases()
    start = time.perf_counter()
    with phases("check"):
        time.sleep(0.02)
        with phases("upload"):
            time.sleep(0.03)
        with phases("upload"):  # a second stretch adds to the same figure
            time.sleep(0.01)
    total = time.perf_counter() - start
    got = phases.to_json()
    assert list(got) == ["check", "check > upload"]
    assert got["check > upload"] == pytest.approx(0.04, abs=0.015)
    assert got["check"] == pytest.approx(0.02, abs=0.015)
    # Nothing counted twice, nothing lost: the phases add up to the wall time.
    assert sum(got.values()) == pytest.approx(total, abs=0.002)


def test_sync_runs_when_a_phase_ends_but_not_on_a_failure():
    synced = []
    phases = Phases(sync=lambda: synced.append(1))
    with phases("timing"):
        pass
    assert synced == [1]
    with pytest.raises(RuntimeError, match="launch failed"):
        with phases("launch"):
            raise RuntimeError("launch failed")
    assert synced == [1]  # the kernel's own error is reported, not a second one from a sync
    assert "launch" in phases.seconds


def test_only_an_outermost_phase_waits_for_the_stream():
    synced = []
    phases = Phases(sync=lambda: synced.append(len(phases._stack)))
    with phases("check"):
        with phases("launches"):
            with phases("upload"):
                pass
        assert synced == []  # inner phases leave the queued work running
    assert synced == [1]  # the check's own end waits: its GPU work is charged to it


def test_no_phases_records_nothing_and_format_sorts_longest_first():
    with no_phases("anything"):
        pass
    lines = format_phases({"upload": 0.001, "timing": 0.030, "check": 0.009})
    assert [line.split()[0] for line in lines] == ["timing", "check", "upload"]
    assert "30.00 ms" in lines[0] and "75%" in lines[0]
