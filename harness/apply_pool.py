"""What the Evaluator's apply pool runs in its processes (``harness.evaluate``): genomes
applied to a spec's baseline, with the clock64 twin where the backend times with one, and
each gene's no-op test. Each process parses a spec's baseline once, read from the spec's
PTX file as ``KernelSpec.ptx_text`` reads it, so a task carries a path, not the text.
The static gate (``harness.hidden_state``) runs there too, against the same baseline.
Launch-wide proofs (``genomes.proofs``: seconds each on a large launch) are kept in the
tool cache's folder, so that each is made once for all the pool's processes and runs.
"""

from __future__ import annotations

import functools

from genomes import proofs
from genomes import ptx as ptx_model
from genomes.genome import Applied, Genome, apply_genome
from genomes.launch import Launch
from harness import tool_cache
from harness.hidden_state import hidden_state
from harness.kernels.spec import baseline_ptx

proofs.use_folder(tool_cache.folder)  # this process's, and each pool process's (it imports this)

def apply_from_file(ptx_path: str, entry: str, genome_json: dict, clock_entry: str | None,
                     launch_json: dict | None = None) -> tuple[Applied, str | None]:
    """Apply a genome to the spec's baseline; with
    ``clock_entry``, also the result with its clock64 twin (``with_clock_twin``; None if
    that fails: the backend then instruments it itself and reports why)."""
    launch = Launch.from_json(launch_json) if launch_json is not None else None
    return with_twin(apply_genome(_baseline(ptx_path, entry), Genome.from_json(genome_json),
                                  launch), clock_entry)


def genes_changing(ptx_path: str, entry: str, genes: list[str], launch_json: dict) -> list[bool]:
    """Whether each gene (inline text) changes the baseline alone (its PTX or launch), or
    after a gene that enables it (``genomes.variation.changes_kernel``)."""
    from genomes.genome import parse_inline
    from genomes.variation import changes_kernel

    module, launch = _baseline(ptx_path, entry), Launch.from_json(launch_json)
    return [changes_kernel(module, parse_inline(g).genes[0], launch) for g in genes]


def hidden_state_of(variant_ptx: str, ptx_path: str, entry: str) -> str | None:
    """The static gate (``harness.hidden_state``) of a variant against the spec's baseline."""
    return hidden_state(variant_ptx, _baseline_text(ptx_path, entry))


def _baseline(ptx_path: str, entry: str) -> ptx_model.Module:
    """The spec's baseline, parsed once per pool process (``parse_shared``: read only,
    apply_genome copies it)."""
    return ptx_model.parse_shared(_baseline_text(ptx_path, entry), ptx_path)


@functools.lru_cache(maxsize=64)
def _baseline_text(ptx_path: str, entry: str) -> str:
    """The spec's baseline as KernelSpec.ptx_text reads it, read once per pool process."""
    return baseline_ptx(ptx_path, entry)


def with_twin(applied: Applied, entry: str | None) -> tuple[Applied, str | None]:
    """``applied`` and, for ``entry``, its PTX with the clock64 twin of that entry (None
    without an entry, or where instrumenting fails: the backend then instruments the
    variant itself and reports why)."""
    from harness.gpu.instrument import with_clock_twin

    if entry is None:
        return applied, None
    try:
        return applied, with_clock_twin(applied.ptx, entry)
    except Exception:
        return applied, None
