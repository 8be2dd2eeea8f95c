"""report.md's line on how busy evo's own process was during a run."""

from __future__ import annotations

from evo.report import host_lines, time_lines


def test_a_run_whose_own_process_was_busy_nearly_throughout_says_it_set_the_pace():
    [busy] = host_lines({"wall": 46.3, "cpu": 36.8, "jobs": 16})
    assert busy.startswith("This invocation took 46.3 s; evo's own process was busy 36.8 s of it (79 %")
    assert "not the GPUs, set the pace" in busy
    [idle] = host_lines({"wall": 105.2, "cpu": 32.6, "jobs": 4})  # 31 %: the GPU's pace
    assert "(31 %" in idle and "set the pace" not in idle
    [alone] = host_lines({"wall": 10.0, "cpu": 9.0, "jobs": 1})  # one kernel at a time
    assert "set the pace" not in alone
    assert host_lines(None) == [] and host_lines({"wall": 0.0, "cpu": 0.0}) == []


def test_the_line_follows_the_time_table_or_stands_alone():
    checkpoint = {"seconds": {"relu": {"search": 2.0, "finalist check": 1.0}}}
    lines = time_lines(checkpoint, {"wall": 4.0, "cpu": 1.0, "jobs": 4})
    assert lines[0].startswith("Where the time went") and lines[-1].startswith("This invocation took 4.0 s")
    assert time_lines({}, {"wall": 4.0, "cpu": 1.0, "jobs": 4})[0].startswith("This invocation")
    assert not any(line.startswith("This invocation") for line in time_lines(checkpoint))
