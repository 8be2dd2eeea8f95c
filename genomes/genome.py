"""Genes and genomes: what evolves, how it is written down, and how it is applied to PTX.

A gene names a transform and its parameters (``maxnreg(n=128)``). A genome is an ordered
list of genes; applying it folds the genes over the baseline PTX. Of several genes in one
conflict group only the last takes effect (the earlier ones are recorded as "replaced").
A gene that changes nothing, or fails, is a recorded no-op: applying never raises on a
well-formed genome.

Genomes serialize to plain JSON: ``{"genes": [{"transform": "maxnreg", "params": {"n": 128}}]}``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from genomes import ptx as ptx_model
from genomes import transforms
from genomes.errors import GenomeFormatError
from genomes.launch import Launch


@dataclass(frozen=True)
class Gene:
    """One transform with its parameters (kept sorted, so equal genes compare equal)."""

    transform: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def make(cls, name: str, **params: Any) -> Gene:
        """A validated gene: the name resolves (aliases too), params are coerced."""
        if name in transforms.ALIASES and name not in transforms.registry():
            base, preset = transforms.ALIASES[name]
            name, params = base, {**preset, **params}
        t = transforms.get(name)
        try:
            coerced = {k: t.param(k).coerce(v) for k, v in params.items()}
        except ValueError as err:
            raise GenomeFormatError(f"gene {name}: {err}") from None
        full = {p.name: p.default for p in t.params}
        full.update(coerced)
        return cls(name, tuple(sorted(full.items())))

    @property
    def group(self) -> str | None:
        return transforms.get(self.transform).group

    def to_json(self) -> dict:
        return {"transform": self.transform, "params": dict(self.params)}

    def __str__(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.transform}({args})" if args else self.transform


@dataclass(frozen=True)
class PatchGene:
    """A PTX edit written by an LLM: a unified diff or SEARCH/REPLACE blocks, applied to
    the PTX as it stands at this gene's position in the genome (see ``genomes.patch``)."""

    diff: str
    method: str = ""  # the LLM's short label for what the edit does
    rationale: str = ""

    group = None  # a patch never replaces another gene

    @property
    def transform(self) -> str:
        return "patch"

    def to_json(self) -> dict:
        return {"patch": self.diff, "method": self.method, "rationale": self.rationale}

    def __str__(self) -> str:
        digest = hashlib.sha256(self.diff.encode()).hexdigest()[:8]
        return f"patch({self.method or 'llm'}@{digest})"


AnyGene = Gene | PatchGene


@dataclass(frozen=True)
class Genome:
    genes: tuple[AnyGene, ...] = ()

    def __str__(self) -> str:
        return ",".join(map(str, self.genes)) or "(baseline)"

    def __len__(self) -> int:
        return len(self.genes)

    def one_gene_fewer(self) -> list[Genome]:
        """Each genome this one is without one of its genes, in gene order."""
        return [Genome(self.genes[:i] + self.genes[i + 1:]) for i in range(len(self.genes))]

    def with_gene(self, gene: AnyGene) -> Genome:
        """The effective genome with ``gene`` in place of its group's gene, or appended
        (a search's one step: the genome plus one gene)."""
        genes = list(self.genes)
        for i, g in enumerate(genes):
            if g.group is not None and g.group == gene.group:
                genes[i] = gene
                return Genome(tuple(genes)).effective()
        return Genome((*genes, gene)).effective()

    def effective(self) -> Genome:
        """The genes that take effect: the last gene of each conflict group, in order."""
        return Genome(tuple(self.genes[i] for i in _effective_positions(self)))

    def to_json(self) -> dict:
        return {"genes": [g.to_json() for g in self.genes]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, data: Any) -> Genome:
        if isinstance(data, dict):
            data = data.get("genes")
        if not isinstance(data, list):
            raise GenomeFormatError('a genome is {"genes": [...]} or a list of genes')
        genes = []
        for item in data:
            if isinstance(item, str):
                genes.extend(parse_inline(item).genes)
            elif isinstance(item, dict) and isinstance(item.get("patch"), str):
                genes.append(PatchGene(item["patch"], str(item.get("method", "")),
                                       str(item.get("rationale", ""))))
            elif isinstance(item, dict) and isinstance(item.get("transform"), str):
                params = item.get("params", {})
                if not isinstance(params, dict):
                    raise GenomeFormatError(f"gene params must be an object: {item!r}")
                genes.append(Gene.make(item["transform"], **params))
            else:
                raise GenomeFormatError(f"not a gene: {item!r}")
        return cls(tuple(genes))


_GENE_RE = re.compile(r"\s*([A-Za-z_][\w]*)\s*(?:\((.*)\))?\s*$", re.S)


def parse_inline(text: str) -> Genome:
    """Parse ``vec_ld,vec_st,maxnreg(n=128)`` (also ``maxnreg(128)`` for one-param genes)."""
    genes = []
    for chunk in _split_genes(text):
        m = _GENE_RE.match(chunk)
        if not m:
            raise GenomeFormatError(f"cannot read gene {chunk!r}; write name or name(k=v,...)")
        name, args = m.group(1), (m.group(2) or "").strip()
        params: dict[str, Any] = {}
        for arg in filter(None, (a.strip() for a in args.split(","))):
            key, eq, value = arg.partition("=")
            if not eq:  # positional: only for single-parameter transforms
                real = transforms.ALIASES.get(name, (name, {}))[0]
                plist = transforms.get(real).params
                if len(plist) != 1:
                    raise GenomeFormatError(f"gene {chunk!r}: name the parameter (k=v)")
                key, value = plist[0].name, arg
            params[key.strip()] = value.strip()
        genes.append(Gene.make(name, **params))
    return Genome(tuple(genes))


def _split_genes(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [c for c in out if c.strip()]


def load_genome(arg: str) -> Genome:
    """A genome from a JSON file path, a JSON string, or an inline list."""
    from pathlib import Path

    path = Path(arg)
    if arg.endswith(".json") or path.is_file():
        try:
            return Genome.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            raise GenomeFormatError(f"genome file not found: {arg}") from None
        except json.JSONDecodeError as err:
            raise GenomeFormatError(f"{arg}: not JSON ({err})") from None
    if arg.lstrip().startswith(("{", "[")):
        try:
            return Genome.from_json(json.loads(arg))
        except json.JSONDecodeError as err:
            raise GenomeFormatError(f"genome is not valid JSON: {err}") from None
    return parse_inline(arg)


@dataclass(frozen=True)
class GeneOutcome:
    """What one gene did: "applied" (with a count), "no-op", "replaced", "failed" (a patch
    that does not apply here, with the reason) or "error" (a transform raised)."""

    gene: AnyGene
    status: str
    changes: int = 0
    detail: str = ""


@dataclass
class Applied:
    """The result of applying a genome: the variant's PTX, one outcome per gene, and the
    launch it implies (the one given to ``apply_genome``, unless a gene changed it)."""

    ptx: str
    outcomes: list[GeneOutcome] = field(default_factory=list)
    launch: Launch | None = None

    @property
    def changed(self) -> bool:
        return any(o.status == "applied" for o in self.outcomes)


def apply_genome(baseline: str | ptx_model.Module, genome: Genome,
                 launch: Launch | None = None) -> Applied:
    """Fold the genome's genes over the baseline PTX (which is never modified).

    ``launch`` is the kernel's own launch (its spec's); genes that change the launch see
    it as it stands at their position. Without it they are no-ops.
    """
    module = (ptx_model.parse_shared(baseline) if isinstance(baseline, str) else baseline).copy()
    effective = set(_effective_positions(genome))
    outcomes = []
    pinned = None  # the reads_launch gene whose launch the variant must keep
    for i, gene in enumerate(genome.genes):
        if i not in effective:
            outcomes.append(GeneOutcome(gene, "replaced", detail="a later gene of its group wins"))
            continue
        if isinstance(gene, PatchGene):
            module, outcome = _apply_patch(module, gene)
            outcomes.append(outcome)
            continue
        transform = transforms.get(gene.transform)
        uses_launch = transform.edits_launch or transform.reads_launch
        if uses_launch and launch is None:
            what = "changes" if transform.edits_launch else "needs"
            outcomes.append(GeneOutcome(gene, "no-op", detail=f"{what} the launch, and none "
                                        "was given (apply it with the kernel's spec)"))
            continue
        trial, new_launch = module.copy(), launch
        try:
            if uses_launch:
                changes, new_launch = transform.run_launch(trial, dict(gene.params), launch)
            else:
                changes = transform.run(trial, dict(gene.params))
        except transforms.NotApplicable as why:
            outcomes.append(GeneOutcome(gene, "no-op", detail=str(why)))
            continue
        except Exception as err:  # a transform bug must not end a run: record it
            outcomes.append(GeneOutcome(gene, "error", detail=f"{type(err).__name__}: {err}"))
            continue
        if changes and pinned and new_launch != launch:
            # an earlier gene's edit holds for this launch only (a proof made for it)
            outcomes.append(GeneOutcome(gene, "no-op", detail=f"keeps the launch {pinned} "
                                        "was applied for"))
            continue
        if changes:
            module, launch = trial, new_launch
            pins = transform.reads_launch or transform.pins_launch
            pinned = pinned or (gene.transform if pins else None)
            outcomes.append(GeneOutcome(gene, "applied", changes))
        else:
            outcomes.append(GeneOutcome(gene, "no-op", detail="nothing to change"))
    return Applied(module.render(), outcomes, launch)


def _apply_patch(module: ptx_model.Module, gene: PatchGene
                 ) -> tuple[ptx_model.Module, GeneOutcome]:
    """Apply a patch gene; one that does not match or yields unreadable PTX is "failed"."""
    from genomes.errors import PtxParseError
    from genomes.patch import apply_patch

    before = module.render()
    result = apply_patch(before, gene.diff)
    if not result.ok:
        return module, GeneOutcome(gene, "failed", detail=result.detail)
    if result.text == before:
        return module, GeneOutcome(gene, "no-op", detail="the patch changes nothing")
    try:
        patched = ptx_model.parse(result.text, "<patched>")
    except PtxParseError as err:
        return module, GeneOutcome(gene, "failed", detail=f"patched PTX does not parse: {err}")
    return patched, GeneOutcome(gene, "applied", result.hunks)


def _effective_positions(genome: Genome) -> list[int]:
    last = {}
    for i, g in enumerate(genome.genes):
        last[g.group or f"#{i}"] = i
    return sorted(last.values())
