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
keeps the key is dropped; repeat until no removal keeps it. A gene whose removal changes
the code stays, even where the change is not measurable: telling those apart needs the
GPU (a drop kept when the time stays within noise), which this does not do.
"""

from __future__ import annotations

from genomes.genome import Genome


def reduce_genome(genome: Genome, code_keys) -> tuple[Genome, list]:
    """(reduced genome, genes dropped in the order dropped); ``code_keys(genomes) -> keys``
    (None where ptxas refuses a genome: never the same code)."""
    current = genome.effective()
    dropped = []
    (key,) = code_keys([current])
    if key is None:
        return current, dropped
    while current.genes:
        shorter = [Genome(current.genes[:i] + current.genes[i + 1:])
                   for i in range(len(current.genes))]
        keys = code_keys(shorter)
        same = [i for i, k in enumerate(keys) if k == key]
        if not same:
            break
        i = same[-1]
        dropped.append(current.genes[i])
        current = shorter[i]
    return current, dropped


def reduced_entry(genome: Genome, code_keys) -> dict:
    """What the checkpoint's ``reduced`` section keeps for a kernel: the best genome it was
    made from, the reduced genome (JSON and text) and the genes dropped (text)."""
    reduced, _ = reduce_genome(genome, code_keys)
    kept = [str(g) for g in reduced.genes]
    dropped = []  # the original's genes the reduced one lacks (overridden ones too), in order
    for gene in map(str, genome.genes):
        if gene in kept:
            kept.remove(gene)
        else:
            dropped.append(gene)
    return {"from": genome.to_json(), "genome": reduced.to_json(), "text": str(reduced),
            "dropped": dropped}
