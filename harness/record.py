"""The measurement record: what evo knows about one variant of one kernel on one device.

Every backend answers with a ``Measurement``; the store keeps them; the search ranks
by ``fitness``. A variant that fails (ptxas error, crash, hang, wrong answer) is a
``Measurement`` with ``valid=False`` and a ``reason``, never an exception.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

# Reasons, so that reports can count them. The text after the prefix carries details.
OK = "ok"
PTXAS_ERROR = "ptxas error"
LAUNCH_ERROR = "launch error"  # illegal/misaligned address or any CUDA error
TIMEOUT = "timeout"  # the kernel did not finish in time (hang, infinite loop)
WRONG = "wrong result"  # outputs differ from the baseline beyond tolerance
UNWRITTEN = "output not written"  # a poisoned output element survived the launch
OUT_OF_BOUNDS = "out-of-bounds write"  # a canary word after a buffer changed
INPUT_CLOBBERED = "input modified"  # an input buffer changed during the launch
NOT_MEASURED = "not measured"  # replay miss
HIDDEN_STATE = "hidden state"  # writes module-scope memory the baseline does not (static check)
TIMER_READ = "reads a timer"  # reads a clock register the baseline does not (static check)
RESULT_REUSE = "result reuse"  # reads fast only where its outputs hold its last answer


@dataclass
class Measurement:
    """One variant on one device.

    ``cycles`` is a smoothed median (``harness.gpu.estimate.central``); ``p10``/``p90`` and ``n``
    summarize the raw samples.
    ``timer`` says what produced the number: "clock64" (in-kernel SM cycle counter),
    "events" (CUDA events around a graph of launches, converted at the measured SM
    clock), or "static" (no GPU: a ptxas/SASS cost proxy, not a measurement).
    """

    kernel: str
    device: str
    valid: bool | None  # None: not checked (evo.api.unchecked: a static estimate, at the API)
    reason: str = OK
    cycles: float | None = None
    p10: float | None = None
    p90: float | None = None
    n: int = 0
    timer: str = ""
    backend: str = ""
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    shared_mem: int | None = None
    ptx_hash: str = ""
    sass_hash: str = ""
    flags: list[str] = field(default_factory=list)  # e.g. "speedup over 10x: review"
    notes: dict = field(default_factory=dict)  # timer details: clock MHz, warm caches, ...
    seconds: float = 0.0  # wall time spent producing this record
    cached: bool = False  # answered from the store

    @property
    def fitness(self) -> float:
        """What the search minimizes: median cycles, +inf when invalid (``valid`` None, an
        unchecked static estimate, still ranks by its figure)."""
        if self.valid is False or self.cycles is None:
            return math.inf
        return float(self.cycles)

    @property
    def is_static(self) -> bool:
        return self.timer == "static"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Measurement:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def label(self) -> str:
        """A short human line: '697 cycles (clock64)' or 'invalid: wrong result ...'."""
        if self.valid is None and self.cycles is not None:  # the API's unchecked estimate
            return f"{self.cycles:.0f} cycles (static estimate, not measured; output not checked)"
        if not self.valid:
            return f"invalid: {self.reason}"
        tag = "static estimate, not measured" if self.is_static else self.timer
        return f"{self.cycles:.0f} cycles ({tag})"
