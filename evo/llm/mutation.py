"""The LLM mutation operator: ask for one PTX edit, keep it as a patch gene.

``LlmMutator.propose(spec, genome, view)`` renders the mutate prompt with the search's
feedback, asks the LLM, extracts a diff (or SEARCH/REPLACE blocks) and its METHOD and
RATIONALE lines, and appends a ``PatchGene`` to the genome. Before any GPU time is
spent the patch must apply and the result must assemble with ptxas; a patch that fails
either goes through the repair prompt once. What cannot be repaired is dropped (the
caller falls back to an ordinary mutation), and every outcome is counted:

    calls / tokens (the client) -> proposed -> applied -> assembled -> correct -> faster

The operator keeps the children it wrote until the search reports their measurement
(``measured(kernel, key, result)``, for every measurement: the search keeps no LLM state);
``record(...)`` then counts how the patch did and feeds the method catalogue.
Every outcome (no edit in the answer, no match, ptxas error, gate rejection, slower,
faster) also goes into the kernel's ``PatchHistory``, which the next mutate prompts quote
(``evo.llm.history``); it is part of ``stats()``, so the checkpoint keeps it.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from genomes.genome import Genome, PatchGene, apply_genome
from genomes.patch import changed_lines, extract_patch
from harness.compile import compile_ptx
from harness.record import Measurement
from harness.kernels.spec import KernelSpec

from evo.config import LlmConfig
from evo.llm.client import LlmClient
from evo.llm.feedback import build_mutate_context, build_repair_context
from evo.llm.history import PatchHistory
from evo.llm.prompts import PromptSet

STAGES = ("proposed", "applied", "assembled", "correct", "faster")
KINDS_ASKED = ("mode_full", "mode_explore", "crossover")  # what each call asked for
METHODS_SNAPSHOT = 32  # catalogue rows kept from the store when the run starts
_METHOD_RE = re.compile(r"^\W*METHOD\W*:\s*(.+)$", re.I | re.M)
_RATIONALE_RE = re.compile(r"^\W*RATIONALE\W*:\s*(.+)$", re.I | re.M)
_LESSON_RE = re.compile(r"^\W*LESSON\W*:\s*(.+)$", re.I | re.M)
LESSONS = 6  # per kernel, the newest; each at most 200 characters


@dataclass
class SearchView:
    """What the search knows that the prompt shows (measurements may be None)."""

    baseline: Measurement | None = None
    current: Measurement | None = None
    best_genome: Genome | None = None
    best: Measurement | None = None
    recent_failures: list[str] = field(default_factory=list)
    # The search's results so far (KernelSearch.known: effective genome key -> result
    # summary): the prompt's top variants, per-gene effects and memory figures.
    known: dict = field(default_factory=dict)


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
        self.history_chars = config.history_chars
        # The budget of the top variants, gene effects and transform list: [llm]
        # context_chars where the config has that key, else evo.llm.context's default.
        self.context_chars = config.context_chars
        self.counts: Counter = Counter()
        self.history = PatchHistory()
        # Nsight Compute figures quoted in the prompts, per kernel (harness.gpu.ncu.profile of
        # its best so far, refreshed before every [llm] ncu_every-th call on the kernel)
        self.ncu_every = config.ncu_every
        self.ncu: dict[str, dict] = {}
        self.asked: Counter = Counter()  # LLM calls per kernel
        self.lessons: dict[str, list[str]] = {}  # per kernel, newest first (LESSON lines)
        # children proposed and not yet measured: (kernel, genome key) -> (patch, parent
        # fitness); the search reports each measurement (``measured``), the operator keeps
        # its own books
        self.pending: dict[tuple[str, str], tuple[PatchGene, float]] = {}
        # The catalogue the prompts show: the store's as the run found it, plus the
        # kernel's own tallies in this run (kernel -> label -> [attempts, successes, gain
        # sum]; not other kernels', which kernels searched at once would make a matter of
        # timing). Both are checkpointed, so a resumed run shows what the interrupted one
        # showed, whatever it wrote to the store after its last checkpoint.
        self.methods_base = store.top_methods(METHODS_SNAPSHOT) if store is not None else []
        self.own_methods: dict[str, dict[str, list]] = {}
        # Kernels searched at once ([run] jobs) share this operator: its books change under
        # one lock, released while the client waits for answers.
        self._books = threading.RLock()

    def check(self) -> None:
        """Fail early (one clear line) when the LLM cannot be used: no key, no openai, an
        endpoint that refuses the key, cannot be reached or does not serve the model."""
        self.client.check()
        self.client.preflight()

    def messages(self, spec: KernelSpec, genome: Genome, view: SearchView,
                 mode: str = "full", other: Genome | None = None) -> list[dict]:
        """The chat messages asking for one patch to ``genome``: the mutate prompt with the
        full context, or in ``mode`` "explore" with little of it (no top variants, gene
        effects, failures, history or methods: room for a bold change); with ``other``, the
        crossover prompt, which adds the second parent (its genome, figures and PTX diff)."""
        explore = mode == "explore"
        history, left_out = ([], 0) if explore else \
            self.history.lines(spec.name, self.history_chars)
        quoted = self.history.genomes(spec.name)  # failures the history tells already
        failures = [] if explore else [f for f in view.recent_failures
                                       if not any(f.startswith(f"{g}: ") for g in quoted)]
        context = build_mutate_context(spec, genome, view.baseline, view.current,
                                       view.best_genome, None, failures,
                                       [] if explore else self._methods(spec.name),
                                       best=view.best, arch=self.arch, history=history,
                                       history_left_out=left_out,
                                       known={} if explore else view.known,
                                       context_chars=self.context_chars)
        context["mode"] = mode
        context["ncu"] = self.ncu.get(spec.name)
        context["lessons"] = [] if explore else list(self.lessons.get(spec.name, []))
        if other is None:
            return self.prompts.messages("mutate", context)
        context["other"] = second_parent(spec, genome, other, view.known)
        return self.prompts.messages("crossover", context)

    def propose(self, spec: KernelSpec, genome: Genome, view: SearchView,
                mode: str = "full", other: Genome | None = None) -> Genome | None:
        """The genome with one LLM-written patch gene appended, or None (``mode`` and
        ``other``: see ``messages``)."""
        return self.propose_many(spec, [(genome, view, mode, other)])[0]

    def propose_many(self, spec: KernelSpec, asks: list) -> list[Genome | None]:
        """``propose`` for each (genome, view, mode, other), the prompts written first and
        the requests sent together (``LlmClient.complete_many``), then one repair each
        where the patch did not apply or assemble, also together. Every prompt is written
        before any answer is read, so what a run asks does not depend on timing."""
        with self._books:
            prompts = []
            for genome, view, mode, other in asks:
                purpose = "crossover" if other is not None else "mutate"
                self.counts[purpose if other is not None else f"mode_{mode}"] += 1  # KINDS_ASKED
                if self.ncu_every and self.asked[spec.name] % self.ncu_every == 0:
                    self.profile(spec, view.best_genome or genome)
                self.asked[spec.name] += 1
                prompts.append((self.messages(spec, genome, view, mode, other), purpose))
        replies = self.client.complete_many(prompts)
        children: list[Genome | None] = [None] * len(asks)
        repairs = []  # (index, genome, view, the repair prompt)
        with self._books:
            for i, ((genome, view, _, _), reply) in enumerate(zip(asks, replies)):
                if reply.ok:
                    self._learn(spec.name, reply.text)
                gene = _patch_gene(reply.text) if reply.ok else None
                if gene is None:
                    self.counts["no_patch" if reply.ok else "call_failed"] += 1
                    if reply.truncated:  # cut at [llm] max_tokens: not the model's format to correct
                        self.counts["cut"] += 1
                    elif reply.ok:
                        self.history.add(spec.name, str(genome), "no_edit")
                    continue
                self.counts["proposed"] += 1
                child, problem, stage, patched = self._check(spec, genome, gene)
                if not problem:
                    children[i] = self._pending(spec, child, view)
                    continue
                current_ptx = apply_genome(spec.ptx_text(), genome, spec.launch).ptx
                repair = build_repair_context(spec, current_ptx, gene, problem, stage=stage,
                                              patched_ptx=patched, arch=self.arch)
                repairs.append((i, genome, view, (self.prompts.messages("repair", repair), "repair")))
        if not repairs:
            return children
        replies = self.client.complete_many([prompt for *_, prompt in repairs])  # one each
        with self._books:
            for (i, genome, view, _), reply in zip(repairs, replies):
                self.counts["repairs"] += 1
                gene = _patch_gene(reply.text) if reply.ok else None
                if gene is None:
                    if reply.ok:
                        self.history.add(spec.name, str(genome), "no_edit")
                    continue
                child, problem, _, _ = self._check(spec, genome, gene)
                if not problem:
                    children[i] = self._pending(spec, child, view)
        return children

    def _pending(self, spec: KernelSpec, child: Genome, view: SearchView) -> Genome:
        """``child``, remembered until the search measures it (``measured``)."""
        parent = view.current.fitness if view.current is not None else math.inf
        self.pending[(spec.name, child.effective().dumps())] = (child.genes[-1], parent)
        return child

    def measured(self, kernel: str, key: str, result: Measurement) -> None:
        """The search measured genome ``key`` (``Genome.effective().dumps()``): if it is a
        child this operator wrote, count how its patch did (``record``)."""
        with self._books:
            found = self.pending.pop((kernel, key), None)
            if found is not None:
                patch, parent_fitness = found
                self.record(kernel, patch, result, parent_fitness,
                            genome=Genome.from_json(json.loads(key)))

    def _learn(self, kernel: str, text: str) -> None:
        """Keep the answer's LESSON line (the LLM's insight) for the kernel's next prompts."""
        found = _LESSON_RE.search(final_answer(text))
        if not found:
            return
        lesson = found.group(1).strip()[:200]
        kept = [x for x in self.lessons.get(kernel, []) if x != lesson]
        self.lessons[kernel] = [lesson, *kept][:LESSONS]

    def profile(self, spec: KernelSpec, genome: Genome) -> dict:
        """Run the Nsight Compute pass on ``genome`` (``harness.gpu.ncu``); the next prompts for
        the kernel quote it. A failure (no GPU, no ncu, no permission) is quoted as such."""
        from harness.gpu.ncu import profile

        applied = apply_genome(spec.ptx_text(), genome, spec.launch)
        self.ncu[spec.name] = {"genome": str(genome),
                               **profile(spec, applied.ptx, applied.launch)}
        self.counts["ncu_passes"] += 1
        return self.ncu[spec.name]

    def _check(self, spec, genome, gene) -> tuple[Genome, str | None, str, str | None]:
        """(child, problem or None, failing stage, patched PTX); counts what passed."""
        child = Genome(genome.genes + (gene,))
        applied = apply_genome(spec.ptx_text(), child, spec.launch)  # as the evaluator does
        last = applied.outcomes[-1]
        if last.status != "applied":
            problem = last.detail or last.status
            self.history.add(spec.name, str(child), "no_match", problem, changed_lines(gene.diff))
            return child, problem, "apply", None
        self.counts["applied"] += 1
        result = compile_ptx(applied.ptx, self.arch)
        if not result.ok:
            problem = result.error or "ptxas failed"
            self.history.add(spec.name, str(child), "ptxas", problem, changed_lines(gene.diff))
            return child, problem, "assemble", applied.ptx
        self.counts["assembled"] += 1
        return child, None, "", applied.ptx

    def record(self, kernel: str, patch: PatchGene, result: Measurement,
               parent_fitness: float, genome: Genome | None = None) -> None:
        """Count a measured patch (``genome``: the child it ends), add it to the method
        catalogue and to the kernel's history: gate rejection, slower or faster."""
        # A parent never measured (usual after crossover) says nothing of faster or slower:
        # compared with an infinite time, every valid child read "100 % fewer cycles".
        known = math.isfinite(parent_fitness) and parent_fitness > 0
        faster = result.valid and known and result.fitness < parent_fitness
        if result.valid:
            self.counts["correct"] += 1
        if faster:
            self.counts["faster"] += 1
        gain = 1 - result.fitness / parent_fitness if faster else 0.0
        label = normalize_method(patch.method)
        if known or not result.valid:  # a rejection counts against the method either way
            if self.store is not None:
                self.store.record_method(label, kernel, faster, gain)
            tally = self.own_methods.setdefault(kernel, {}).setdefault(label, [0, 0, 0.0])
            tally[0] += 1
            tally[1] += int(faster)
            tally[2] += gain
        name, edit = str(genome if genome is not None else Genome((patch,))), \
            changed_lines(patch.diff)
        if not result.valid:
            self.history.add(kernel, name, "gate", result.reason or "invalid", edit)
        elif not known:
            self.history.add(kernel, name, "correct", _versus(result, parent_fitness), edit)
        else:
            self.history.add(kernel, name, "faster" if faster else "slower",
                             _versus(result, parent_fitness), edit)

    def stats(self) -> dict:
        """The checkpoint's ``llm``: counters and patch stages, and in ``state`` what a
        resumed run needs (draw counts, the patch history, the method catalogue)."""
        with self._books:
            out = {**self.client.stats(), **{k: self.counts[k] for k in
                                             (*STAGES, *KINDS_ASKED, "repairs", "no_patch",
                                              "call_failed", "cut")}}
            out["ncu_passes"] = self.counts["ncu_passes"]
            out["state"] = {**out["state"], "history": self.history.to_json(),
                            "ncu": dict(sorted(self.ncu.items())), "asked": dict(self.asked),
                            "lessons": dict(sorted(self.lessons.items())),
                            "methods": {"base": self.methods_base,
                                        "own": {kernel: {k: list(v) for k, v in sorted(own.items())}
                                                for kernel, own in sorted(self.own_methods.items())}}}
            return out

    def restore(self, data: dict) -> None:
        """Continue from a checkpoint (client counters and draws, stages, history)."""
        with self._books:
            self.client.restore_stats(data)
            for k in (*STAGES, *KINDS_ASKED, "repairs", "no_patch", "call_failed", "cut"):
                self.counts[k] = data.get(k, 0)
            state = data.get("state") if isinstance(data.get("state"), dict) else {}
            self.history.restore(state.get("history"))
            self.counts["ncu_passes"] = data.get("ncu_passes", 0)
            self.ncu = {k: v for k, v in (state.get("ncu") or {}).items() if isinstance(v, dict)}
            self.asked = Counter({k: int(v) for k, v in (state.get("asked") or {}).items()})
            self.lessons = {k: [str(x) for x in v][:LESSONS]
                            for k, v in (state.get("lessons") or {}).items() if isinstance(v, list)}
            methods = state.get("methods")
            if isinstance(methods, dict):  # older checkpoints have none: keep the fresh snapshot
                self.methods_base = [dict(m) for m in methods.get("base", []) if isinstance(m, dict)]
                own = methods.get("own", {})
                if any(isinstance(v, list) for v in own.values()):  # before per-kernel tallies
                    own = {"": own}  # the run's, shown on every kernel as they were
                self.own_methods = {kernel: {k: [int(v[0]), int(v[1]), float(v[2])]
                                             for k, v in tallies.items()
                                             if isinstance(v, list) and len(v) == 3}
                                    for kernel, tallies in own.items() if isinstance(tallies, dict)}

    def _methods(self, kernel: str) -> list[dict]:
        """``Store.top_methods`` rows: the run's snapshot merged with the kernel's tallies."""
        rows = {m["label"]: [m.get("attempts", 0), m.get("successes", 0),
                             m.get("mean_gain", 0.0) * m.get("successes", 0)]
                for m in self.methods_base if isinstance(m.get("label"), str)}
        own = [*self.own_methods.get("", {}).items(), *self.own_methods.get(kernel, {}).items()]
        for label, (attempts, successes, gain_sum) in own:
            row = rows.setdefault(label, [0, 0, 0.0])
            row[0], row[1], row[2] = row[0] + attempts, row[1] + successes, row[2] + gain_sum
        return [{"label": k, "attempts": a, "successes": n, "mean_gain": g / n if n else 0.0}
                for k, (a, n, g) in sorted(rows.items())]


DIFF_LINES = 120  # of the second parent's PTX diff in a crossover prompt


def second_parent(spec: KernelSpec, first: Genome, other: Genome, known: dict) -> dict:
    """The crossover prompt's ``other``: the second parent's genome, its figures (from the
    search's results, where measured) and its PTX as a unified diff from the first's."""
    from evo.llm import context as search_facts

    summary = search_facts.summary_of(known, other)
    if summary and summary.get("valid") and summary.get("cycles"):
        static = ", static estimate" if summary.get("timer") == "static" else ""
        cycles = f"Measured: {summary['cycles']:.0f} cycles{static}."
    else:
        cycles = "Not measured yet."
    ptx = spec.ptx_text()
    mine = apply_genome(ptx, first, spec.launch).ptx.splitlines()
    theirs = apply_genome(ptx, other, spec.launch).ptx.splitlines()
    diff = list(difflib.unified_diff(mine, theirs, "current.ptx", "second.ptx", n=2,
                                     lineterm=""))[2:]
    return {"genome": str(other), "cycles": cycles, "diff": "\n".join(diff[:DIFF_LINES]),
            "diff_left_out": max(0, len(diff) - DIFF_LINES)}


def _versus(result: Measurement, parent_fitness: float) -> str:
    """``result``'s cycles against its parent's, e.g. "2700 vs 2600 cycles (+3.8%)"."""
    static = ", static estimates" if result.is_static else ""
    if result.cycles is None or not math.isfinite(parent_fitness) or parent_fitness <= 0:
        return f"{result.cycles or 0:.0f} cycles{static}; its parent was not measured"
    change = result.cycles / parent_fitness - 1
    return f"{result.cycles:.0f} vs {parent_fitness:.0f} cycles ({change:+.1%}{static})"


_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL | re.IGNORECASE)


def final_answer(text: str) -> str:
    """A reasoning model's answer without its reasoning: every ``<think>...</think>`` block
    out, and an unclosed ``<think>`` to the end (an answer cut while thinking has no final
    part). Drafts of a patch inside the reasoning are not the patch; before, they were
    joined with the final one or applied in its place."""
    return _THINK.sub("", text)


def _patch_gene(text: str) -> PatchGene | None:
    text = final_answer(text)
    diff = extract_patch(text)
    if diff is None:
        return None
    method = _METHOD_RE.search(text)
    rationale = _RATIONALE_RE.search(text)
    return PatchGene(diff, method.group(1).strip()[:80] if method else "",
                     rationale.group(1).strip()[:400] if rationale else "")
