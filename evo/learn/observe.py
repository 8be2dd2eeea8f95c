"""Which genome gave which result: written beside each search's measurements, read back.

The store keys measurements by machine code (many genomes, one row), so what a gene did
is not in its rows. Each search therefore links every genome it evaluates to the PTX it
gave (``Store.link_genomes``: inline genome text -> PTX hash; the baseline is ``""``), and
:func:`observations` follows genome -> PTX -> code -> measurement back.

Stores written before those links existed still answer for single genes: where a kernel
has fewer than ``PROBE_BELOW`` linked genomes and is in the suite, :func:`probe_singles`
applies every gene of the alphabet to its PTX and looks each PTX hash up (a sweep, or
greedy's first step, measured exactly those).
"""

from __future__ import annotations

PROBE_BELOW = 5


def genome_text(genome) -> str | None:
    """The inline text a genome is linked under: its effective genes, ``""`` for the
    baseline, None for a genome with an LLM patch (not readable inline)."""
    from genomes.genome import Gene

    genes = genome.effective().genes
    if any(not isinstance(g, Gene) for g in genes):
        return None
    return ",".join(str(g) for g in genes)


def link_results(evaluator, kernel: str, genomes: list, results: list) -> None:
    """Link each evaluated genome to its PTX in the evaluator's store (where the backend
    writes the store: a replay answers from someone else's rows)."""
    if not evaluator.backend.writes_store:
        return
    pairs = []
    for genome, m in zip(genomes, results):
        text = genome_text(genome)
        if text is not None and m.ptx_hash:
            pairs.append((text, m.ptx_hash))
    evaluator.store.link_genomes(evaluator.backend.device, kernel, pairs)


def observations(store, device: str | None = None, probe: bool = True) -> dict:
    """What one store knows, per (device, kernel): ``{"baseline": cycles or None,
    "results": [(genome text, valid, cycles), ...]}`` (the baseline among them as "")."""
    out: dict[tuple[str, str], dict] = {}
    for dev, kernel, text, valid, cycles in store.genome_results(device):
        entry = out.setdefault((dev, kernel), {"baseline": None, "results": []})
        entry["results"].append((text, bool(valid), cycles))
        if text == "" and valid:
            entry["baseline"] = cycles
    if probe:
        for dev, kernel, _, _ in store.summary():
            if (device is None or dev == device) and (
                    len(out.get((dev, kernel), {}).get("results", ())) < PROBE_BELOW):
                found = probe_singles(store, dev, kernel)
                if found:
                    entry = out.setdefault((dev, kernel), {"baseline": None, "results": []})
                    have = {r[0] for r in entry["results"]}
                    entry["results"] += [r for r in found["results"] if r[0] not in have]
                    entry["baseline"] = entry["baseline"] or found["baseline"]
    return out


def probe_singles(store, device: str, kernel: str) -> dict | None:
    """The baseline and every single gene of the alphabet, looked up by PTX hash in
    ``store`` (no measuring); None when the kernel is not in the suite or its baseline is
    not in the store."""
    from genomes import ptx
    from genomes.errors import EvoError
    from genomes.genome import Genome, apply_genome
    from genomes.variation import gene_alphabet
    from harness.compile import ptx_hash
    from harness.kernels.suite import find_kernel

    try:
        spec = find_kernel(kernel)
    except EvoError:
        return None
    text = spec.ptx_text()
    base = store.lookup_ptx(device, kernel, ptx_hash(text))
    if base is None or not base.valid:
        return None
    module = ptx.parse(text, str(spec.ptx_path))
    results = [("", True, base.cycles)]
    for gene in gene_alphabet():
        m = store.lookup_ptx(device, kernel, ptx_hash(apply_genome(module, Genome((gene,))).ptx))
        if m is not None:
            results.append((str(gene), m.valid, m.cycles))
    return {"baseline": base.cycles, "results": results}
