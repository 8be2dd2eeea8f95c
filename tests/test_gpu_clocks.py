"""harness.gpu.clocks: nvidia-smi's clocks line, read through a stand-in nvidia-smi."""

from __future__ import annotations

import os
import stat

from harness.gpu.clocks import GpuClocks, parse_line, read_clocks


def test_parse_line_reads_numbers_and_not_available():
    assert parse_line("1980, 2619, P0, 123.45, 35") == GpuClocks(1980.0, 2619.0, "P0", 123.45, 35.0)
    assert parse_line("1980, [N/A], P0, [N/A], 35").mem_mhz is None
    assert parse_line("1980, 2619") is None and parse_line("") is None


def _fake_smi(tmp_path, body: str) -> dict:
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_read_clocks_asks_nvidia_smi_for_the_device(tmp_path, monkeypatch):
    env = _fake_smi(tmp_path, 'echo "$1" > "$(dirname "$0")/args"; echo "1755, 1593, P2, 98.1, 40"')
    monkeypatch.setenv("PATH", env["PATH"])
    clocks = read_clocks(3)
    assert clocks == GpuClocks(1755.0, 1593.0, "P2", 98.1, 40.0)
    assert (tmp_path / "args").read_text().strip() == "--id=3"
    assert clocks.label() == "SM 1755 MHz, memory 1593 MHz, P2, 98 W, 40 C"


def test_read_clocks_is_none_when_nvidia_smi_fails_or_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, "echo 'no devices' >&2; exit 9")["PATH"])
    assert read_clocks(0) is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert read_clocks(0) is None
