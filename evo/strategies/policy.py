"""Policy: rollouts of a trained gene policy (``evo train policy``), one gene per step.

A policy (``evo.learn.policy``) reads the kernel's features and the genome so far and
scores each gene it knows, and STOP. A search keeps ``[run] pop`` rollouts going, each one
gene further per generation (all of a generation's genomes measured in one batch): the
first rollout takes the policy's best-scored gene each step (``--pop 1`` is one argmax
rollout, at most ``policy.MAX_STEPS`` genomes) and ends where the policy says STOP; the
others sample from the policy's softmax over the genes at ``temperature``, mixed with a
uniform draw (``epsilon``; the run's seeded RNG), walk on through genomes measured already (free), so that each measures a new
genome a generation, and start again from the baseline when they end. A rollout ends at
a variant that failed its check, after ``MAX_STEPS`` genes, or where no gene it knows
changes the genome. Only genes that change this kernel
(``KernelSearch.alphabet``) and that the policy knows are open. The best measured genome
is the result. The state is plain JSON: a checkpoint resumes it exactly.

| option      | default | meaning                                                    |
| ----------- | ------- | ---------------------------------------------------------- |
| file        | ""      | the policy file ("" = the one shipped with evo)            |
| temperature | 1.0     | softmax temperature of the sampled rollouts                |
| epsilon     | 0.25    | sampled rollouts: chance of a uniformly drawn open gene    |
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from genomes.genome import Genome

from evo.learn.policy import MAX_STEPS, Policy, shipped_path
from evo.learn.priors import gene_key
from evo.options import opt

RESTARTS = 4  # fresh starts a sampled rollout slot may take in one generation


@dataclass(frozen=True)
class Options:
    """``[policy]`` in evo.toml (the table above)."""

    file: str = opt("", doc="the policy file (evo train policy); empty: the shipped one")
    temperature: float = opt(1.0, lo=0.01, hi=100.0, doc="softmax temperature of sampled rollouts")
    epsilon: float = opt(0.25, lo=0.0, hi=1.0, doc="sampled rollouts: chance of a uniform open gene")


def generations(config) -> int:
    return config.run.generations


@functools.lru_cache(maxsize=8)
def _policy(path: str) -> Policy:
    return Policy.load(path or shipped_path())


def _features(spec) -> dict:
    """The kernel's features, computed once a process (a prior may have asked already)."""
    from evo.learn.features import features_many

    return features_many([spec])[spec.name]


def start(search) -> dict:
    _policy(search.config.policy.file)  # a missing or broken file fails before measuring
    if search.spec is None:
        from genomes.errors import EvoError

        raise EvoError("the policy strategy needs the kernel's spec (its features)")
    return {"generation": 0, "rollouts": [], "started": 0, "best": None}


def step(state: dict, search) -> dict:
    state = {**state, "rollouts": [dict(r) for r in state["rollouts"]]}
    generation = state["generation"] + 1
    if not state["rollouts"]:  # the first generation: the baseline, and pop rollouts from it
        base = search.evaluate([Genome()], generation)[0]
        _keep(state, Genome(), base)
        state["rollouts"] = [_fresh(state) for _ in range(max(1, search.config.run.pop))]
    live, children = [], []
    for slot in range(len(state["rollouts"])):
        for _ in range(RESTARTS):
            r = state["rollouts"][slot]
            child = None if r["done"] else _advance(search, r)
            if child is not None:
                live.append(r)
                children.append(child)
                break
            r["done"] = True
            if r["index"] == 0:
                break  # the argmax rollout runs once
            state["rollouts"][slot] = _fresh(state)  # a sampled one starts again
    for r, child, m in zip(live, children, search.evaluate(children, generation)):
        _keep(state, child, m)
        _move(r, child)
        r["done"] = not m.valid or r["steps"] >= MAX_STEPS
    return {**state, "generation": generation}


def finished(state: dict, search) -> bool:
    over = state["generation"] >= search.config.run.generations or search.budget_left() == 0
    return over or (bool(state["rollouts"]) and all(r["done"] for r in state["rollouts"]))


def best(state: dict):
    if state["best"] is None:
        return Genome().to_json(), None
    return state["best"][0], state["best"][1]


# ---------------------------------------------------------------------- rollouts


def _fresh(state: dict) -> dict:
    """A new rollout at the baseline."""
    state["started"] += 1
    return {"index": state["started"] - 1, "genome": Genome().to_json(), "steps": 0,
            "done": False, "path": [Genome().dumps()]}


def _keep(state: dict, genome: Genome, m) -> None:
    if m.valid and m.fitness is not None and math.isfinite(m.fitness) and (
            state["best"] is None or m.fitness < state["best"][1]):
        state["best"] = [genome.to_json(), m.fitness]


def _move(rollout: dict, child: Genome) -> None:
    rollout["genome"], rollout["steps"] = child.to_json(), rollout["steps"] + 1
    rollout["path"] = [*rollout["path"], child.dumps()]


def _advance(search, rollout: dict) -> Genome | None:
    """The next genome the rollout measures, None where it ends. A sampled rollout walks
    on through genomes measured already (they cost nothing) and never stops by choice: each
    generation, it measures one genome no one has."""
    sampled = rollout["index"] > 0
    while True:
        child = _next(search, rollout, sampled)
        if child is None or not sampled or child.dumps() not in search.known:
            return child
        if rollout["steps"] + 1 >= MAX_STEPS:
            return None
        _move(rollout, child)


def _next(search, rollout: dict, sampled: bool) -> Genome | None:
    """The rollout's next genome: the policy's choice among the open genes (argmax, or
    sampled at the temperature, where STOP is no choice), None for STOP or where no gene
    is open."""
    import numpy as np

    policy = _policy(search.config.policy.file)
    here = Genome.from_json(rollout["genome"])
    keys = tuple(sorted({gene_key(g) for g in here.effective().genes}))
    open_genes = {}  # vocabulary index -> the child genome
    for gene in search.alphabet():
        i = policy.index.get(gene_key(gene))
        if i is None or i in open_genes:
            continue
        child = here.with_gene(gene)
        known = search.known.get(child.dumps())
        if child.dumps() not in rollout["path"] and not (known is not None and not known.get("valid")):
            open_genes[i] = child  # no cycles (maxnreg 192 -> 224 -> 192), no known failure
    if not open_genes:
        return None
    logits = policy.logits(policy.encode(_features(search.spec), [keys]))[0]
    allowed = [*open_genes] + ([] if sampled else [policy.stop])
    scores = np.array([logits[i] for i in allowed])
    if sampled:
        opts = search.config.policy
        p = np.exp((scores - scores.max()) / opts.temperature)
        p = (1 - opts.epsilon) * p / p.sum() + opts.epsilon / len(p)  # explore beyond its habit
        pick = allowed[_draw(search.rng, p)]
    else:
        pick = allowed[int(np.argmax(scores))]
    return None if pick == policy.stop else open_genes[pick]


def _draw(rng, p) -> int:
    """An index drawn with probabilities ``p`` from the search's seeded RNG."""
    u, acc = rng.random(), 0.0
    for i, q in enumerate(p):
        acc += float(q)
        if u < acc:
            return i
    return len(p) - 1
