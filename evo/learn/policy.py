"""A policy over genes: (kernel features, genome so far) -> next gene, or stop.

The policy is a small MLP whose input is the kernel's features (``evo.learn.features``,
log-scaled and standardized with the training set's mean and spread) and which of its
gene vocabulary the genome holds, and whose output is one logit per vocabulary gene plus
one for STOP. A gene is a *key* (``evo.learn.priors.gene_key``: register budgets snapped
to their ladder), as in the priors.

This module is what a search needs, and needs no PyTorch: the forward pass is numpy, and
the file is plain JSON (weights as lists). ``evo.learn.policy_train`` trains one (PyTorch)
from measured landscapes (:class:`Landscape`: what each measured genome of a kernel did).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from genomes.errors import EvoError

POLICY_VERSION = 1
MAX_STEPS = 8  # genes a rollout adds at most
STEP_COST = 0.005  # the reward's price of one more gene (log-speedup)
FAILED = -1.0  # the value of a rollout that reaches a variant that failed


class PolicyError(EvoError):
    """A policy file that cannot be used (missing, not JSON, another version)."""


def shipped_path() -> Path:
    return Path(__file__).resolve().parent / "data" / "policy.json"


def scaled(name: str, value: float) -> float:
    """A feature as the network reads it: fractions and flags as they are, counts and
    sizes on a log scale."""
    if name.startswith(("frac_", "is_")):
        return float(value)
    return math.log1p(max(0.0, float(value)))


@functools.lru_cache(maxsize=8192)
def key_group(key: str):
    """The group of a gene key's gene (None: it stacks with any other gene)."""
    from genomes.genome import parse_inline

    return parse_inline(key).genes[0].group


def child_state(state: tuple[str, ...], key: str) -> tuple[str, ...]:
    """The genome (a sorted tuple of gene keys) with ``key`` added, in place of the gene
    of its group where it holds one."""
    group = key_group(key)
    kept = [k for k in state if group is None or key_group(k) != group]
    return tuple(sorted({*kept, key}))


class Landscape:
    """What one kernel's measured genomes did: ``values[state]`` is ln(baseline / cycles)
    of the genome with those gene keys (an invalid one ``FAILED``); ``features`` the
    kernel's. Built from a knowledge base entry (``evo.learn.priors``: its ``rows``)."""

    def __init__(self, name: str, features: dict, values: dict[tuple[str, ...], float]):
        self.name, self.features, self.values = name, features, values
        self.values.setdefault((), 0.0)

    @classmethod
    def from_kb_entry(cls, entry: dict) -> Landscape:
        from evo.learn.priors import CLIP, genome_keys

        values: dict[tuple[str, ...], list[float]] = {}
        for text, y in entry.get("rows", []):
            keys = genome_keys(text)
            if keys is not None:
                values.setdefault(tuple(sorted(set(keys))), []).append(
                    FAILED if y <= -CLIP + 1e-9 else float(y))
        return cls(f"{entry['kernel']}@{entry['device']}", entry["features"],
                   {s: sum(v) / len(v) for s, v in values.items()})

    def moves(self, state: tuple[str, ...], vocab: list[str]) -> dict[int, tuple[str, ...]]:
        """The vocabulary genes (their index) whose child of ``state`` was measured."""
        out = {}
        for i, key in enumerate(vocab):
            child = child_state(state, key)
            if child != state and child in self.values:
                out[i] = child
        return out

    def greedy(self, vocab: list[str], min_gain: float = STEP_COST) -> list[tuple]:
        """Greedy's trajectory on what was measured: (state, action index or STOP =
        len(vocab), the measured moves) per step, best measured child while it gains more
        than ``min_gain``, then STOP."""
        state, value, steps = (), 0.0, []
        for _ in range(MAX_STEPS):
            moves = self.moves(state, vocab)
            if not moves:
                break
            best = max(moves, key=lambda i: (self.values[moves[i]], -i))
            if self.values[moves[best]] <= value + min_gain:
                steps.append((state, len(vocab), moves))
                break
            steps.append((state, best, moves))
            state, value = moves[best], self.values[moves[best]]
        return steps


    def greedy_reward(self, vocab: list[str]) -> float:
        """Greedy's trajectory counted as a rollout's reward: where it ends, minus
        ``STEP_COST`` a gene (greedy never steps to a failure)."""
        state, moved = (), 0
        for _, action, moves in self.greedy(vocab):
            if action in moves:
                state, moved = moves[action], moved + 1
        return self.values[state] - STEP_COST * moved


class Policy:
    """The network of a policy file, for searches (numpy)."""

    def __init__(self, data: dict):
        import numpy as np

        if not isinstance(data, dict) or data.get("version") != POLICY_VERSION:
            raise PolicyError(f"not a policy file of version {POLICY_VERSION}")
        self.data = data
        self.features: list[str] = data["features"]
        self.vocab: list[str] = data["vocab"]
        self.index = {k: i for i, k in enumerate(self.vocab)}
        self.mean, self.std = np.array(data["mean"]), np.array(data["std"])
        self.layers = [(np.array(layer["w"]), np.array(layer["b"])) for layer in data["layers"]]

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        path = Path(path)
        try:
            return cls(json.loads(path.read_text()))
        except FileNotFoundError:
            raise PolicyError(f"no policy file {path} (evo train policy STORE... -o {path})") \
                from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise PolicyError(f"{path}: not a usable policy file ({err})") from None

    @property
    def stop(self) -> int:
        return len(self.vocab)

    def encode(self, features: dict, states: list[tuple[str, ...]]):
        """The network's input rows for one kernel in each of ``states``."""
        import numpy as np

        f = np.array([scaled(n, features.get(n, 0.0)) for n in self.features])
        f = (f - self.mean) / self.std
        rows = np.zeros((len(states), len(f) + len(self.vocab) + 1))
        rows[:, :len(f)] = f
        for r, state in enumerate(states):
            for key in state:
                if key in self.index:
                    rows[r, len(f) + self.index[key]] = 1.0
            rows[r, -1] = len(state) / MAX_STEPS
        return rows

    def logits(self, rows):
        """One row of logits (vocabulary, then STOP) per input row."""
        import numpy as np

        h = rows
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.T + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h


def save(data: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    tmp.replace(path)
