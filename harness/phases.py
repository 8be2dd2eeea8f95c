"""Where one evaluation's time goes: wall seconds per named phase.

The GPU worker wraps each step of a measurement (inputs, upload, launch, compare, timing,
...) in ``phases("name")``; the seconds land in ``Measurement.notes["phases"]`` and
``evo measure -v`` prints them. Phases nest and are exclusive: while an inner phase runs,
the outer one's clock stops, so the figures add up to the whole and none is counted twice;
an inner phase is named by its path (``check > upload``), so the same step under two
callers (a check launch, the stress check's launch) keeps two figures.
An outermost phase (check, timing, stress check) ends with ``sync`` (the stream's
synchronize) so the GPU work it queued is charged to it, not to the next one that waits.
Inner phases do not wait: their figure is the wall time of their host calls and of the
waits they make themselves (a queued check's launches end in one). Waiting at the end of
every inner phase as well cost a one-thread tile ~66 stream waits a candidate, and the
queued launches their overlap with the host's work.
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class Phases:
    """Exclusive wall seconds per phase name, in the order the names were first seen."""

    def __init__(self, sync=None):
        self.seconds: dict[str, float] = {}
        self._sync = sync
        self._stack: list[list] = []  # [name, start of its current stretch]

    @contextmanager
    def __call__(self, name: str):
        now = time.perf_counter()
        if self._stack:  # pause the enclosing phase
            outer = self._stack[-1]
            self._add(outer[0], now - outer[1])
        path = f"{self._stack[-1][0]} > {name}" if self._stack else name
        self._stack.append([path, now])
        failed = True
        try:
            yield
            failed = False
        finally:
            outermost = len(self._stack) == 1
            if self._sync is not None and outermost and not failed:  # a failure's own error stands
                self._sync()
            now = time.perf_counter()
            path, start = self._stack.pop()
            self._add(path, now - start)
            if self._stack:
                self._stack[-1][1] = now  # the enclosing phase's clock runs again

    def _add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def to_json(self) -> dict[str, float]:
        """{name: seconds}, rounded to microseconds."""
        return {name: round(s, 6) for name, s in self.seconds.items()}


def no_phases(name: str):
    """A stand-in for ``Phases`` where nothing is recorded."""
    return _NOTHING


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NOTHING = _Null()


def format_phases(phases: dict[str, float], indent: str = "  ") -> list[str]:
    """Lines ``name  12.3 ms  (45 %)``, longest first, for ``evo measure -v``."""
    total = sum(phases.values()) or 1.0
    width = max((len(n) for n in phases), default=0)
    return [f"{indent}{name:<{width}}  {s * 1e3:9.2f} ms  ({s / total:4.0%})"
            for name, s in sorted(phases.items(), key=lambda kv: -kv[1])]
