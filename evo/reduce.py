"""The few genes that matter: a kernel's best genome without the genes its machine code
does not need.

A search keeps whatever genes rode along with the ones that made the speed: relu's best
on an H200 carried ``fast_exp`` (relu has no exp) and a cache hint the compiler undid. A
kernel engineer wants the genes that change the code. ``reduce_genome`` drops genes one at
a time while the genome still assembles to the same machine code (``code_keys``: the
Evaluator's keys of code, registers, shared memory and launch), so the reduced genome is
the same kernel, measured or not, with nothing but the genes that make it.

Algorithm (greedy, last gene first): the keys of every genome one gene shorter than the
current one are asked for at once (one parallel ptxas batch); the last gene whose removal
keeps the key is dropped; repeat until no removal keeps it.

On a GPU (``reduce_by_time``, given the run's measure) the genes left are then dropped
where the time allows: every genome one gene shorter is measured at once (the store
answers those the search measured), the fastest one that is correct and at most
``NOISE`` slower than the code-reduced best loses its gene, and again, until every drop
costs more. The measure is always against the best's own time, so small costs do not add
up. What is left is the genes whose removal costs more than the noise.
"""

from __future__ import annotations

from genomes.genome import Genome

# 0.5 %: over twice the spread of one variant measured in fresh workers (0.03-0.2 %) and
# of events timing (0.26-0.29 %) on H200s (BENCHMARKS.md, "Precision", sessions 4 and 14)
NOISE = 0.005


def reduce_genome(genome: Genome, code_keys) -> tuple[Genome, list]:
    """(reduced genome, genes dropped in the order dropped); ``code_keys(genomes) -> keys``
    (None where ptxas refuses a genome: never the same code)."""
    current = genome.effective()
    dropped = []
    (key,) = code_keys([current])
    if key is None:
        return current, dropped
    while current.genes:
        shorter = current.one_gene_fewer()
        keys = code_keys(shorter)
        same = [i for i, k in enumerate(keys) if k == key]
        if not same:
            break
        i = same[-1]
        dropped.append(current.genes[i])
        current = shorter[i]
    return current, dropped


def reduce_by_time(genome: Genome, measure, noise: float = NOISE) -> tuple[Genome, list, dict]:
    """(genome less the genes whose removal costs at most ``noise`` of its time, those genes
    in the order dropped, {"best": its cycles, "reduced": the reduced one's});
    ``measure(genomes) -> Measurements``. Unchanged where it does not measure valid."""
    (m,) = measure([genome])
    if not (m.valid and m.cycles):
        return genome, [], {}
    limit, current, cycles, dropped = m.cycles * (1 + noise), genome, m.cycles, []
    while current.genes:
        shorter = current.one_gene_fewer()
        fits = [(r.cycles, i) for i, r in enumerate(measure(shorter))
                if r.valid and r.cycles and r.cycles <= limit]
        if not fits:
            break
        cycles, i = min(fits)
        dropped.append(current.genes[i])
        current = shorter[i]
    return current, dropped, {"best": m.cycles, "reduced": cycles}


def reduced_entry(genome: Genome, code_keys, measure=None, noise: float = NOISE) -> dict:
    """What the checkpoint's ``reduced`` section keeps for a kernel: the best genome it was
    made from, the reduced genome (JSON and text) and the genes dropped (text); where
    ``measure`` is given, also reduced by time: ``within_noise``, the genes dropped for
    costing at most ``noise``, and ``cycles``."""
    reduced, _ = reduce_genome(genome, code_keys)
    timed = None
    if measure is not None and reduced.genes:
        reduced, by_time, cycles = reduce_by_time(reduced, measure, noise)
        timed = {"within_noise": [str(g) for g in by_time], "noise": noise, "cycles": cycles}
    kept = [str(g) for g in reduced.genes]
    dropped = []  # the original's genes the reduced one lacks (overridden ones too), in order
    for gene in map(str, genome.genes):
        if gene in kept:
            kept.remove(gene)
        else:
            dropped.append(gene)
    return {"from": genome.to_json(), "genome": reduced.to_json(), "text": str(reduced),
            "dropped": dropped, **(timed or {})}
