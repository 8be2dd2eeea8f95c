"""A kernel's best genome checked harder before it is written to best/ (``evo run`` on a
GPU): ``harness.gpu.finalist``'s checks, and the next best where it fails."""

from __future__ import annotations

import json

from genomes.genome import Genome, apply_genome
from harness.kernels.spec import KernelSpec

from evo.checkpoint import KernelEntry

FINALIST_TRIES = 3  # the best and at most two runners-up go under compute-sanitizer


def check_best(spec: KernelSpec, result, saved: KernelEntry, on_events,
               turn=None, devices: tuple[int, ...] = ()) -> float:
    """The best genome checked harder (``harness.gpu.finalist``: compute-sanitizer memcheck
    and racecheck, a static .nc check, two runs bitwise identical) before it is written
    to best/. A failure demotes it: the next best valid genome is checked, and so on (at
    most ``FINALIST_TRIES``; the baseline needs no check). A check that cannot run here
    keeps the best and says so. The outcome is kept in the kernel's checkpoint entry
    (``finalist``): report.md quotes it, ``evo show`` and a resume use the kept genome.
    ``turn``: where given, the GPU is taken through it, one of ``devices``
    (``harness.gpu.finalist.check_finalist``; None: the default GPU). Returns the seconds
    a GPU was held."""
    from harness.gpu.finalist import check_finalist

    held = 0.0
    done = saved.finalist
    if done is None:
        ranked = sorted(((s["cycles"], key) for key, s in saved.known.items()
                         if s.get("valid") and s.get("cycles") is not None), key=lambda t: t[0])
        first = Genome.from_json(result.best_genome).effective().dumps()
        order = [first] + [key for _, key in ranked if key != first]
        done = {"demoted": [], "kept": Genome().dumps(),
                "reason": f"failed by the best {FINALIST_TRIES}: the baseline is kept"}
        for key in order[:FINALIST_TRIES]:
            genome = Genome.from_json(json.loads(key))
            if not genome.genes:
                done.update(kept=key, reason="the baseline (no check needed)")
                break
            applied = apply_genome(spec.ptx_text(), genome, spec.launch)
            check = check_finalist(spec, applied.ptx, applied.launch
                                   if applied.launch != spec.launch else None, turn=turn,
                                   devices=devices)
            held += check.details.get("gpu_held_s", 0.0)
            if check.ok or not check.ran:
                done.update(kept=key, reason=check.reason)
                break
            done["demoted"].append({"genome": str(genome), "reason": check.reason})
        saved.finalist = done
        on_events([{"type": "finalist", "kernel": spec.name, **done}])
    kept = json.loads(done["kept"])
    if Genome.from_json(kept) != Genome.from_json(result.best_genome).effective():
        result.best_genome = kept
        result.best = saved.known.get(done["kept"], result.best)
    return held
