"""Random genes and genomes, drawn from the transform library with a caller's RNG.

Every draw takes an explicit ``random.Random`` so that a run's seed decides everything.
"""

from __future__ import annotations

import itertools
import random

from genomes import transforms
from genomes.genome import Gene, Genome


def random_gene(rng: random.Random, names: list[str] | None = None) -> Gene:
    """A gene of a uniformly chosen transform with uniformly drawn parameters."""
    table = transforms.registry()
    name = rng.choice(names or sorted(table))
    params = {p.name: p.sample(rng) for p in table[name].params}
    return Gene.make(name, **params)


def random_genome(rng: random.Random, min_len: int = 1, max_len: int = 6,
                  names: list[str] | None = None) -> Genome:
    """A genome of ``min_len..max_len`` random genes."""
    return Genome(tuple(random_gene(rng, names) for _ in range(rng.randint(min_len, max_len))))


# --------------------------------------------------------------------------- operators
# Each operator takes genomes and the caller's RNG and returns new genomes; conflict
# groups are respected by keeping only the genes that take effect (``Genome.effective``),
# so no child carries two register budgets or two load policies.


def mutate(genome: Genome, rng: random.Random, max_len: int = 8,
           names: list[str] | None = None) -> tuple[Genome, str]:
    """One random edit: insert, delete, replace, swap, or re-parameterize a gene.

    Returns the child and the name of the edit (for the event log).
    """
    genes = list(genome.genes)
    ops = ["insert"] if not genes else ["insert", "delete", "replace", "reparam"]
    if len(genes) >= 2:
        ops.append("swap")
    if len(genes) >= max_len:
        ops.remove("insert")
    op = rng.choice(ops)
    if op == "insert":
        genes.insert(rng.randint(0, len(genes)), random_gene(rng, names))
    elif op == "delete":
        genes.pop(rng.randrange(len(genes)))
    elif op == "replace":
        genes[rng.randrange(len(genes))] = random_gene(rng, names)
    elif op == "swap":
        i, j = rng.sample(range(len(genes)), 2)
        genes[i], genes[j] = genes[j], genes[i]
    else:
        i = rng.randrange(len(genes))
        genes[i] = reparameterize(genes[i], rng)
    return Genome(tuple(genes)).effective(), op


def reparameterize(gene: Gene, rng: random.Random) -> Gene:
    """The same transform with one parameter redrawn (integer ranges move locally).
    A patch gene has no parameters and comes back unchanged."""
    if not isinstance(gene, Gene):
        return gene
    t = transforms.get(gene.transform)
    if not t.params:
        return gene
    p = rng.choice(t.params)
    current = dict(gene.params)
    if p.choices is None:  # e.g. maxnreg: a nearby budget more often than a random one
        step = rng.choice([-32, -16, -8, 8, 16, 32])
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


MAXNREG_LADDER = (32, 64, 96, 128, 160, 192, 224, 255)


def gene_alphabet(maxnreg_values: tuple[int, ...] = MAXNREG_LADDER) -> list[Gene]:
    """Every transform with every parameter value (integer params at the given ladder)."""
    genes = []
    for t in transforms.registry().values():
        axes = [p.choices if p.choices is not None else maxnreg_values for p in t.params]
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
