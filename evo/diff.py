"""``evo diff RUN KERNEL``: what the best variant changed, as the baseline -> best unified
diff of the PTX and of the SASS (``cuobjdump -sass``, addresses and encodings left out, so
that only the code's changes show), with the best genome and its reduced form (the genes
the machine code needs: ``evo.reduce``)."""

from __future__ import annotations

import difflib
import json

from genomes.errors import EvoError
from genomes.genome import Genome, apply_genome
from harness.compile import compile_ptx
from harness.sass import disassemble, normalize_sass

from evo.rundir import RunDir


def diff_lines(run: RunDir, kernel: str, context: int = 3, sass: bool = True) -> list[str]:
    """The lines ``evo diff`` prints; EvoError for a kernel the run has no best for."""
    from evo.export import find_spec

    best = run.path / "best" / f"{kernel}.genome.json"
    if not best.is_file():
        done = sorted(p.name.split(".")[0] for p in (run.path / "best").glob("*.genome.json"))
        raise EvoError(f"{run.path}: no best genome for {kernel} (kernels with one: "
                       f"{', '.join(done) or 'none yet'})")
    spec = find_spec(run, kernel)
    genome = Genome.from_json(json.loads(best.read_text()))
    base_ptx = spec.ptx_text()
    applied = apply_genome(base_ptx, genome, spec.launch)
    lines = [f"kernel: {kernel}", f"best genome: {genome}"]
    reduced = (run.read_checkpoint().get("reduced", {}).get(kernel)
               if run.has_checkpoint() else None)
    if reduced and reduced["dropped"] and Genome.from_json(reduced["from"]) == genome:
        noisy = reduced.get("within_noise", [])
        same = [g for g in reduced["dropped"] if g not in noisy]
        lines.append(f"reduced: {reduced['text'] or 'the baseline'} ("
                     + "; ".join(([f"the same machine code without {', '.join(same)}"] if same else [])
                                 + ([f"within {100 * reduced['noise']:g} % of its time without "
                                     f"{', '.join(noisy)}"] if noisy else [])) + ")")
    if applied.launch != spec.launch:
        lines.append(f"launch: grid {spec.grid} block {spec.block} -> grid "
                     f"{applied.launch.grid} block {applied.launch.block}")
    lines += _unified(base_ptx, applied.ptx, f"{kernel} baseline PTX", f"{kernel} best PTX",
                      context) or ["(the PTX is the baseline's)"]
    if not sass:
        return lines
    codes = []
    for name, ptx in (("baseline", base_ptx), ("best", applied.ptx)):
        compiled = compile_ptx(ptx)
        if not compiled.ok:
            return lines + [f"SASS: the {name} PTX does not assemble: {compiled.error}"]
        text = disassemble(compiled.cubin)
        if text is None:
            return lines + ["SASS: no disassembler here (cuobjdump and nvdisasm: "
                            "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"]
        codes.append(normalize_sass(text))
    return lines + (_unified(*codes, f"{kernel} baseline SASS", f"{kernel} best SASS", context)
                    or ["(the SASS is the baseline's)"])


def _unified(a: str, b: str, from_name: str, to_name: str, context: int) -> list[str]:
    return [line.rstrip("\n") for line in difflib.unified_diff(
        a.splitlines(), b.splitlines(), from_name, to_name, n=context, lineterm="")]
