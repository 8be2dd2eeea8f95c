"""Static check: a variant may read no clock its baseline does not read.

Why: the result-reuse probe (``harness.gpu.reuse_probe``) and every check launch differ from
the timed graph in what lies between two launches (a fill, a copy, a host round trip), so a
variant that can tell how long ago its last launch ran can compute wherever it is watched
and skip its work only in the timed graph: a launch-start time hidden in its outputs'
rounding slack did exactly that, 2.5-2.7x faster and accepted by the probe of its time
(``tests/data/reuse/heavy_clock.cu``; BENCHMARKS.md, session 24). A kernel needs no clock to
compute its outputs, and no evo transform adds one (the clock64 timer reads the SM clock in
a twin entry evo adds itself, after this check): so a read of the SM clock (``%clock``,
``%clock_hi``, ``%clock64``), the global timer (``%globaltimer``, ``_lo``, ``_hi``) or a
performance-monitor counter (``%pm0``..``%pm7``, ``_64``) that the baseline never makes is
rejected before ptxas. A baseline that reads one itself (instrumented code) keeps it.
"""

from __future__ import annotations

import re

from harness import record

# The special registers a kernel can learn the time (or a count that grows with it) from.
_TIMER = re.compile(r"%(clock64|clock_hi|clock|globaltimer_lo|globaltimer_hi|globaltimer|pm[0-7](?:_64)?)\b")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_WHY = "a variant that knows the time between launches can skip work in the timed launches alone"


def timers(ptx: str) -> dict[str, int]:
    """Each timer register the PTX reads (comments aside) -> the line of its first read."""
    text = _COMMENT.sub(lambda m: "\n" * m.group().count("\n"), ptx)
    found: dict[str, int] = {}
    for m in _TIMER.finditer(text):
        found.setdefault(m.group(1), text.count("\n", 0, m.start()) + 1)
    return found


def added_timer_read(variant_ptx: str, baseline_ptx: str) -> str | None:
    """None when the variant reads no timer register the baseline does not; else the reason,
    starting with ``record.TIMER_READ``, naming the register and its line."""
    if "%" not in variant_ptx or not _TIMER.search(variant_ptx):
        return None
    added = {name: line for name, line in timers(variant_ptx).items()
             if name not in timers(baseline_ptx)}
    if not added:
        return None
    name, line = min(added.items(), key=lambda kv: kv[1])
    return f"{record.TIMER_READ}: line {line} reads %{name}, which the baseline never reads ({_WHY})"
