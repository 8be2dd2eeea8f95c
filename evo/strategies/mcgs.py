"""MCGS: Monte-Carlo graph search over genes, whose nodes are distinct machine code.

A node is what a genome assembles to (``KernelSearch.code_key``): two gene orders or
register budgets that make the same cubin are one node (a transposition), so statistics
gathered through either path are shared. An edge is a gene added to (or replacing the gene
of its group in) the node's genome. Each generation runs simulations in one batch:

1. **select**: from the baseline's node follow edges by P-UCB,
   ``Q(a) + c * P(a) * sqrt(N(node)) / (1 + N(a))``, never into a node already on the path
   (no cycles); a node opens actions one at a time as it is visited (progressive widening:
   at most ``ceil(widen * N ** alpha)``), in the order of their prior ``P`` (evo's priors
   where given: the genes other kernels gained from weigh more, by what they gained there
   after the genes this node holds (the prior's gene -> next-gene gains), else alone;
   else uniform, a seeded order); an action whose genome assembles to a node already in the graph leads there
   (nothing to measure); an edge not yet followed ends the selection: its genome is the
   expansion;
2. every simulation's expansion is measured in one batch (selections count as visits at
   once, a virtual loss, so that the batch's simulations spread);
3. **rollout**: from each new node that passed, ``rollout`` more genes, epsilon-greedy
   (a random open gene with probability ``epsilon``, else the most promising by
   ``Q - lam * N`` where visited, the prior's order where not), measured in one batch per
   step, stopping at a failure;
4. **backup**: the rollout's best reward goes back up the path (each edge keeps the sum
   and count: Q is their mean). Reward: log(baseline cycles / cycles); a failure is -1.

With a prior, generation 1 measures the baseline and up to ``prior_seeds`` of the prior's
seed genomes (the stacks of genes it predicts best for this kernel, as evolve's first
generation holds them), each an edge from the root that adds its whole stack at once (a
macro action, as an LLM's patch would be): the search goes on from the best of them
instead of rebuilding their stacks a gene at a time (session 17's mcgs45_priors trailed
evolve45_priors, which starts from those seeds, by 1.5 points).

A generation measures ``pop // (1 + rollout)`` simulations' worth of genomes (an
expansion and its rollout each): where an expansion fails (no rollout follows it) or a
walk finds nothing to expand, more simulations take the places left, so that
``--generations 9 --pop 5`` measures what evolve's 45 trials do (37 genomes: evolve keeps
its elite). The state is plain JSON
(nodes, edges, the generation): a checkpoint resumes it exactly.

| option  | default | meaning                                                   |
| ------- | ------- | --------------------------------------------------------- |
| c_puct  | 1.0     | exploration weight of P-UCB                               |
| widen   | 2.0     | progressive widening: open actions <= widen * N ** alpha  |
| alpha   | 0.5     |                                                           |
| rollout | 1       | genes a rollout adds after an expansion (0 = none)        |
| epsilon | 0.2     | rollout: chance of a random open gene                     |
| lam     | 0.05    | rollout: visit penalty in Q - lam * N                     |
| prior_seeds | 4   | with priors: seed genomes measured in generation 1        |
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

from genomes.genome import Genome, parse_inline

from evo.learn.priors import expected_gain, gene_key
from evo.learn.steer import in_last_places, seed_genomes, seeds_with_untried
from evo.options import opt

FAILED = -1.0  # the reward of a variant that failed its check (or was not measured)
FILL_ROUNDS = 3  # batches a generation adds to measure the places failures left


@dataclass(frozen=True)
class Options:
    """``[mcgs]`` in evo.toml (the table above)."""

    c_puct: float = opt(1.0, lo=0.0, hi=100.0, doc="exploration weight of P-UCB")
    widen: float = opt(2.0, lo=1.0, hi=1000.0, doc="a node opens at most widen * N ** alpha actions")
    alpha: float = opt(0.5, lo=0.0, hi=1.0, doc="progressive widening's exponent")
    rollout: int = opt(1, lo=0, hi=8, doc="genes a rollout adds after an expansion")
    epsilon: float = opt(0.2, lo=0.0, hi=1.0, doc="rollout: chance of a random open gene")
    lam: float = opt(0.05, lo=0.0, hi=10.0, doc="rollout: visit penalty in Q - lam * N")
    prior_seeds: int = opt(4, lo=0, hi=10000,
                           doc="with priors: generation 1 measures at most this many of the "
                               "prior's seed genomes, each an edge from the root")


def generations(config) -> int:
    return config.run.generations


def start(search) -> dict:
    return {"generation": 0, "root": None, "nodes": {}, "base_cycles": None, "stuck": False}


def step(state: dict, search) -> dict:
    state = {**state, "nodes": {k: _copy(n) for k, n in state["nodes"].items()}}
    generation = state["generation"] + 1
    opts = search.config.mcgs
    places = search.config.run.pop
    if state["root"] is None:  # the baseline first: its node is the root, its cycles the scale
        seeds = _seeds(search, opts)
        measured = search.evaluate([Genome(), *seeds], generation)
        base = measured[0]
        state["base_cycles"] = base.cycles if base.valid else None
        state["root"] = _node(state, search, Genome(), _reward(state, base), base.cycles)
        for seed, m in zip(seeds, measured[1:]):
            _attach(state, search, state["root"], str(seed), seed, m)
        places -= len(seeds)
        if places < 1 + opts.rollout and seeds:  # the seeds took this generation's places
            return {**state, "generation": generation}
    # A generation measures its planned count: a failed expansion has no rollout, so
    # more simulations take the places it left (at most FILL_ROUNDS batches more).
    planned = max(1, places // (1 + opts.rollout)) * (1 + opts.rollout)
    start = search.evals
    for round_ in range(1 + FILL_ROUNDS):
        left = planned - (search.evals - start)
        if left <= 0 or search.budget_left() == 0:
            break
        before = search.evals
        paths, leaves = [], []
        for _ in range(max(1, left // (1 + opts.rollout))):
            chosen = _select(state, search, opts, pending={_key(g) for g in leaves})
            if chosen is not None:
                paths.append(chosen[0])
                leaves.append(chosen[1])
        if not leaves:
            if round_ == 0:
                return {**state, "generation": generation, "stuck": True}
            break
        rollout = min(opts.rollout, left - 1)  # a last place: no rollout past the plan
        values = _expand(state, search, opts, paths, leaves, generation, max(0, rollout))
        for path, value in zip(paths, values):
            for node_key, gene in path:
                edge = state["nodes"][node_key]["edges"][gene]
                edge["w"] += value
        if search.evals == before:
            break  # nothing new was measured: more rounds would not be either
    return {**state, "generation": generation}


def finished(state: dict, search) -> bool:
    return (state["generation"] >= search.config.run.generations or state["stuck"]
            or search.budget_left() == 0)


def best(state: dict):
    measured = [(n["cycles"], k) for k, n in state["nodes"].items() if n["cycles"]]
    if not measured:
        return Genome().to_json(), None
    cycles, key = min(measured)
    return state["nodes"][key]["genome"], cycles


# ---------------------------------------------------------------------- the graph


def _copy(node: dict) -> dict:
    return {**node, "order": list(node["order"]),
            "edges": {g: dict(e) for g, e in node["edges"].items()}}


def _key(genome: Genome) -> str:
    return genome.dumps()


def _reward(state: dict, m) -> float:
    base = state["base_cycles"]
    if not (m.valid and m.cycles) or not base:
        return FAILED
    return math.log(base / m.cycles)


def _node(state: dict, search, genome: Genome, reward: float, cycles) -> str:
    """The node of ``genome``'s machine code, made where new (its actions in prior order,
    its reward and cycles as first measured: a transposition runs the same code)."""
    key = search.code_key(genome)
    if key not in state["nodes"]:
        state["nodes"][key] = {"genome": genome.to_json(), "n": 0, "reward": reward,
                               "cycles": cycles if reward > FAILED else None,
                               "order": _actions(search, genome), "edges": {}}
    return key


def _seeds(search, opts) -> list[Genome]:
    """The prior's seed genomes for generation 1 (none without a prior): at most
    ``prior_seeds`` and ``pop - 1``, each of a machine code neither the baseline's nor
    another seed's (one batch of ptxas runs decides); as in evolve's generation 1, the
    genes no kernel of the prior was measured with go on top of the first seed, in the
    last seed's place (``steer.seeds_with_untried``: warp_tail, which the reductions
    gain from, would otherwise wait behind every gene the prior knows)."""
    count = min(opts.prior_seeds, search.config.run.pop - 1)
    if not search.prior or count < 1:
        return []
    seeds = seed_genomes(search.prior, len(search.prior.get("seeds", [])), lambda g: False)
    search.look_up_codes([Genome(), *seeds])
    codes, out = {search.code_key(Genome())}, []
    for seed in seeds:
        code = search.code_key(seed)
        if code not in codes and len(out) < count:
            codes.add(code)
            out.append(seed)
    untried = [g for g in seeds_with_untried(search.prior, search.draw_from(), out)
               if g not in out]
    search.look_up_codes(untried)
    return in_last_places(out, [g for g in untried if search.code_key(g) not in codes], count)


def _attach(state: dict, search, node_key: str, label: str, genome: Genome, m) -> None:
    """An edge ``label`` from a node to ``genome``'s node, followed once with ``m``'s reward."""
    reward = _reward(state, m)
    child = _node(state, search, genome, reward, m.cycles)
    node = state["nodes"][node_key]
    if label in node["order"]:
        node["order"].remove(label)
    node["edges"][label] = {"n": 1, "w": reward, "child": child}
    node["n"] += 1
    state["nodes"][child]["n"] += 1


@functools.lru_cache(maxsize=4096)
def _genes(label: str) -> tuple:
    """The genes an edge adds: one, or a prior seed's whole stack."""
    return parse_inline(label).genes


def _extend(genome: Genome, label: str) -> Genome:
    """The genome an edge leads to: ``genome`` with each of the edge's genes."""
    for gene in _genes(label):
        genome = genome.with_gene(gene)
    return genome


def _weight(search, gene: str, held: tuple[str, ...] = ()) -> float:
    """A gene's prior weight at a node whose genome holds the genes ``held`` (their prior
    keys): 1, plus ten times the gain other kernels saw it bring there (evo.learn): where
    it was added after genes held here (the prior's ``after``, gene -> next-gene gains
    across kernels), the mean of those gains, else its effect alone. So the genes that
    followed the ones on this path well elsewhere come first. A seed's edge (several
    genes) weighs by the sum of its genes' gains, each after the ones before it."""
    if not search.prior:
        return 1.0
    gain = 0.0
    for key in _label_keys(gene):
        gain += expected_gain(search.prior, key, held)
        held = (*held, key)
    return 1.0 + 10.0 * max(0.0, gain)


@functools.lru_cache(maxsize=4096)
def _label_keys(label: str) -> tuple[str, ...]:
    """The prior keys of the genes an edge adds (walks score every edge of every node
    they pass: these are asked for again and again)."""
    return tuple(gene_key(g) for g in _genes(label))


@functools.lru_cache(maxsize=4096)
def _held(genome_json: str) -> tuple[str, ...]:
    """The prior keys of the genes a genome (its JSON text) holds."""
    return tuple(gene_key(g) for g in Genome.from_json(json.loads(genome_json)).genes)


def _actions(search, genome: Genome) -> list[str]:
    """The genes this node may add, most promising first: by their prior weight there
    (``_weight``), ties (and every gene, without a prior) in a seeded shuffle."""
    genes = [str(g) for g in search.alphabet() if genome.with_gene(g) != genome]
    search.rng.shuffle(genes)
    held = _held(genome.dumps())
    return sorted(genes, key=lambda g: -_weight(search, g, held))


def _select(state: dict, search, opts, pending: set[str]):
    """(path of (node, gene), the expansion's genome), the visits counted at once; None
    where no walk from the root finds an action to expand. A walk that ends at a node
    whose every action loops back into the path or is being expanded already closes the
    edge into that node for this selection and starts again from the root. (Before, such
    a walk was a simulation lost, and a generation whose walks all ended so ended the
    whole search: with failures' rollouts left unspent too, MCGS measured 17-37 of its
    45 trials a kernel, BENCHMARKS.md session 21.)"""
    blocked: set[tuple[str, str]] = set()
    while True:
        path, genome = _walk(state, search, opts, pending, blocked)
        if genome is not None:
            for node_key, gene in path:  # the virtual loss: the batch's next walks see it
                state["nodes"][node_key]["n"] += 1
                state["nodes"][node_key]["edges"][gene]["n"] += 1
            return path, genome
        if not path:
            return None  # the root itself has nothing open
        blocked.add(path[-1])


def _walk(state: dict, search, opts, pending: set[str], blocked: set):
    """One walk down by P-UCB: (path, the expansion's genome), or (path to a dead end,
    None)."""
    node_key, path, on_path = state["root"], [], {state["root"]}
    while True:
        node = state["nodes"][node_key]
        here = Genome.from_json(node["genome"])
        _widen(state, search, opts, node, here)
        scored = _scored(search, opts, node_key, node, here, on_path, pending, blocked)
        while not scored and node["order"]:  # every open action loops back: open more
            _widen(state, search, opts, node, here, more=len(node["edges"]) + 2)
            scored = _scored(search, opts, node_key, node, here, on_path, pending, blocked)
        if not scored:
            return path, None
        _, gene = max(scored)
        path.append((node_key, gene))
        child = node["edges"][gene]["child"]
        if child is None:
            return path, _extend(here, gene)
        node_key = child
        on_path.add(node_key)


def _scored(search, opts, node_key: str, node: dict, here: Genome, on_path: set, pending: set,
            blocked: set = frozenset()) -> list:
    """(P-UCB score, gene) of each open action that neither loops back into the path, nor
    is being expanded by another simulation of the batch, nor leads to a dead end found
    by this selection (``blocked``)."""
    held = _held(here.dumps())
    total = sum(_weight(search, g, held) for g in [*node["edges"], *node["order"]])
    scored = []
    for gene, edge in node["edges"].items():
        if edge["child"] in on_path or (node_key, gene) in blocked:
            continue  # a cycle: adding it gives back code already on the path
        if edge["child"] is None and _key(_extend(here, gene)) in pending:
            continue
        q = edge["w"] / edge["n"] if edge["n"] else 0.0
        p = _weight(search, gene, held) / total  # P(a)
        u = opts.c_puct * p * math.sqrt(node["n"] + 1) / (1 + edge["n"])
        scored.append((q + u, gene))
    return scored


def _widen(state: dict, search, opts, node: dict, here: Genome, more: int = 0) -> None:
    """Open the node's next actions while ``ceil(widen * N ** alpha)`` (and ``more``)
    allows. An action whose genome assembles to a node already in the graph leads there
    at once (a transposition: nothing to measure); their machine code is looked up in one
    batch."""
    opened = []
    allowed = math.ceil(opts.widen * (node["n"] + 1) ** opts.alpha) + more
    while node["order"] and len(node["edges"]) < allowed:
        gene = node["order"].pop(0)
        node["edges"][gene] = {"n": 0, "w": 0.0, "child": None}
        opened.append(gene)
    children = [_extend(here, gene) for gene in opened]
    search.look_up_codes(children)
    for gene, child in zip(opened, children):
        key = search.code_key(child)
        if key in state["nodes"]:
            node["edges"][gene]["child"] = key


def _expand(state: dict, search, opts, paths, leaves: list[Genome], generation: int,
            rollout: int) -> list[float]:
    """Measure the expansions and their rollouts (``rollout`` genes each at most); each
    simulation's best reward."""
    search.look_up_codes(leaves)
    results = search.evaluate(leaves, generation)
    values, tips = [], []
    for path, genome, m in zip(paths, leaves, results):
        reward = _reward(state, m)
        node_key, gene = path[-1]
        child = _node(state, search, genome, reward, m.cycles)
        state["nodes"][node_key]["edges"][gene]["child"] = child
        state["nodes"][child]["n"] += 1
        values.append(reward)
        tips.append(child if reward > FAILED else None)
    for _ in range(rollout):
        moves = [(i, tip, _rollout_gene(state, search, opts, tip))
                 for i, tip in enumerate(tips) if tip is not None]
        moves = [(i, tip, gene) for i, tip, gene in moves if gene is not None]
        if not moves:
            break
        genomes = [_extend(Genome.from_json(state["nodes"][tip]["genome"]), gene)
                   for _, tip, gene in moves]
        search.look_up_codes(genomes)
        tips = [None] * len(tips)
        for (i, tip, gene), genome, m in zip(moves, genomes, search.evaluate(genomes, generation)):
            reward = _reward(state, m)
            child = _node(state, search, genome, reward, m.cycles)
            edge = state["nodes"][tip]["edges"].setdefault(gene, {"n": 0, "w": 0.0, "child": None})
            edge["child"] = child
            if gene in state["nodes"][tip]["order"]:
                state["nodes"][tip]["order"].remove(gene)
            edge["n"] += 1
            edge["w"] += reward
            values[i] = max(values[i], reward)
            tips[i] = child if reward > FAILED else None
    return values


def _rollout_gene(state: dict, search, opts, tip: str) -> str | None:
    """Epsilon-greedy: a random open gene, or the best by Q - lam * N among the visited
    edges, else the first gene of the node's order; None where the node has none."""
    node = state["nodes"][tip]
    choices = [*node["edges"], *node["order"]]
    if not choices:
        return None
    if search.rng.random() < opts.epsilon:
        return search.rng.choice(choices)
    visited = [(e["w"] / e["n"] - opts.lam * e["n"], g) for g, e in node["edges"].items() if e["n"]]
    return max(visited)[1] if visited else choices[0]
