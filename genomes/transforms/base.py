"""What a transform is: a named, parameterized, in-place edit of a PTX module.

Each module in this package defines one ``TRANSFORM = Transform(...)``. ``apply`` edits
the module it is given (callers pass a copy) and returns how many places it changed; 0
means "does not apply here", which the genome records as a no-op.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from genomes.launch import launched_entry
from genomes.ptx import Function, Module


class NotApplicable(Exception):
    """Raised by a transform that does not apply here, with the reason (a recorded no-op,
    like returning 0 changes, but saying why)."""


def launched(module: Module, launch) -> Function:
    """The kernel entry ``launch`` launches (``genomes.launch.launched_entry``); where
    there is none, NotApplicable with the reason."""
    fn = launched_entry(module, launch)
    if isinstance(fn, str):
        raise NotApplicable(fn)
    return fn


@dataclass(frozen=True)
class Param:
    """One parameter of a transform: a set of choices or an inclusive int range.

    An int range says how searches move in it, so that no search code names a transform:
    ``ladder``, the values an alphabet of genes enumerates (default: every value of a
    range of at most 8, else 8 spread evenly from ``low`` to ``high``); ``moves``, the
    steps a mutation re-parameterizing it takes (default: +-1, 2 and 4 eighths of the
    range, at least 1). A local search steps by all but the largest move each way.
    """

    name: str
    default: Any
    choices: tuple | None = None
    low: int | None = None
    high: int | None = None
    ladder: tuple[int, ...] | None = None
    moves: tuple[int, ...] | None = None

    def values(self) -> tuple:
        """The values an alphabet of genes takes: the choices, or the ladder."""
        if self.choices is not None:
            return tuple(self.choices)
        if self.ladder is not None:
            return tuple(self.ladder)
        span = self.high - self.low
        if span < 8:
            return tuple(range(self.low, self.high + 1))
        return tuple(sorted({self.low + round(i * span / 7) for i in range(8)}))

    def steps(self) -> tuple[int, ...]:
        """A mutation's local steps in an int range (``moves``), smallest magnitude first."""
        if self.moves is not None:
            return tuple(self.moves)
        span = self.high - self.low
        sizes = sorted({max(1, span * k // 8) for k in (1, 2, 4)})
        return tuple(-s for s in reversed(sizes)) + tuple(sizes)

    def nearby(self, value: int) -> list[int]:
        """Values a local search tries from ``value``: every step but the largest each way,
        those inside the range."""
        steps = self.steps()
        ups = sorted(s for s in steps if s > 0)[:-1] or [s for s in steps if s > 0]
        downs = sorted((s for s in steps if s < 0), reverse=True)[:-1] or [s for s in steps if s < 0]
        return [value + s for s in sorted(downs + ups) if self.low <= value + s <= self.high]

    def snap(self, value):
        """The ladder value nearest ``value`` (a choice is itself): what statistics over
        genes count a value under."""
        if self.choices is not None:
            return value
        return min(self.values(), key=lambda v: abs(v - int(value)))

    def coerce(self, value: Any) -> Any:
        """Return ``value`` in this parameter's type, or raise ValueError saying what fits."""
        if self.choices is not None:
            for choice in self.choices:
                if str(choice) == str(value):
                    return choice
            raise ValueError(f"{self.name} must be one of {', '.join(map(str, self.choices))}"
                             f" (got {value!r})")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} must be an integer (got {value!r})") from None
        if not (self.low <= number <= self.high):
            raise ValueError(f"{self.name} must be in {self.low}..{self.high} (got {number})")
        return number

    def sample(self, rng: random.Random) -> Any:
        if self.choices is not None:
            return rng.choice(self.choices)
        return rng.randint(self.low, self.high)

    def describe(self) -> str:
        if self.choices is not None:
            return f"{self.name}={'|'.join(map(str, self.choices))}"
        return f"{self.name}={self.low}..{self.high}"


@dataclass(frozen=True)
class Transform:
    """A transform: ``apply(module, **params) -> changes``.

    ``group`` names a conflict group: of several genes in one group only the last takes
    effect (one load cache policy, one register budget, one schedule...).

    A transform with ``edits_launch`` also changes the launch (``genomes.launch``): its
    ``apply(module, launch, **params)`` returns ``(changes, new_launch)``, and it is a
    no-op where no launch is known (a genome applied without its kernel's spec).

    A transform with ``reads_launch`` needs the launch to decide, and leaves it alone: its
    ``apply(module, launch, **params)`` returns the changes; it is a no-op where no launch
    is known, and the launch it was applied with stays the variant's (``genomes.genome``).

    A transform with ``pins_launch`` edits the launch and what it wrote holds for the new
    launch only (a proof made for it): the genome keeps that launch, as after ``reads_launch``.

    ``enabled_by`` names transforms whose genes (default parameters) may make this one
    apply where it does not alone: libdevice's sin/cos (branches, local memory) keep
    ``coarsen_tile`` out until ``fast_sincos`` replaces them. A search counts such a gene as
    applicable (``genomes.variation.changes_kernel``) and seeds it after its enabler.

    ``precheck(module, launch, **params)``, where given, says quickly whether ``apply``
    would find the kernel of its shape (None, or why not) without the launch-wide proofs
    that make ``apply`` take seconds on a kernel of millions of threads; what a search asks
    of every gene of the library on every kernel (``changes_kernel``) takes it for the
    answer. It never mutates ``module``.

    A transform with ``changes_results`` may change what the kernel computes in the last
    bits (fast math: approximate instructions, flushed subnormals, fused mul+add), within
    the tolerance the gate allows; every other transform leaves the results bit for bit
    (``evo.exact`` prefers a genome without these where it costs no time).
    """

    name: str
    group: str | None
    summary: str
    applies_when: str
    params: tuple[Param, ...]
    apply: Callable[..., Any]
    edits_launch: bool = False
    reads_launch: bool = False
    pins_launch: bool = False
    enabled_by: tuple[str, ...] = ()
    changes_results: bool = False
    precheck: Callable[..., str | None] | None = None

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params) or "none"
        raise ValueError(f"{self.name} has no parameter {name!r} (parameters: {known})")

    def _full(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with every parameter not given at its default."""
        return {**{p.name: p.default for p in self.params}, **params}

    def run(self, module: Module, params: dict[str, Any]) -> int:
        """Apply a transform that leaves the launch alone; the count of changes."""
        return self.apply(module, **self._full(params))

    def shape_refusal(self, module: Module, params: dict[str, Any], launch) -> str | None:
        """``precheck``'s answer for these parameters (None: of the shape ``apply`` needs)."""
        return self.precheck(module, launch, **self._full(params))

    def run_launch(self, module: Module, params: dict[str, Any], launch) -> tuple[int, Any]:
        """Apply an ``edits_launch`` transform: (changes, the launch it implies); a
        ``reads_launch`` one: (changes, the same launch)."""
        full = self._full(params)
        if self.reads_launch:
            return self.apply(module, launch, **full), launch
        return self.apply(module, launch, **full)
