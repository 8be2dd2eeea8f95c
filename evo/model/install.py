"""Put evolved kernels back into a running ``torch.compile``d program, and take them out.

``plan(capture_dir, run_dir)`` decides per captured kernel what to install: the run's best
PTX for it (``best/<name>.ptx``), assembled by evo's ptxas for the device, or nothing, with
the reason (not evolved, the baseline stayed best, its code reads its sizes at run time,
its genome changes the block, which the program's compiled config fixes).

``Installed`` (a context manager; ``enable``/``disable`` switch it) wraps Inductor's
``CachingAutotuner.run`` until it has found every chosen kernel: the first time a captured
kernel's launcher runs (same kernel name, the same PTX as captured, the captured sizes),
the evolved code is loaded with Triton's own loader (``load_binary``: the driver's module,
the dynamic shared memory it needs) and swapped in for the launcher's CUfunction, in the
static launcher or in Triton's. Then the wrapper is gone: launches are Inductor's own,
with its grid, arguments and stream, at no cost per launch (the first version kept the wrapper,
checking sizes on every launch, and a host-bound decoder step read 0.906x with evolved
kernels whose outputs were bitwise the same; unwrapped, 1.004x: H200, BENCHMARKS.md
session 13). So a kernel is
installed for the sizes it was captured with. A genome that shrank the grid (``coarsen``,
``coarsen_tile``: each thread does k threads' work) keeps its place: Inductor's launcher
still computes its own grid, and the runner it calls is swapped too, for one that divides
that grid by the factor before it launches (one Python call more a launch of that
kernel). This needs the sizes fixed (a code of one size: the grid is the captured one at
every launch); a genome that changes the block is not installed (the block is
``num_warps`` of the config Inductor compiled). A kernel compiled for dynamic shapes
(``dynamic=True``, or after torch.compile saw a size change) reads its sizes as params and
one launcher runs it at every size: ``evo run --model`` evolves it once and checks its
best at every other size the capture saw (``evo.run._check_other_sizes``: a best failing
at one gives way to the runner-up); ``plan`` installs
it, found at whichever size it runs first, only where it passed at each (and never from a
capture of one size). CUDA graphs recorded before a swap keep the code they recorded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from genomes.errors import EvoError

from evo.model.hook import LaunchHook


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


@dataclasses.dataclass
class Swap:
    """What putting one kernel's evolved code in changes: per item (holder, key, its own
    value, the evolved code's): the launcher's CUfunction, and where the genome shrank the
    grid, the runner it calls."""

    name: str  # Inductor's kernel name
    items: list

    def put(self, evolved: bool) -> None:
        for holder, key, own, new in self.items:
            _set(holder, key, new if evolved else own)


def _sha(text: str) -> str:
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
        choice = Choice(k["name"], k["source"]["kernel"], _sha(captured), scalars)
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
        if _sha(text) == choice.ptx_sha:
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


def install(model, run) -> "Installed":
    """``evo.install(model="cap", run="runs/cap")``: from now on, in this process, each
    kernel of the capture folder ``model`` that the run folder ``run`` made faster runs
    its evolved code when the ``torch.compile``d program launches it with the captured
    sizes (``plan`` says which; ``Installed`` how). Returns the ``Installed``:
    ``describe()`` says per kernel what runs, ``remove()`` takes them out (``with
    evo.install(...):`` at the end of the block)."""
    from evo.model.program import need_torch

    choices = plan(model, run)  # a wrong folder fails before torch is imported
    need_torch("evo.install")
    installed = Installed(choices)
    installed.hook()
    return installed


class Installed(LaunchHook):
    """Evolved kernels in the running program while enabled (module docstring)."""

    def __init__(self, choices: list[Choice]):
        super().__init__()
        self.plan = choices
        self.choices = {(c.kernel, c.ptx_sha): c for c in choices if c.cubin is not None}
        self.enabled = True
        self.swapped: dict[str, bool] = {}  # Inductor kernel name -> runs evolved code now
        self.refused: dict[str, str] = {}  # kernel name -> why its code could not be swapped
        self.looked: dict[int, Swap | None] = {}  # id(launcher) -> its swap, or None
        self.missed: dict[str, str] = {}  # kernel name -> "code" or "sizes": seen, not matched
        self._entries: list[Swap] = []
        self._modules = []  # keeps the loaded modules alive

    def launch(self, autotuner, args, stream, run):
        result = run()  # compiles and tunes where it is the first
        self._look(autotuner, args)  # swapped from the next launch on
        return result

    def __exit__(self, *exc):
        self.remove()
        return False

    def remove(self) -> None:
        """Every kernel runs its own code again, and launches are Inductor's own."""
        self.stop_looking()
        self.disable()

    def stop_looking(self) -> None:
        """Unwrap Inductor's launch: no cost per launch from here on (kernels not found
        by now stay as they are). Done by itself once every chosen kernel is found."""
        self.unhook()

    def describe(self) -> str:
        """A line per planned kernel: running its evolved code, or why not (yet)."""
        lines = []
        for c in self.plan:
            if c.cubin is None:
                lines.append(f"{c.name}: its own code ({c.reason})")
            elif self.swapped.get(c.kernel):
                lines.append(f"{c.name}: evolved code  [{c.genome}]")
            elif c.kernel in self.refused:
                lines.append(f"{c.name}: its own code (could not swap: {self.refused[c.kernel]})")
            elif self.swapped.get(c.kernel) is False:
                lines.append(f"{c.name}: its own code (switched off)")
            else:
                lines.append(f"{c.name}: its own code ({self.not_found(c.kernel)})")
        return "\n".join(lines)

    def not_found(self, kernel: str) -> str:
        """Why a chosen kernel runs its own code though nothing refused it."""
        return {"code": "Inductor compiled other code for it in this run than it captured: "
                        "autotuning may have picked another config",
                "sizes": "launched at other sizes than it was captured with"}.get(
            self.missed.get(kernel), "not launched with its captured code and sizes yet")

    def enable(self) -> None:
        """Every found kernel runs its evolved code."""
        self.enabled = True
        for swap in self._entries:
            swap.put(evolved=True)
            self.swapped[swap.name] = True

    def disable(self) -> None:
        """Every found kernel runs its own code again."""
        self.enabled = False
        for swap in self._entries:
            swap.put(evolved=False)
            self.swapped[swap.name] = False

    # -------------------------------------------------------------- finding launchers

    def entry_for(self, autotuner, args) -> Swap | None:
        """The Swap for the launcher of this launch, prepared the first time it is seen (a refusal recorded: that kernel keeps
        its code); None for a kernel not installed. Puts nothing in."""
        if len(autotuner.launchers) != 1:
            return None
        (launcher,) = autotuner.launchers
        if id(launcher) not in self.looked:
            try:
                entry = self._prepare(autotuner, launcher, args)
            except Exception as err:  # never break the user's step
                self.refused[autotuner.fn.__name__] = f"{type(err).__name__}: {err}"
                entry = None
            self.looked[id(launcher)] = entry
            if entry is not None:
                self._entries.append(entry)
        return self.looked[id(launcher)]

    def _look(self, autotuner, args) -> None:
        if len(autotuner.launchers) != 1 or id(autotuner.launchers[0]) in self.looked:
            return
        entry = self.entry_for(autotuner, args)
        if entry is not None:
            entry.put(evolved=self.enabled)
            self.swapped[entry.name] = self.enabled
        if len(self._entries) + len(self.refused) >= len(self.choices):
            self.stop_looking()

    def _match(self, name: str, sha: str, same_shape) -> Choice | None:
        """The choice for a launcher of kernel ``name`` whose code hashes to ``sha``, where
        ``same_shape(scalars)`` says it was launched at the captured sizes; else None, and
        ``missed`` says why (another code: autotuning may pick another config than it did
        while captured; other sizes)."""
        choice = self.choices.get((name, sha))
        if choice is None:
            self.missed.setdefault(name, "code")
            return None
        if not same_shape(choice.scalars):
            self.missed.setdefault(name, "sizes")
            return None
        self.missed.pop(name, None)
        return choice

    @staticmethod
    def _same_shape(autotuner, args, scalars: dict) -> bool:
        from evo.model.capture import passed

        values = passed(autotuner, args)
        return all(values.get(name) == value for name, value in scalars.items())

    def _prepare(self, autotuner, launcher, args) -> Swap | None:
        """The Swap for a captured launcher launched with the captured sizes, or None for
        any other."""
        from evo.model.capture import kernel_ptx

        name = autotuner.fn.__name__
        if not any(k[0] == name for k in self.choices):
            return None
        try:
            sha = _sha(kernel_ptx(autotuner, launcher))
        except EvoError:
            return None
        choice = self._match(name, sha, lambda scalars: self._same_shape(autotuner, args, scalars))
        if choice is None:
            return None
        scope = getattr(launcher, "__globals__", {})
        runner = scope.get("runner")
        static = getattr(runner, "__self__", None)
        if static is not None and hasattr(static, "function"):
            holder, key = static, "function"  # torch's static launcher
        elif "function" in scope:
            holder, key = scope, "function"  # Triton's launcher
        else:
            raise EvoError(f"install: {name}'s launcher has no CUfunction to swap "
                           "(a torch whose Inductor launches otherwise)")
        import triton

        shared = int(getattr(launcher, "shared", 0) or 0)
        device = autotuner.triton_meta.get("device", 0)
        device = getattr(device, "index", device) or 0
        module, function, *_ = triton.runtime.driver.active.utils.load_binary(
            name, choice.cubin, shared, device)
        self._modules.append(module)
        old = holder[key] if isinstance(holder, dict) else getattr(holder, key)
        items = [(holder, key, old, function)]
        if tuple(choice.grid_divisor) != (1, 1, 1):
            if "runner" not in scope or "runner" not in launcher.__code__.co_names:
                raise EvoError(f"install: {name}'s launcher calls no runner to give the "
                               "shrunk grid (a torch whose Inductor launches otherwise)")
            runner = scope["runner"]
            items.append((scope, "runner", runner, _dividing(runner, *choice.grid_divisor)))
        return Swap(name, items)


def _dividing(runner, fx: int, fy: int, fz: int):
    """``runner`` (Inductor's launcher calls it ``runner(grid_0, grid_1, grid_2, stream,
    ...)``) launching a grid ``fx`` x ``fy`` x ``fz`` times smaller: the grid of a genome
    that gave each thread the work of several."""
    def runner_of_a_smaller_grid(grid_0, grid_1, grid_2, *rest):
        return runner(grid_0 // fx, grid_1 // fy, grid_2 // fz, *rest)
    return runner_of_a_smaller_grid


def _set(holder, key: str, value) -> None:
    """A launcher's CUfunction: an entry of Triton's launcher scope, or an attribute of
    torch's static launcher."""
    if isinstance(holder, dict):
        holder[key] = value
    else:
        setattr(holder, key, value)
