"""The GPU's clocks and power state now, as ``nvidia-smi`` reports them.

A diagnostic beside cycle counts: on an H200 the same cubin read 1333 or 1337 cycles from
one measurement to the next after a light minute, and held within 0.04 % after a busy one
(BENCHMARKS.md, Precision). If a memory clock or power state is what moves, it shows here.
Read by ``evo stability`` after every measurement and by ``harness.tools.clock_states``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

FIELDS = ("clocks.sm", "clocks.mem", "pstate", "power.draw", "temperature.gpu")


@dataclass(frozen=True)
class GpuClocks:
    sm_mhz: float | None
    mem_mhz: float | None
    pstate: str
    power_w: float | None
    temp_c: float | None

    def label(self) -> str:
        def num(value, unit):
            return f"{value:.0f} {unit}" if value is not None else f"? {unit}"
        return (f"SM {num(self.sm_mhz, 'MHz')}, memory {num(self.mem_mhz, 'MHz')}, "
                f"{self.pstate}, {num(self.power_w, 'W')}, {num(self.temp_c, 'C')}")


def read_clocks(device: int = 0, timeout_s: float = 5.0) -> GpuClocks | None:
    """The clocks of GPU ``device`` now, or None where nvidia-smi is missing or fails
    (a diagnostic never stops a measurement)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--id={device}", f"--query-gpu={','.join(FIELDS)}",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return parse_line((out.stdout.strip().splitlines() or [""])[0])


def parse_line(line: str) -> GpuClocks | None:
    """One ``--format=csv,noheader,nounits`` line of ``FIELDS``; "[N/A]" reads as None."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(FIELDS):
        return None

    def num(cell: str) -> float | None:
        try:
            return float(cell)
        except ValueError:
            return None

    sm, mem, pstate, power, temp = cells
    return GpuClocks(num(sm), num(mem), pstate, num(power), num(temp))
