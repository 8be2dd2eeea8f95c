"""Put evolved kernels back into a running ``torch.compile``d program, and take them out.

``evo.model.install_plan.plan`` decides what goes in. ``Installed`` (a context manager;
``enable``/``disable`` switch it) wraps Inductor's
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
kernel; BENCHMARKS.md session 32). A genome that changes the block is not installed (the
block is ``num_warps`` of the config Inductor compiled). CUDA graphs recorded before a
swap keep the code they recorded.
"""

from __future__ import annotations

import dataclasses

from genomes.errors import EvoError

from evo.model.hook import LaunchHook
from evo.model.install_plan import Choice, code_sha, plan


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
            sha = code_sha(kernel_ptx(autotuner, launcher))
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
            if runner is None or "runner" not in launcher.__code__.co_names:
                raise EvoError(f"install: {name}'s launcher calls no runner to give the "
                               "shrunk grid (a torch whose Inductor launches otherwise)")
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
    """A launcher's CUfunction or runner: an entry of the launcher's scope (Triton's
    launcher: both; torch's static launcher: its runner), or an attribute of torch's static
    launcher (its CUfunction)."""
    if isinstance(holder, dict):
        holder[key] = value
    else:
        setattr(holder, key, value)
