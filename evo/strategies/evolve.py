"""Evolve: a generational genetic algorithm with real elitism (the default strategy).

Generation 1 evaluates the initial population: the baseline (the empty genome) and
``pop - 1`` random genomes of 1..``init_max_len`` genes. Every later generation:

1. copy the best ``elites`` individuals unchanged into the next generation;
2. fill the rest by tournament selection (size ``tournament``) of parents;
3. pair them and, with probability ``cxpb``, cross each pair over (one-point or uniform,
   half and half); then, with probability ``[llm] rate``, ask the LLM for a PTX patch
   gene (``evo.llm``: a crossover with another child for a share ``[llm] crossover`` of
   those calls, an explore-mode prompt for a share ``[llm] explore`` of the rest); when
   it has none to offer, or otherwise, mutate each child with probability
   ``mutpb`` (insert, delete, replace, swap or re-parameterize a gene). Children equal
   to a genome already evaluated, or (``novel_code``) assembling to the machine code of
   one, are mutated again (a few tries), so the budget goes to new kernels. Without it,
   48 % of the 45-trial searches' evaluations on the 64 gemm tiles were such twins (a
   register budget the kernel never reaches, a cache hint on a load another gene already
   changed), 14 % with it (BENCHMARKS.md, session 11); ptxas tells them apart on the
   CPU, before they take GPU time;
4. evaluate the children; the new population is elites + children.

It is written as a DEAP program (``toolbox``): a ``deap.base.Toolbox`` with ``individual``
(a random genome), ``mate`` (one-point or uniform crossover, half and half), ``mutate``
(``genomes.variation.mutate``, the search's gene draw), ``select`` (``tools.selTournament``),
``elites`` (``tools.selBest``) and ``evaluate`` registered, and a generation loop shaped like
DEAP's ``eaSimple``/``varAnd`` (select, clone, mate pairs, mutate, evaluate, replace).
Fitness is median cycles (lower is better; invalid = +inf) in DEAP ``Fitness`` objects;
per-generation statistics come from ``tools.Statistics`` into a ``tools.Logbook``.

Every random draw comes from the kernel's seeded RNG (``search.rng``, saved in the
checkpoint), DEAP's own operators included: ``selTournament`` draws from the global
``random`` module, so it runs with ``search.rng``'s state lent to that module
(``drawing_from``). The state stays plain JSON (genomes and fitnesses, no pickled DEAP
objects), so the seed decides the whole search and a resumed run continues it exactly.

| option       | default | meaning                                      |
| ------------ | ------- | -------------------------------------------- |
| elites       | 1       | best individuals kept unchanged              |
| tournament   | 3       | tournament size for parent selection         |
| cxpb         | 0.5     | crossover probability per pair               |
| mutpb        | 0.9     | mutation probability per child               |
| init_max_len | 3       | random initial genomes have 1..this genes    |
| max_len      | 8       | genomes never grow past this                 |
| local_search | 0       | neighbors of the best tried each generation  |
| init         | random  | first generation: random, or sweep + stacks  |
| prior_seeds  | 4       | with priors: seed genomes in generation 1    |
| prior_rate   | 0.5     | with priors: share of steered gene draws     |
| novel_code   | true    | children with measured machine code redrawn  |
| screen       | 1       | children bred per place for the cost model   |

With ``local_search`` > 0, each generation also evaluates that many unseen neighbors of
the best individual (one gene in, one gene out, or its register budget moved by 8 or 16),
in place of as many children.

With ``init = "sweep"``, generation 1 is not random: it measures the baseline and every gene
of the alphabet alone (what one greedy step costs), then stacks the genes that beat the
baseline, at most one per conflict group: the best two, the best three, ... (best first,
the order in which greedy would append them). Where gene effects add up, a stack lands
near where greedy ends after several steps, for one evaluation; the rest of the budget
goes to evolution and local search around it, which greedy, adding one gene at a time,
cannot do. The first population is the best ``pop`` of everything generation 1 measured.

With a prior (``search.prior``, from ``evo.learn``: what other kernels' results suggest;
``[run] priors``), a random first generation holds the baseline, then up to
``prior_seeds`` of the prior's seed genomes (the stacks of genes it predicts best and the
nearest kernels' best genomes), then random genomes; and every mutation that puts a gene
in draws it, with probability ``prior_rate``, from the genes the prior expects to help
(``evo.learn.steer``). Genes that change the kernel but that no kernel of the prior was
measured with take one seed's place: the first seed with those genes on top (a new
transform is tried once rather than starved by a prior that never saw it). Without a
prior nothing changes, down to the random stream.

With ``screen`` = S > 1, each later generation breeds S children per place and measures
only the places' worth that a cost model (``evo.learn.cost``, trained on the prior's rows
and the search's own results) ranks best.
"""

from __future__ import annotations

import functools
import math
import random
import threading
from dataclasses import dataclass

from deap import base  # deap.tools is imported where used: it imports NumPy (~0.3 s), and
# every evo command imports this module to read its Options

from genomes import transforms
from genomes.genome import Gene, Genome
from genomes.variation import (crossover_one_point, crossover_uniform, mutate, random_gene,
                               random_genome)

from evo.learn.cost import screen_genomes
from evo.learn.steer import gene_drawer, in_last_places, seed_genomes, seeds_with_untried
from evo.options import opt

RETRIES = 4  # extra mutations to turn an already-seen child into a new genome


@dataclass(frozen=True)
class Options:
    """``[evolve]`` in evo.toml (``evo.config`` reads it through ``evo.strategies``)."""

    elites: int = opt(1, lo=0, doc="best individuals copied unchanged into the next generation")
    tournament: int = opt(3, lo=1)
    cxpb: float = opt(0.5, lo=0.0, hi=1.0, doc="crossover probability per pair")
    mutpb: float = opt(0.9, lo=0.0, hi=1.0, doc="mutation probability per child")
    init_max_len: int = opt(3, lo=1, hi=64, doc="random initial genomes have 1..this genes")
    max_len: int = opt(8, lo=1, hi=256, doc="genomes never grow past this")
    local_search: int = opt(0, lo=0, hi=1000,
                             doc="unseen neighbors of the best tried each generation (0 = off)")
    init: str = opt("random", choices=("random", "sweep"),
                     doc="first generation: baseline + random genomes, or every gene alone "
                         "and the best per group stacked")
    prior_seeds: int = opt(4, lo=0, hi=10000,
                            doc="with priors: generation 1 holds at most this many of the "
                                "prior's seed genomes (the rest random)")
    prior_rate: float = opt(0.5, lo=0.0, hi=1.0,
                             doc="with priors: probability that a mutation's new gene is drawn "
                                 "from the genes the prior expects to help")
    novel_code: bool = opt(True, doc="a child that assembles to machine code the search "
                                      "has measured is mutated again, like one already "
                                      "evaluated (ptxas on the CPU, before any GPU time)")
    screen: int = opt(1, lo=1, hi=100,
                       doc="children bred per place; a cost model (scikit-learn) keeps the "
                           "most promising (1 = off)")


def generations(config) -> int:
    """Generations a search of this config runs (``[run] generations``)."""
    return config.run.generations


# DEAP's creator.create would make these classes in deap.creator's global namespace (once
# per process); plain subclasses are the same classes without that global state.
class FitnessMin(base.Fitness):
    weights = (-1.0,)


class Individual(list):
    """A genome's genes as a DEAP individual (a list with a ``fitness``)."""

    def __init__(self, genome: Genome, fitness: float | None = None):
        super().__init__(genome.genes)
        self.fitness = FitnessMin()
        if fitness is not None:
            self.fitness.values = (fitness,)

    @property
    def genome(self) -> Genome:
        return Genome(tuple(self))


def toolbox(search) -> base.Toolbox:
    """evolve's operators for ``search``, registered under the names DEAP's algorithms use.

    Built afresh each generation from the search (its config, RNG, prior and alphabet):
    nothing of it is state, so a checkpoint needs only the population and ``search.rng``."""
    from deap import tools

    cfg = search.config.evolve
    rng = search.rng
    tb = base.Toolbox()
    tb.register("genome", random_genome, rng, 1, cfg.init_max_len, genes=search.draw_from())
    tb.register("individual", tools.initIterate, Individual, tb.genome)
    tb.register("mate", mate, rng=rng)
    tb.register("mutate", mutate_individual, rng=rng, max_len=cfg.max_len,
                draw=_drawer(search))
    tb.register("select", drawing_from(rng, tools.selTournament), tournsize=cfg.tournament)
    # Elites: selBest over the population (DEAP's elitist idiom, selBest + offspring), not
    # a HallOfFame. evolve is elitist, so the population's best is the best ever seen, as a
    # HallOfFame's would be; but a HallOfFame is an archive kept across generations (more
    # state to checkpoint, of deep-copied individuals) and it keeps one copy of equal
    # individuals, which with elites > 1 would change who is kept. selBest needs no state.
    tb.register("elites", tools.selBest)
    tb.register("evaluate", evaluate_population, search=search)
    return tb


def mate(ind1: Individual, ind2: Individual, rng: random.Random):
    """Two children of two parents: one-point or uniform crossover (``genomes.variation``),
    half and half (a fair coin from ``rng``, then the crossover's own draws)."""
    cross = crossover_one_point if rng.random() < 0.5 else crossover_uniform
    child1, child2 = cross(ind1.genome, ind2.genome, rng)
    return Individual(child1), Individual(child2)


def mutate_individual(ind: Individual, rng: random.Random, max_len: int, draw):
    """One random edit of ``ind`` (``genomes.variation.mutate``; ``draw`` picks the genes it
    puts in), as DEAP's mutation operators return it: a one-element tuple."""
    return (Individual(mutate(ind.genome, rng, max_len, draw=draw)[0]),)


def evaluate_population(individuals: list[Individual], generation: int, search):
    """One fitness tuple per individual, for the whole batch in one ``search.evaluate`` call.

    DEAP's algorithms evaluate one individual per call (``toolbox.map(toolbox.evaluate,
    invalid_ind)``); evo measures a generation at once (the run's memory and store answer
    known genomes, ptxas runs in parallel, the GPU times a batch), so ``evaluate`` takes
    the batch."""
    results = search.evaluate([ind.genome for ind in individuals], generation=generation)
    return [(m.fitness,) for m in results]


_GLOBAL_RANDOM = threading.Lock()


def drawing_from(rng: random.Random, operator):
    """``operator``, a DEAP operator that draws from the global ``random`` module, made to
    draw from ``rng``: for the call, the global generator takes ``rng``'s state; after it,
    ``rng`` takes the state the call left and the global generator gets its own back.

    The module's functions are methods of one ``random.Random``, so the operator draws
    exactly what ``rng`` would (``random.choice(seq)`` is ``rng.randrange(len(seq))``), the
    checkpoint's RNG state is the state DEAP's operators draw from, and what else draws
    from the global generator neither changes a search nor is changed by it. The lock
    keeps searches run in threads (``evo bench``) from lending their states at the same
    time (evo draws nothing else from the global generator: its draws are all from a
    search's own ``random.Random``)."""
    @functools.wraps(operator)
    def call(*args, **kwargs):
        with _GLOBAL_RANDOM:
            outside = random.getstate()
            random.setstate(rng.getstate())
            try:
                return operator(*args, **kwargs)
            finally:
                rng.setstate(random.getstate())
                random.setstate(outside)
    return call


def start(search) -> dict:
    return {"generation": 0, "population": [], "logbook": []}


def step(state: dict, search) -> dict:
    from deap import tools

    cfg = search.config.evolve
    pop_size = search.config.run.pop
    tb = toolbox(search)
    generation = state["generation"] + 1
    if not state["population"]:
        elites: list[Individual] = []
        offspring = _first_generation(tb, search, generation)
    else:
        population = [_from_json(item) for item in state["population"]]
        elites = tb.elites(population, min(cfg.elites, len(population)))
        # A local search around the best (if enabled) takes some of the children's places.
        neighbors = _neighbors(elites[0].genome, cfg.local_search, search, search.rng) \
            if elites else []
        places = max(0, pop_size - len(elites) - len(neighbors))
        # Screening breeds a surplus for a cost model to choose from (not with the LLM:
        # every surplus child would be a paid call).
        screen = cfg.screen if search.config.llm.rate == 0 else 1
        children = [c.genome for c in _vary(tb.select(population, places * screen), tb, search)]
        if screen > 1:
            children = screen_genomes(children, places, search)
        offspring = [Individual(g) for g in
                     neighbors + [g for g in children if g not in neighbors]]
    # Every child is evaluated, not only those with an invalid fitness as in eaSimple: the
    # search answers known genomes from memory at no cost, and a child equal to a parent
    # that was over the budget is measured once a larger budget lets it.
    for ind, fit in zip(offspring, tb.evaluate(offspring, generation)):
        ind.fitness.values = fit  # +inf (invalid) is a legal DEAP fitness: it sorts last
    population = elites + offspring
    if len(population) > pop_size:  # a sweep-seeded first generation: keep the best
        population = tb.elites(population, pop_size)
    stats = tools.Statistics(_value)
    stats.register("best", lambda fits: _json_fit(min(fits)))
    stats.register("median", lambda fits: _json_fit(sorted(fits)[len(fits) // 2]))
    logbook = tools.Logbook()
    logbook.record(gen=generation, **stats.compile(population), evals=search.evals)
    return {"generation": generation,
            "population": [_to_json(ind) for ind in population],
            "logbook": state["logbook"] + list(logbook)}


def _first_generation(tb: base.Toolbox, search, generation: int) -> list[Individual]:
    """Generation 1, not yet evaluated (``init = "sweep"`` measures its singles here): the
    baseline, the prior's seeds and new random individuals, or the sweep and its stacks."""
    cfg = search.config.evolve
    pop_size = search.config.run.pop
    if cfg.init == "sweep":
        return [Individual(g) for g in _sweep_and_stack(tb, search, generation)]
    genomes = [Genome()]
    places = min(cfg.prior_seeds, pop_size - 1)
    if cfg.novel_code and places:
        every = len((search.prior or {}).get("seeds", []))  # in one batch of ptxas runs
        search.look_up_codes(seed_genomes(search.prior, every, lambda g: False))
    seeds = seed_genomes(search.prior, places, lambda g: not _is_new(g, genomes, search))
    untried = [g for g in seeds_with_untried(search.prior, search.draw_from(), seeds)
               if g not in seeds and not search.seen(g)]
    genomes += in_last_places(seeds, untried, places)
    drawn = [tb.individual() for _ in range(pop_size - len(genomes))]
    genomes += [ind.genome for ind in _novel(drawn, search, tb, before=genomes)]
    return [Individual(g) for g in genomes]


def _vary(parents: list[Individual], tb: base.Toolbox, search) -> list[Individual]:
    """Children of ``parents`` (step 3 of the module docstring), as DEAP's ``varAnd`` makes
    them (clone; mate consecutive pairs with probability ``cxpb``; mutate each child with
    probability ``mutpb``) with evo's two additions per child: the LLM's patch in place of
    a mutation, and more mutations for a child already evaluated (``_novel``)."""
    cfg = search.config.evolve
    rng = search.rng
    offspring = [tb.clone(ind) for ind in parents]
    for i in range(1, len(offspring), 2):
        if rng.random() < cfg.cxpb:
            offspring[i - 1], offspring[i] = tb.mate(offspring[i - 1], offspring[i])
    llm = search.config.llm
    asks = {}  # child index -> what the LLM is asked for it (evo.search.llm_mutate)
    for i, child in enumerate(offspring):
        # The LLM draws happen only when the LLM (and each of its options) is on, so other
        # runs keep their random stream.
        if llm.rate > 0 and search.llm is not None and rng.random() < llm.rate:
            asks[i] = _llm_ask(child, offspring[:i] + offspring[i + 1:], rng, search)
    # The generation's LLM children are asked together (requests in flight at once).
    patched = dict(zip(asks, search.llm_mutate(list(asks.values())))) if asks else {}
    varied: list[Individual] = []
    llm_made: list[bool] = []  # whether the LLM made each child
    for i, child in enumerate(offspring):
        if patched.get(i) is not None:
            child = Individual(patched[i])
        elif rng.random() < cfg.mutpb:  # an LLM that proposed nothing usable: mutate()
            child, = tb.mutate(child)
        varied.append(child)
        llm_made.append(patched.get(i) is not None)
    # An LLM child keeps its patch even where it assembles like a measured genome: the
    # call is paid for, and the LLM hears back how its patch did.
    return _novel(varied, search, tb, by_code=[not b for b in llm_made])


def _llm_ask(child: Individual, others: list[Individual], rng, search) -> tuple:
    """What the LLM is asked for this child, (genome, mode, other): a crossover with
    another offspring (share ``[llm] crossover``), else a mutation, in explore mode for a
    share ``[llm] explore`` of them."""
    llm = search.config.llm
    mates = [o.genome for o in others if o.genome != child.genome]
    if llm.crossover > 0 and mates and rng.random() < llm.crossover:
        return child.genome, "full", rng.choice(mates)
    explore = llm.explore > 0 and rng.random() < llm.explore
    return child.genome, "explore" if explore else "full", None


def finished(state: dict, search) -> bool:
    return state["generation"] >= search.config.run.generations or search.budget_left() == 0


def best(state: dict):
    from deap import tools

    if not state["population"]:
        return Genome().to_json(), None
    top = tools.selBest([_from_json(item) for item in state["population"]], 1)[0]
    return top.genome.to_json(), _json_fit(_value(top))


# --------------------------------------------------------------------------- helpers


def _sweep_and_stack(tb: base.Toolbox, search, generation: int) -> list[Genome]:
    """The baseline, every gene alone, and stacks of the best single gene per group that
    beat the baseline (top 2, top 3, ...); the singles are measured here, the stacks are
    returned with them for the caller to measure."""
    singles = [Genome()] + [Genome((g,)) for g in search.alphabet()]
    fits = [fit for fit, in tb.evaluate([Individual(g) for g in singles], generation)]
    baseline = fits[0]
    best_in_group: dict[str, tuple[float, Gene]] = {}
    for genome, fit in zip(singles[1:], fits[1:]):
        gene = genome.genes[0]
        group = gene.group or gene.transform
        if fit < baseline and fit < best_in_group.get(group, (math.inf,))[0]:
            best_in_group[group] = (fit, gene)
    ranked = [gene for _, gene in sorted(best_in_group.values(), key=lambda fg: fg[0])]
    stacks = [Genome(tuple(ranked[:k])) for k in range(2, len(ranked) + 1)]
    return singles + stacks


def _neighbors(best: Genome, count: int, search, rng) -> list[Genome]:
    """Up to ``count`` unseen genomes one step from ``best``: a gene of the alphabet put in
    (replacing its group's gene, if any), a gene taken out, or an integer parameter moved
    to a nearby value (``Param.nearby``: a register budget by 8 or 16). A memetic step:
    greedy's thoroughness near the best, evolution elsewhere."""
    if count <= 0:
        return []
    moves = [_put(best, g) for g in search.alphabet()]
    moves += best.one_gene_fewer()
    for i, g in enumerate(best.genes):
        if not isinstance(g, Gene):  # an LLM patch: no parameters
            continue
        params = dict(g.params)
        for p in transforms.get(g.transform).params:
            if p.choices is not None:
                continue
            for value in p.nearby(int(params[p.name])):
                moved = Gene.make(g.transform, **{**params, p.name: value})
                moves.append(Genome(best.genes[:i] + (moved,) + best.genes[i + 1:]))
    fresh = []
    for genome in moves:
        if genome != best and genome not in fresh and not search.seen(genome):
            fresh.append(genome)
    rng.shuffle(fresh)
    return fresh[:count]


def _put(genome: Genome, gene: Gene) -> Genome:
    """``genome`` with ``gene`` in place of its group's gene (in that position), or appended."""
    for i, g in enumerate(genome.genes):
        if g.group is not None and g.group == gene.group:
            return Genome(genome.genes[:i] + (gene,) + genome.genes[i + 1:])
    return Genome(genome.genes + (gene,))


def _novel(children: list[Individual], search, tb: base.Toolbox, before: list[Genome] = (),
           by_code: list[bool] | None = None) -> list[Individual]:
    """``children``, each one new (``_is_new``: against ``before``, the children ahead of
    it and what was evaluated) or mutated (``tb.mutate``) until it is, in at most
    ``RETRIES`` rounds. Each round looks up the machine code of the children it asks
    about in one batch (``Search.look_up_codes``: ptxas in parallel), then mutates those
    still not new; ``by_code[i]`` false: child i's machine code is not asked about."""
    children = list(children)
    by_code = by_code or [True] * len(children)
    for round_ in range(RETRIES + 1):
        if search.config.evolve.novel_code:
            search.look_up_codes([c.genome for c, b in zip(children, by_code) if b])
        stale = [i for i, c in enumerate(children) if not _is_new(
            c.genome, [*before, *(x.genome for x in children[:i])], search, by_code[i])]
        if not stale or round_ == RETRIES:
            return children
        for i in stale:
            children[i], = tb.mutate(children[i])
    return children


def _is_new(genome: Genome, batch: list[Genome], search, by_code: bool = True) -> bool:
    """Neither in ``batch`` nor evaluated, nor (``by_code`` and ``novel_code``) assembling
    to the machine code of a genome that is."""
    if genome in batch or search.seen(genome):
        return False
    return not (by_code and search.config.evolve.novel_code
                and search.same_code(genome, batch))


def _drawer(search):
    """The gene draw for mutations: from the genes that change this kernel
    (``search.alphabet``), steered by the search's prior where it has one."""
    genes = search.draw_from()
    return gene_drawer(search.prior, search.config.evolve.prior_rate, genes) or (
        lambda rng, names=None: random_gene(rng, names, genes))


def _value(ind: Individual) -> float:
    return ind.fitness.values[0] if ind.fitness.valid else math.inf


def _json_fit(value: float):
    return None if math.isinf(value) else value


def _to_json(ind: Individual) -> dict:
    return {"genome": ind.genome.to_json(), "fitness": _json_fit(_value(ind))}


def _from_json(item: dict) -> Individual:
    fitness = item["fitness"]
    return Individual(Genome.from_json(item["genome"]),
                      math.inf if fitness is None else fitness)
