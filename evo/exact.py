"""The baseline's results bit for bit where they cost (almost) nothing: a kernel's best
genome is replaced by one whose outputs equal the baseline's when that one is at most
``[run] exact_slack`` slower.

Why: genes that change results in the last bits (``Transform.changes_results``: fast math)
pass the gate within the kernel's tolerance, and a search keeps them wherever they ride
along, paying or not. Inside a model those bits travel through every layer after it. Where
they buy no time, a user would rather have the baseline's bits; where they do, the gain
stays and report.md says the kernel rounds differently. Measured (resnet50 from
torchvision, random weights, bf16, batch 64, H200, ``evo.model.roundtrip --top 6``): three
of six batch-norm kernels' bests rounded differently; their best exact alternatives were
21.5 %, 3.6 % and 1.8 % slower (Inductor recomputes 1/sqrt(var + eps) for every element
with IEEE sqrt and division, which fast_rsqrt makes cheap), so all three stayed; the
logits moved by at most 0.5 where torch.compile's own are 1.5 from eager's.

How: the candidates are the genomes the search measured whose outputs equalled the
baseline's on every check (valid, largest relative error 0: the GPU gate's figure) and
the best genome without its result-changing genes, its "exact twin" (measured once,
where the search did not). The fastest candidate replaces the best where its cycles are
at most (1 + slack) times the best's. The choice is kept in the kernel's checkpoint entry
(``exact``), so a resume measures nothing again; the finalist check runs on what is kept.
"""

from __future__ import annotations

import json

from genomes import transforms
from genomes.genome import Genome


def exact_twin(genome: Genome) -> Genome:
    """``genome`` without the genes whose transform may change results."""
    return Genome(tuple(g for g in genome.genes
                        if not transforms.get(g.transform).changes_results)).effective()


def is_exact(summary: dict | None) -> bool:
    """A valid measurement whose outputs equalled the baseline's on every check."""
    return bool(summary and summary.get("valid") and summary.get("cycles") is not None
                and not summary.get("max_rel_err"))


def choose(best_key: str, best: dict, candidates: dict[str, dict], slack: float) -> tuple[str, str]:
    """(the genome key to keep, why): the fastest exact candidate (key -> summary) where
    it is within ``slack`` of ``best``'s cycles, else the best."""
    exact = sorted((s["cycles"], key) for key, s in candidates.items() if is_exact(s))
    if not exact:
        return best_key, "no variant measured with the baseline's outputs"
    cycles, key = exact[0]
    slower = cycles / best["cycles"] - 1
    if slower > slack:
        return best_key, (f"the fastest variant with the baseline's outputs is {100 * slower:.1f} % "
                          f"slower (more than exact_slack {100 * slack:g} %)")
    return key, (f"outputs bit for bit the baseline's, {100 * slower:+.1f} % against the best "
                 f"({str(Genome.from_json(json.loads(best_key)))}, which rounds differently)")


def prefer_exact(result, saved, measure, slack: float, on_events) -> bool:
    """Apply the module docstring's choice to ``result`` (``evo.search.KernelResult``):
    ``saved`` is the kernel's checkpoint entry (``evo.checkpoint.KernelEntry``),
    ``measure(genomes) -> Measurements``.
    False where the best already has the baseline's outputs (nothing to choose)."""
    from evo.search import summary

    best_genome = Genome.from_json(result.best_genome).effective()
    best_key, best = best_genome.dumps(), result.best
    if best is None or is_exact(best) or not best.get("valid"):
        return False
    done = saved.exact
    if done is None or done["from"] != best_key or done["slack"] != slack:
        twin = exact_twin(best_genome)
        twin_key = twin.dumps()
        candidates = dict(saved.known)
        if twin_key not in candidates:
            candidates[twin_key] = summary(measure([twin])[0])
        kept, reason = choose(best_key, best, candidates, slack)
        done = {"from": best_key, "slack": slack, "twin": twin_key,
                "twin_result": candidates[twin_key], "kept": kept, "reason": reason,
                "kept_result": candidates[kept] if kept != best_key else None}
        saved.exact = done
        on_events([{"type": "exact", "kernel": result.kernel, **done}])
    if done["kept"] != best_key:
        result.best_genome = json.loads(done["kept"])
        result.best = done["kept_result"]
    return True
