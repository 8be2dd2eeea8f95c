"""The LLM mutation operator: ask for one PTX edit, keep it as a patch gene.

``LlmMutator.propose(spec, genome, view)`` renders the mutate prompt with the search's
feedback, asks the LLM, extracts a diff (or SEARCH/REPLACE blocks) and its METHOD and
RATIONALE lines, and appends a ``PatchGene`` to the genome. Before any GPU time is
spent the patch must apply and the result must assemble with ptxas; a patch that fails
either goes through the repair prompt once. What cannot be repaired is dropped (the
caller falls back to an ordinary mutation), and every outcome is counted:

    calls / tokens (the client) -> proposed -> applied -> assembled -> correct -> faster

``record(...)`` is told how each measured patch did and feeds the method catalogue.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from genomes.genome import Genome, PatchGene, apply_genome
from genomes.patch import extract_patch
from harness.compile import compile_ptx
from harness.record import Measurement
from harness.spec import KernelSpec

from evo.config import LlmConfig
from evo.llm.client import LlmClient
from evo.llm.feedback import build_mutate_context, build_repair_context
from evo.llm.prompts import PromptSet

STAGES = ("proposed", "applied", "assembled", "correct", "faster")
_METHOD_RE = re.compile(r"^\W*METHOD\W*:\s*(.+)$", re.I | re.M)
_RATIONALE_RE = re.compile(r"^\W*RATIONALE\W*:\s*(.+)$", re.I | re.M)


@dataclass
class SearchView:
    """What the search knows that the prompt shows (measurements may be None)."""

    baseline: Measurement | None = None
    current: Measurement | None = None
    best_genome: Genome | None = None
    best: Measurement | None = None
    recent_failures: list[str] = field(default_factory=list)


def normalize_method(label: str) -> str:
    """A catalogue key: lower case, words only, at most six of them."""
    words = re.findall(r"[a-z0-9]+", label.lower())
    return " ".join(words[:6]) or "unlabelled"


class LlmMutator:
    def __init__(self, config: LlmConfig, log_dir: Path | None, store=None, arch="sm_90"):
        self.client = LlmClient(config, log_dir)
        self.prompts = PromptSet(config.prompt_dir or None)
        self.store = store
        self.arch = arch
        self.counts: Counter = Counter()

    def check(self) -> None:
        """Fail early (one clear line) when the LLM cannot be used: no key, no openai."""
        self.client.check()

    def propose(self, spec: KernelSpec, genome: Genome, view: SearchView) -> Genome | None:
        """The genome with one LLM-written patch gene appended, or None."""
        methods = self.store.top_methods() if self.store is not None else []
        context = build_mutate_context(spec, genome, view.baseline, view.current,
                                       view.best_genome, None, view.recent_failures, methods,
                                       best=view.best, arch=self.arch)
        reply = self.client.complete(self.prompts.messages("mutate", context), "mutate")
        gene = _patch_gene(reply.text) if reply.ok else None
        if gene is None:
            self.counts["no_patch" if reply.ok else "call_failed"] += 1
            return None
        self.counts["proposed"] += 1
        child, problem, stage, patched = self._check(spec, genome, gene)
        if problem:  # one repair attempt
            current_ptx = apply_genome(spec.ptx_text(), genome).ptx
            repair = build_repair_context(spec, current_ptx, gene, problem, stage=stage,
                                          patched_ptx=patched)
            reply = self.client.complete(self.prompts.messages("repair", repair), "repair")
            gene = _patch_gene(reply.text) if reply.ok else None
            self.counts["repairs"] += 1
            if gene is None:
                return None
            child, problem, stage, patched = self._check(spec, genome, gene)
            if problem:
                return None
        return child

    def _check(self, spec, genome, gene) -> tuple[Genome, str | None, str, str | None]:
        """(child, problem or None, failing stage, patched PTX); counts what passed."""
        child = Genome(genome.genes + (gene,))
        applied = apply_genome(spec.ptx_text(), child)
        last = applied.outcomes[-1]
        if last.status != "applied":
            return child, last.detail or last.status, "apply", None
        self.counts["applied"] += 1
        result = compile_ptx(applied.ptx, self.arch)
        if not result.ok:
            return child, result.error or "ptxas failed", "assemble", applied.ptx
        self.counts["assembled"] += 1
        return child, None, "", applied.ptx

    def record(self, kernel: str, patch: PatchGene, result: Measurement,
               parent_fitness: float) -> None:
        """Count a measured patch and add it to the method catalogue."""
        faster = result.valid and result.fitness < parent_fitness
        if result.valid:
            self.counts["correct"] += 1
        if faster:
            self.counts["faster"] += 1
        gain = 1 - result.fitness / parent_fitness if faster else 0.0
        if self.store is not None:
            self.store.record_method(normalize_method(patch.method), kernel, faster, gain)

    def stats(self) -> dict:
        return {**self.client.stats(), **{k: self.counts[k] for k in
                                          (*STAGES, "repairs", "no_patch", "call_failed")}}

    def restore(self, data: dict) -> None:
        """Continue counting from a checkpoint (client counters and patch stages)."""
        self.client.restore_stats(data)
        for k in (*STAGES, "repairs", "no_patch", "call_failed"):
            self.counts[k] = data.get(k, 0)


def _patch_gene(text: str) -> PatchGene | None:
    diff = extract_patch(text)
    if diff is None:
        return None
    method = _METHOD_RE.search(text)
    rationale = _RATIONALE_RE.search(text)
    return PatchGene(diff, method.group(1).strip()[:80] if method else "",
                     rationale.group(1).strip()[:400] if rationale else "")
