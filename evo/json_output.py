"""``--json``: one JSON document per command, the same facts its text output gives.

Each ``*_doc`` function builds the document from what the command already has; ``emit``
prints it. Cycle figures from the static backend carry ``"static": true`` and a ``note``
saying they are estimates, never measurements, as the text output does.
"""

from __future__ import annotations

import json
import sys

from evo import exit_codes
from evo.checkpoint import REDUCED


def emit(doc) -> int:
    """Print ``doc`` as one JSON document on stdout; success, for ``return emit(...)``."""
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return exit_codes.OK


def static_fields(static: bool) -> dict:
    """The label every static-backend figure carries (the words of evo.report's text)."""
    from evo.report import STATIC  # imported here: it pulls in the search (slow to import)

    return {"static": static, "note": STATIC if static else None}


def transforms_doc() -> dict:
    from genomes import transforms

    return {
        "transforms": [
            {"name": t.name, "group": t.group, "summary": t.summary,
             "params": [{"name": p.name, "default": p.default,
                         "choices": list(p.choices) if p.choices is not None else None,
                         "low": p.low, "high": p.high} for p in t.params]}
            for t in transforms.registry().values()],
        "aliases": {a: {"transform": t, "params": dict(p)}
                    for a, (t, p) in sorted(transforms.ALIASES.items())}}


def kernels_doc() -> dict:
    from harness.kernels.suite import list_kernels

    return {"kernels": [{"name": k.name, "grid": list(k.grid), "block": list(k.block),
                         "timer": k.timing, "description": k.description}
                        for k in list_kernels()]}


def compile_doc(source: str, result) -> dict:
    """ptxas's report for ``evo compile`` (``ok`` false and ``error`` when it failed)."""
    return {"kernel": source, "arch": result.arch, "ok": result.ok, "error": result.error,
            "registers": result.registers, "spill_stores": result.spill_stores,
            "spill_loads": result.spill_loads, "stack_frame": result.stack_frame,
            "shared_mem": result.shared_mem,
            "cubin_bytes": len(result.cubin) if result.cubin else None,
            "ptxas_seconds": result.seconds}


def measure_doc(spec, genome, m, base, backend, store_path, static: bool) -> dict:
    """``evo measure``: the variant, its baseline and the speedup. On the static backend
    ``valid`` is null: no GPU ran the kernel, so its output was not checked."""
    speedup = (base.cycles / m.cycles if m.valid and base.valid and m.cycles and base.cycles
               else None)
    return {
        "kernel": spec.name, "genome": genome.to_json(), "genome_text": str(genome),
        "genes": m.notes.get("genes", []), "backend": backend.describe(),
        "device": m.device or backend.device, "timer": m.timer or None,
        "variant": _measurement(m), "baseline": _measurement(base),
        "valid": None if static and m.valid else m.valid,
        "checked": not static, "reason": m.reason,
        "speedup": speedup, "store": str(store_path), "cached": m.cached,
        **static_fields(static)}


def _measurement(m) -> dict:
    return {"valid": m.valid, "reason": m.reason, "cycles": m.cycles, "p10": m.p10,
            "p90": m.p90, "n": m.n, "timer": m.timer, "registers": m.registers,
            "spill_stores": m.spill_stores or 0, "spill_loads": m.spill_loads or 0,
            "flags": list(m.flags), "label": m.label()}


def store_stats_doc(path, rows) -> dict:
    """``evo store stats``: rows per device and kernel; the static device's are estimates."""
    from harness.store import STATIC_DEVICE

    return {"store": str(path),
            "rows": [{"device": d, "kernel": k, "measurements": n, "valid": v or 0,
                      "static": d == STATIC_DEVICE} for d, k, n, v in rows]}


def show_doc(rundir, strategy: str, results, llm: dict | None) -> dict:
    """``evo show``: a run's kernels as the table gives them, with the raw figures."""
    from genomes.genome import Genome

    from evo import report

    kernels = []
    checkpoint = rundir.read_checkpoint() if rundir.has_checkpoint() else {}
    for r in results:
        static = report.is_static(r)
        reduced = checkpoint.get(REDUCED, {}).get(r.kernel)
        kernels.append({
            "kernel": r.kernel, "baseline": _checked(r.baseline, static),
            "best": _checked(r.best, static),
            "baseline_cycles": _valid_cycles(r.baseline), "best_cycles": _valid_cycles(r.best),
            "speedup": report.speedup(r), "best_genome": r.best_genome,
            "best_genome_text": str(Genome.from_json(r.best_genome)),
            # the best without the genes its machine code does not need (evo.reduce)
            "reduced_genome_text": reduced["text"] if reduced and Genome.from_json(
                reduced["from"]) == Genome.from_json(r.best_genome) else None,
            "launch": (r.best or {}).get("launch"), "evals": r.evals,
            "generations": r.generations, "measured_again": r.confirmed,
            "timer": "static" if static else (r.best or {}).get("timer", ""),
            **static_fields(static)})
    static = any(report.is_static(r) for r in results)
    # The LLM's counters; its "state" (draw counts, answer digests, history) is what a
    # resume needs, not what a reader wants.
    llm = {k: v for k, v in llm.items() if k != "state"} if llm else llm
    return {"run": str(rundir.path), "strategy": strategy, "kernels": kernels, "llm": llm,
            **static_fields(static)}


def _checked(summary: dict | None, static: bool) -> dict | None:
    """A result summary as JSON gives it: ``valid`` null where a static estimate assembled
    (its output was never checked; ``checked`` says so)."""
    if not summary:
        return summary
    if static and summary.get("valid"):
        return {**summary, "valid": None, "checked": False}
    return {**summary, "checked": not static}


def _valid_cycles(summary: dict | None) -> float | None:
    if not summary or not summary.get("valid"):
        return None
    return summary.get("cycles")
