"""What a transform is: a named, parameterized, in-place edit of a PTX module.

Each module in this package defines one ``TRANSFORM = Transform(...)``. ``apply`` edits
the module it is given (callers pass a copy) and returns how many places it changed; 0
means "does not apply here", which the genome records as a no-op.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from genomes.ptx import Module


@dataclass(frozen=True)
class Param:
    """One parameter of a transform: a set of choices or an inclusive int range."""

    name: str
    default: Any
    choices: tuple | None = None
    low: int | None = None
    high: int | None = None

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
    """

    name: str
    group: str | None
    summary: str
    applies_when: str
    params: tuple[Param, ...]
    apply: Callable[..., int]

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params) or "none"
        raise ValueError(f"{self.name} has no parameter {name!r} (parameters: {known})")

    def run(self, module: Module, params: dict[str, Any]) -> int:
        full = {p.name: p.default for p in self.params}
        full.update(params)
        return self.apply(module, **full)
