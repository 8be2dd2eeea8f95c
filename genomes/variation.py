"""Random genes and genomes, drawn from the transform library with a caller's RNG.

Every draw takes an explicit ``random.Random`` so that a run's seed decides everything.
"""

from __future__ import annotations

import itertools
import random

from genomes import transforms
from genomes.genome import Gene, Genome


def random_gene(rng: random.Random, names: list[str] | None = None,
                genes: list[Gene] | None = None) -> Gene:
    """A gene of a uniformly chosen transform with uniformly drawn parameters, or, given
    ``genes`` (e.g. the genes that change this kernel, ``applicable``), one of those."""
    if genes:
        return rng.choice(genes)
    table = transforms.registry()
    name = rng.choice(names or sorted(table))
    params = {p.name: p.sample(rng) for p in table[name].params}
    return Gene.make(name, **params)


def random_genome(rng: random.Random, min_len: int = 1, max_len: int = 6,
                  names: list[str] | None = None, genes: list[Gene] | None = None) -> Genome:
    """A genome of ``min_len..max_len`` random genes (``random_gene``)."""
    return Genome(tuple(random_gene(rng, names, genes)
                        for _ in range(rng.randint(min_len, max_len))))


# --------------------------------------------------------------------------- operators
# Each operator takes genomes and the caller's RNG and returns new genomes; conflict
# groups are respected by keeping only the genes that take effect (``Genome.effective``),
# so no child carries two register budgets or two load policies.


def mutate(genome: Genome, rng: random.Random, max_len: int = 8,
           names: list[str] | None = None, draw=None) -> tuple[Genome, str]:
    """One random edit: insert, delete, replace, swap, or re-parameterize a gene.

    ``draw(rng, names)`` picks the gene an insert or replace puts in (default
    :func:`random_gene`; a search steered by priors passes its own).
    Returns the child and the name of the edit (for the event log).
    """
    draw = draw or random_gene
    genes = list(genome.genes)
    ops = ["insert"] if not genes else ["insert", "delete", "replace", "reparam"]
    if len(genes) >= 2:
        ops.append("swap")
    if len(genes) >= max_len:
        ops.remove("insert")
    op = rng.choice(ops)
    if op == "insert":
        genes.insert(rng.randint(0, len(genes)), draw(rng, names))
    elif op == "delete":
        genes.pop(rng.randrange(len(genes)))
    elif op == "replace":
        genes[rng.randrange(len(genes))] = draw(rng, names)
    elif op == "swap":
        i, j = rng.sample(range(len(genes)), 2)
        genes[i], genes[j] = genes[j], genes[i]
    else:
        i = rng.randrange(len(genes))
        genes[i] = reparameterize(genes[i], rng)
    return Genome(tuple(genes)).effective(), op


def reparameterize(gene: Gene, rng: random.Random) -> Gene:
    """The same transform with one parameter redrawn (an integer range moves by one of its
    ``Param.steps``, kept inside the range). A patch gene has no parameters and comes back
    unchanged."""
    if not isinstance(gene, Gene):
        return gene
    t = transforms.get(gene.transform)
    if not t.params:
        return gene
    p = rng.choice(t.params)
    current = dict(gene.params)
    if p.choices is None:  # e.g. maxnreg: a nearby budget more often than a random one
        step = rng.choice(p.steps())
        value = min(p.high, max(p.low, int(current[p.name]) + step))
    else:
        value = p.sample(rng)
    return Gene.make(gene.transform, **{**current, p.name: value})


def crossover_one_point(a: Genome, b: Genome, rng: random.Random) -> tuple[Genome, Genome]:
    """Cut each parent once and exchange tails (cuts chosen per parent, so lengths vary)."""
    i = rng.randint(0, len(a.genes))
    j = rng.randint(0, len(b.genes))
    c1 = Genome(a.genes[:i] + b.genes[j:]).effective()
    c2 = Genome(b.genes[:j] + a.genes[i:]).effective()
    return c1, c2


def crossover_uniform(a: Genome, b: Genome, rng: random.Random,
                      swap_prob: float = 0.5) -> tuple[Genome, Genome]:
    """Exchange genes position by position with probability ``swap_prob``."""
    g1, g2 = list(a.genes), list(b.genes)
    for i in range(min(len(g1), len(g2))):
        if rng.random() < swap_prob:
            g1[i], g2[i] = g2[i], g1[i]
    return Genome(tuple(g1)).effective(), Genome(tuple(g2)).effective()


MAXNREG_LADDER = transforms.get("maxnreg").param("n").values()
"""The register budgets of the alphabet (maxnreg's own ``Param.ladder``)."""


CHRONOS_TRANSFORMS = ("cache_ld", "cache_st", "maxnreg", "prefetch", "reorder", "split_ld",
                      "vec_ld", "vec_st")
"""The transforms of the Chronos study (the 20 genes of its table): the oracle's space, so
that its ceiling stays comparable as the library grows."""


def gene_alphabet(int_values: tuple[int, ...] | None = None,
                  names: tuple[str, ...] | None = None) -> list[Gene]:
    """Every transform (of ``names``, default all) with every parameter value: choices,
    and integer ranges at their own ``Param.values`` (or at ``int_values``, where given,
    for every integer parameter: a test's wider sample)."""
    genes = []
    for t in transforms.registry().values():
        if names is not None and t.name not in names:
            continue
        axes = [p.values() if p.choices is not None or int_values is None else int_values
                for p in t.params]
        for combo in itertools.product(*axes):
            genes.append(Gene.make(t.name, **dict(zip((p.name for p in t.params), combo))))
    return genes


def group_combinations(alphabet: list[Gene] | None = None):
    """Every genome with at most one gene per conflict group (the oracle's search space),
    in a fixed order: groups in the alphabet's order, the empty choice first."""
    alphabet = alphabet if alphabet is not None else gene_alphabet()
    groups: dict[str, list] = {}
    for g in alphabet:
        groups.setdefault(g.group or g.transform, [None]).append(g)
    for combo in itertools.product(*groups.values()):
        yield Genome(tuple(g for g in combo if g is not None))


def changes_kernel(module, gene: Gene, launch=None) -> bool:
    """Whether ``gene`` changes the kernel (its PTX or launch) applied alone or, for a
    transform with ``enabled_by``, applied after one of those genes. A transform with a
    ``precheck`` is asked that instead of applied (its proofs cost seconds a gene): the
    answer may then be yes for a gene whose proof would find nothing to change."""
    from genomes.genome import apply_genome
    from genomes.ptx import parse

    t = transforms.get(gene.transform)
    if t.precheck is not None and launch is not None:
        if t.shape_refusal(module, dict(gene.params), launch) is None:
            return True
        for name in t.enabled_by:
            after = apply_genome(module, Genome((Gene.make(name),)), launch)
            if after.changed and t.shape_refusal(parse(after.ptx), dict(gene.params),
                                                 launch) is None:
                return True
        return False
    if apply_genome(module, Genome((gene,)), launch).changed:
        return True
    for name in t.enabled_by:
        after = apply_genome(module, Genome((Gene.make(name), gene)), launch)
        if after.outcomes[-1].status == "applied":
            return True
    return False


def seed_order(genes) -> list[Gene]:
    """``genes`` in an order where each can apply, for a seed that puts several new genes
    together: a gene whose transform enables another of them first (``fast_sincos``
    before ``coarsen_tile``), then the rest, then those that pin the launch they leave
    (``coarsen_tile``), then those that read it (a proof made for that launch); stable
    otherwise."""
    names = {g.transform for g in genes}

    def rank(gene: Gene) -> int:
        t = transforms.get(gene.transform)
        if any(gene.transform in transforms.get(n).enabled_by for n in names):
            return 0
        return 3 if t.reads_launch else 2 if t.pins_launch else 1

    return sorted(genes, key=rank)


def one_per_group(genes) -> list[Gene]:
    """The first of ``genes`` in each conflict group, or the transform's default gene where
    it is among them (a group's genes replace each other: one is all a seed can use)."""
    chosen: dict[str, Gene] = {}
    for gene in genes:
        t = transforms.get(gene.transform)
        group = t.group or t.name
        default = Gene.make(t.name, **{p.name: p.default for p in t.params}) == gene
        if group not in chosen or default:
            chosen[group] = gene
    return list(chosen.values())


def applicable(alphabet: list[Gene], baseline, launch=None) -> list[Gene]:
    """The genes of ``alphabet`` that change the baseline (its PTX or its launch) when
    applied alone, or after a gene that enables them (``changes_kernel``): the others are
    no-ops on this kernel, and a search that draws them spends trials on the baseline
    again. ``baseline`` is PTX text or a parsed module."""
    from genomes.ptx import parse_shared

    module = parse_shared(baseline) if isinstance(baseline, str) else baseline  # copied by each apply
    return [gene for gene in alphabet if changes_kernel(module, gene, launch)]
