"""What to put back into a ``torch.compile``d program: ``plan(capture_dir, run_dir)``
decides per captured kernel what ``evo.model.install.Installed`` puts in: the run's best
PTX for it (``best/<name>.ptx``), assembled by evo's ptxas for the device, or nothing,
with the reason (not evolved, the baseline stayed best, its baseline failed the gate, evo
verify found it differing or slower in the program, its genome changes the block, which
the program's compiled config fixes, or shrinks the grid of a code run at several sizes).

A genome that shrank the grid (``coarsen``, ``coarsen_tile``) is installed with the
factor Inductor's grid is divided by (``Choice.grid_divisor``), for a code of one size
only: its grid is then the captured one at every launch. A kernel compiled for dynamic
shapes (``dynamic=True``, or after torch.compile saw a size change) reads its sizes as
params and one launcher runs it at every size: ``evo run --model`` evolves it once and
checks its best at every other size the capture saw (``evo.run._check_other_sizes``: a
best failing at one gives way to the runner-up); ``plan`` installs it, found at
whichever size it runs first, only where it passed at each (and never from a capture of
one size).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from genomes.errors import EvoError


@dataclasses.dataclass
class Choice:
    """What ``plan`` decided for one captured kernel: ``cubin`` to install (None: not
    installed, ``reason`` says why), the captured PTX's hash and scalar values to match."""

    name: str
    kernel: str  # Inductor's kernel name
    ptx_sha: str
    scalars: dict
    cubin: bytes | None = None
    genome: str = ""
    reason: str = ""
    grid_divisor: tuple = (1, 1, 1)  # the captured grid over the evolved code's, per dimension


def code_sha(text: str) -> str:
    """The hash a launcher's PTX is matched by (``Choice.ptx_sha``)."""
    return hashlib.sha256(text.encode()).hexdigest()


VERIFIED = "verified.json"  # evo verify's verdicts, in the run folder
SLOWER = 1.01  # evolved code slower than its own by more than this in the program: left out


def plan(capture_dir, run_dir, arch: str | None = None, verified: bool = True) -> list[Choice]:
    """One Choice per kernel of the capture (module docstring). ``verified``: leave out
    the kernels ``evo verify`` found differing from their own code on the program's data,
    or slower than it there (its ``verified.json`` in the run folder, for the same best)."""
    from harness.compile import compile_ptx

    from evo.checkpoint import FILE as CHECKPOINT_FILE
    from evo.checkpoint import estimated, kernels
    from evo.checkpoint import read as read_checkpoint
    from evo.llm.occupancy import ptx_target
    from evo.model.capture import read, read_at_run_time, same_code

    run = Path(run_dir)
    if not (run / CHECKPOINT_FILE).is_file():
        raise EvoError(f"{run} is not a run folder (no {CHECKPOINT_FILE}): the --out of "
                       f"evo run --model {capture_dir}")
    saved = read_checkpoint(run)
    if estimated(saved):  # a program must never run a kernel no GPU has checked
        raise EvoError(f"{run} was searched by the static backend: its bests are estimates "
                       "that no GPU ran or checked, so none is installed; evolve on a GPU "
                       f"first (evo run --model {capture_dir} --backend gpu)")
    manifest = read(capture_dir)
    entries = kernels(saved)
    verdicts = _verdicts(run) if verified else {}
    groups = same_code(manifest["kernels"])
    choices = []
    for k in manifest["kernels"]:
        spec = k["kernel_spec"]
        captured = spec.ptx_text()
        scalars = {a["name"]: a["value"] for a in k["launch"]["args"] if not a["type"].startswith("*")}
        choice = Choice(k["name"], k["source"]["kernel"], code_sha(captured), scalars)
        choices.append(choice)
        best = run / "best" / f"{spec.name}.ptx"
        if not best.is_file():
            choice.reason = "not evolved in this run"
            continue
        genome_file = best.with_suffix(".genome.json")
        choice.genome = _genome_label(genome_file)
        text = best.read_text()
        entry = entries.get(spec.name)
        baseline = (entry.baseline if entry else None) or {}
        if baseline.get("valid") is False:
            choice.reason = f"its baseline failed the gate in this run: {baseline.get('reason')}"
            continue
        if code_sha(text) == choice.ptx_sha:
            choice.reason = "the baseline stayed best"
            continue
        sizes = read_at_run_time(spec, captured)
        group = groups.get(k["name"], [k["name"]])
        if sizes or len(group) > 1:  # one code, one launcher, several sizes: checked at each
            unchecked = _unchecked_sizes(group, k["name"], (entry.sizes if entry else None) or {},
                                         genome_file)
            if unchecked:
                runs = (f"its code reads {', '.join(sizes)} at run time (compiled for dynamic "
                        "shapes) and runs at any size" if sizes else
                        f"one launcher runs its code at {len(group)} captured sizes")
                choice.reason = f"{runs}: {unchecked}"
                continue
            choice.scalars = {}  # found at whichever size it runs first
        in_program = _in_program(verdicts.get(k["name"]), choice.genome)
        if in_program:
            choice.reason = in_program
            continue
        divisor, why = _grid_divisor(best.with_suffix(".launch.json"), spec,
                                     fixed=not (sizes or len(group) > 1))
        if why:
            choice.reason = why
            continue
        choice.grid_divisor = divisor
        # for the GPU the program compiled it for (Triton writes its .target: sm_80 on an
        # A100, whose cubins an sm_90 cubin would not load on), unless told otherwise
        compiled = compile_ptx(text, arch=arch or ptx_target(captured) or "sm_90")
        if not compiled.ok:
            choice.reason = f"ptxas refused the best PTX: {compiled.error}"
            continue
        choice.cubin = compiled.cubin
    by_name = {c.name: c for c in choices}
    for choice in choices:  # another captured size of a code evolved once, as its first
        evolved = by_name.get(groups.get(choice.name, [choice.name])[0])
        if evolved is None or evolved is choice:
            continue
        choice.genome = evolved.genome
        choice.reason = (f"one code at every size: {evolved.name}'s, installed with it "
                         "(checked at this size too)" if evolved.cubin is not None else
                         f"one code with {evolved.name}, evolved once as it: {evolved.reason}")
    return choices


def _grid_divisor(path: Path, spec, fixed: bool) -> tuple[tuple, str]:
    """(the captured grid over the evolved launch's, per dimension; "") for the best's
    launch file ``path``, or ((), why it cannot be installed): a changed block, a grid that
    does not divide the captured one, a grid changed for a code that runs at several sizes."""
    try:
        shape = json.loads(path.read_text()) if path.is_file() else {}
        grid = tuple(int(n) for n in shape.get("grid", spec.grid))
        block = tuple(int(n) for n in shape.get("block", spec.block))
    except (OSError, ValueError, TypeError) as err:
        return (), f"its launch file {path.name} does not read: {err}"
    if block != tuple(spec.block):
        return (), (f"its genome changes the block ({spec.block} -> {block}), which the "
                    "program's compiled config fixes (num_warps)")
    if grid == tuple(spec.grid):
        return (1, 1, 1), ""
    if any(n <= 0 or g % n for g, n in zip(spec.grid, grid)):
        return (), f"its genome changes the grid {spec.grid} -> {grid}, not by a whole factor"
    if not fixed:
        return (), ("its genome shrinks the grid, installed only for a code run at one "
                    "size (the grid Inductor computes then is the captured one)")
    return tuple(g // n for g, n in zip(spec.grid, grid)), ""


def _verdicts(run: Path) -> dict:
    """evo verify's verdicts per kernel in ``run`` ({} where it has not run)."""
    try:
        return json.loads((run / VERIFIED).read_text()).get("kernels", {})
    except (OSError, ValueError, AttributeError):
        return {}


def _in_program(verdict: dict | None, genome: str) -> str:
    """Why evo verify's verdict on this best (its genome) leaves it out; "" to install."""
    from evo.model.check import MIN_TIMED

    if not verdict or verdict.get("genome") != genome:
        return ""
    if verdict.get("agree") is False:
        return f"evo verify found it differing from its own code on the program's data: {verdict.get('worst')}"
    own, evolved = verdict.get("own_us"), verdict.get("evolved_us")
    if verdict.get("timed", 0) >= MIN_TIMED and own and evolved and evolved > SLOWER * own:
        return (f"slower in the program: {own:.2f} us -> {evolved:.2f} us a launch "
                f"({own / evolved:.3f}x, evo verify)")
    return ""


def _unchecked_sizes(group: list[str], name: str, checked: dict, genome_file: Path) -> str:
    """Why the best of ``name`` (a code one launcher runs at the captured sizes ``group``)
    may not be installed, from the run's checks at its other sizes (its checkpoint entry's
    ``sizes``: ``evo.run._check_other_sizes``); "" when it passed at every one."""
    from genomes.genome import Genome

    others = [n for n in group if n != name]
    if not others:
        return "captured at one size, evo checked it there only (capture a run at two sizes)"
    try:
        best = Genome.from_json(json.loads(genome_file.read_text())).effective().dumps()
        same = checked["kept"] == best
    except (OSError, ValueError, KeyError, TypeError, EvoError):
        same = False
    if not same:
        return "its best was not checked at its other captured sizes (a GPU run checks it)"
    at = checked.get("at") or {}
    failed = [n for n in others if not (at.get(n) or {}).get("valid")]
    if failed:
        reason = (at.get(failed[0]) or {}).get("reason") or "not checked"
        return f"its best failed at the captured size {failed[0]}: {reason}"
    return ""


def _genome_label(path: Path) -> str:
    """The genome a run's ``best/K.genome.json`` holds, as one line (``maxnreg(n=128),...``),
    or "" where there is none or it does not parse."""
    from genomes.genome import Genome

    try:
        return str(Genome.from_json(json.loads(path.read_text())))
    except (OSError, ValueError, EvoError):  # a gene of another evo version, a torn file
        return ""
