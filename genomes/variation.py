"""Random genes and genomes, drawn from the transform library with a caller's RNG.

Every draw takes an explicit ``random.Random`` so that a run's seed decides everything.
"""

from __future__ import annotations

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
