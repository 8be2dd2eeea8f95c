"""How evolve uses a prior (``evo.learn.priors.prior_for``): first-generation seeds and a
steered gene draw for mutation.

* :func:`seed_genomes`: the prior's seeds in its order (the model's predicted-best stacks
  and the nearest kernels' best genomes, in turn), skipping genomes already evaluated;
* :func:`gene_drawer`: the gene a mutation inserts. With probability ``rate`` it comes
  from the prior: a gene with a positive expected effect, drawn with probability in
  proportion to that effect; otherwise (and always when no gene is expected to help)
  uniformly, as without priors, so the search still explores. Each draw uses the
  search's seeded RNG, one ``random()`` for the choice and one for the gene, so a run
  with priors is as reproducible (and as resumable) as one without.
* :func:`untried_genes`: genes that change this kernel but that no kernel of the prior
  was ever measured with (a transform newer than the measurements: ``warp_tail`` was
  never tried by the H100 searches the shipped priors come from, and a prior that knows
  only what helped elsewhere would starve it). They get the benefit of the doubt: the
  steered draw weighs each like the mean favoured gene, and evolve's first generation
  tries them on top of the prior's first seed (``seeds_with_untried``; not when
  more than ``UNTRIED_SEED_MAX`` are untried: then the prior is thin, not the genes new).
"""

from __future__ import annotations

from genomes.errors import EvoError
from genomes.genome import Gene, Genome, parse_inline
from genomes.variation import one_per_group, random_gene, seed_order

from evo.learn.priors import MIN_EFFECT, gene_key

UNTRIED_SEED_MAX = 5  # untried genes (one a group) that generation 1 puts on the first seed


def seed_genomes(prior: dict | None, count: int, seen) -> list[Genome]:
    """Up to ``count`` seed genomes of ``prior`` for which ``seen(genome)`` is false,
    distinct, in the prior's order (texts that no longer parse are skipped)."""
    out: list[Genome] = []
    for text in (prior or {}).get("seeds", []):
        if len(out) >= count:
            break
        try:
            genome = parse_inline(text).effective()
        except EvoError:
            continue
        if genome.genes and genome not in out and not seen(genome):
            out.append(genome)
    return out


def favoured_genes(prior: dict | None) -> tuple[list, list[float]]:
    """The genes with a positive expected effect (at least ``MIN_EFFECT``) and their
    weights (the effect), in key order."""
    genes, weights = [], []
    for key, effect in sorted((prior or {}).get("genes", {}).items()):
        if effect >= MIN_EFFECT:
            try:
                genes.append(parse_inline(key).genes[0])
            except EvoError:
                continue
            weights.append(effect)
    return genes, weights


def untried_genes(prior: dict | None, alphabet: list | None) -> list:
    """The genes of ``alphabet`` (those that change the kernel) that no kernel of the
    prior has evidence on, in alphabet order; none without a prior or an alphabet."""
    if not prior or not alphabet:
        return []
    evidence = prior.get("evidence", {})
    return [g for g in alphabet if gene_key(g) not in evidence]


def seeds_with_untried(prior: dict | None, alphabet: list | None,
                       seeds: list[Genome]) -> list[Genome]:
    """The genomes with which generation 1 tries the untried genes: the first seed (or
    nothing) with them on top (one gene a group, in ``seed_order``, each with a gene that
    enables it where the seed has none: ``coarsen_repeat`` applies after ``fast_sincos``
    only); where some of them change the launch, those alone (with the first seed's genes
    a new launch may not apply, or its gain hide behind theirs) and the others without
    them (a coarsened launch hides what they do: Llama's rotary kernel of 8
    elements a thread, coarsened by 4, ran 1.6x slower than with ``fast_sincos,
    addr_rebase`` alone); none when none, or more than ``UNTRIED_SEED_MAX``, are
    untried."""
    from genomes import transforms

    untried = one_per_group(untried_genes(prior, alphabet))  # one of coarsen_tile's ks
    if not untried or len(untried) > UNTRIED_SEED_MAX:
        return []
    top = seeds[0].genes if seeds else ()
    out = [_seed((*top, *untried))]
    launch = [g for g in untried if transforms.get(g.transform).edits_launch]
    if launch:
        out.append(_seed(launch))
    if launch and len(launch) < len(untried):
        out.append(_seed((*top, *(g for g in untried if g not in launch))))
    return list(dict.fromkeys(out))


def _seed(genes) -> Genome:
    """``genes`` as one seed: each gene whose transform needs another first
    (``enabled_by``) gets the first of those where none is among them, all in
    ``seed_order``, one gene a group."""
    from genomes import transforms

    genes = list(genes)
    for gene in list(genes):
        need = transforms.get(gene.transform).enabled_by
        if need and not {g.transform for g in genes} & set(need):
            genes.append(Gene.make(need[0]))
    return Genome(tuple(seed_order(genes))).effective()


def in_last_places(seeds: list[Genome], untried: list[Genome], places: int) -> list[Genome]:
    """``seeds`` with the untried-gene seeds (``seeds_with_untried``, those new to the
    search) in its last places: at most ``places - 1`` of them (one at least), the first
    seeds kept in front."""
    untried = untried[:max(places - 1, 1)]
    return seeds[:max(places - len(untried), 0)] + untried if untried else seeds


def gene_drawer(prior: dict | None, rate: float, alphabet: list | None = None):
    """A ``draw(rng, names)`` for ``genomes.variation.mutate`` (see the module docstring),
    or None (mutate's uniform draw) when there is no prior or ``rate`` is 0. The uniform
    part draws from ``alphabet`` where given (the genes that change the kernel)."""
    genes, weights = favoured_genes(prior)
    untried = untried_genes(prior, alphabet)
    if untried:
        doubt = sum(weights) / len(weights) if weights else 1.0
        genes, weights = genes + untried, weights + [doubt] * len(untried)
    if not genes or rate <= 0:
        return None

    def draw(rng, names=None):
        if rng.random() < rate:
            return rng.choices(genes, weights)[0]
        return random_gene(rng, names, alphabet)

    return draw
