"""Capture the Triton kernels a ``torch.compile``d step launches: ``evo.capture(fn, *inputs)``.

How: Inductor launches each of its Triton kernels through ``CachingAutotuner.run`` (torch
2.8-2.11, ``torch/_inductor/runtime/triton_heuristics.py``), the launch hooks of Triton
being bypassed by its static launcher. ``Recorder`` wraps that method for one call of the
step and writes down, per launch: the kernel's name and its PTX (the compiled kernel's
``asm`` where kept, else ``<triton cache>/<cache_hash>/<name>.ptx`` beside the cubin),
the grid (``_interpret_args_grid``, as Inductor's own launch-parameter dump computes it),
warps and dynamic shared memory of the config autotuning chose, and every argument: a
tensor's dtype, the elements its view can reach, its role from Inductor's argument names
(``in_ptr`` and a template's ``arg_A``: read, ``out_ptr``: written, ``in_out_ptr``: both;
widened to both where the code reads what it writes, ``code_roles``) and the range of
values it held just before the launch; an int or float's value. A second call of the step runs
under ``torch.profiler`` for each kernel's share of the step's GPU time.

``write`` turns the launches into the capture folder: one spec per distinct kernel (same
PTX, grid and arguments: one, with its count of launches), through ``evo.api.from_triton``
as any Triton kernel, and ``manifest.json`` (``MANIFEST``): per kernel its spec, launches
per step, GPU time and share (the profiler times kernel names: a name launched with two
launches' worth of arguments shares its time by launches), and where it came from; kernels that cannot be specs (a
workspace pointer, an unknown dtype) are listed with the reason. Inputs are drawn over the
range each tensor held, so indices stay in bounds; a tensor holding no finite value is
drawn from the normal fill.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from genomes.errors import EvoError

from evo.model.hook import LaunchHook
from evo.model.step_time import gpu_times, step_wall_us

MANIFEST = "manifest.json"
FORMAT = 1  # manifest format version

# Triton signature types -> spec dtypes (pointers drop the '*'); i1 (bool) is a byte;
# fp8e4nv and fp8e5 are torch's float8_e4m3fn and float8_e5m2
DTYPES = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "fp64": "f64", "i64": "i64", "i32": "i32",
          "i8": "i8", "u8": "u8", "i1": "u8", "u32": "u32", "u64": "u64", "fp8e4nv": "f8e4m3",
          "fp8e5": "f8e5m2"}
# Inductor's argument names -> role; its template kernels (max-autotune's GEMMs) name
# their inputs after the template's own (arg_A, arg_B)
ROLES = (("in_out_ptr", "inout"), ("in_ptr", "in"), ("out_ptr", "out"), ("arg_", "in"))


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument of one launch, as plain data: a pointer (``dtype`` without the '*',
    ``count`` elements reachable, ``role``, ``low``/``high`` seen before the launch, None
    when nothing finite was) or a scalar (``value``)."""

    name: str
    type: str  # the Triton signature type: "*bf16", "i32", "fp32", ...
    count: int = 0
    role: str = ""
    contiguous: bool = True
    low: float | None = None
    high: float | None = None
    value: float | int | None = None

    @property
    def pointer(self) -> bool:
        return self.type.startswith("*")


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of one Inductor kernel, as plain data (JSON round-trips it)."""

    kernel: str
    ptx: str
    grid: tuple[int, int, int]
    num_warps: int
    shared: int
    args: tuple[Arg, ...]
    cache_hash: str = ""

    def key(self) -> tuple:
        """Launches with one key are one kernel to evolve: same code, launch and arguments."""
        args = tuple((a.name, a.type, a.count, a.role, a.value if not a.pointer else None)
                     for a in self.args)
        return (hashlib.sha256(self.ptx.encode()).hexdigest(), self.grid, self.num_warps, args)


WORKSPACES = ("ws_ptr", "sem_ptr")  # Inductor's names of memory a kernel owns (split-K semaphores)


def role_of(name: str) -> str | None:
    """A pointer's role from Inductor's argument name; None for a pointer of another kind
    (``ws_ptr``, ``sem_ptr``: a workspace the kernel owns) or another's naming (a
    user-defined Triton kernel's own parameter names: its code decides, ``code_roles``)."""
    for prefix, role in ROLES:
        if name.startswith(prefix):
            return role
    return None


def extent(shape, stride) -> int:
    """Elements a view with ``shape`` and ``stride`` can reach from its first element."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride))


# ---------------------------------------------------------------------- recording (torch)


def _arg(name: str, type_: str, value, ranges: bool = True) -> Arg:
    import torch

    if not type_.startswith("*"):
        return Arg(name, type_, value=value.item() if hasattr(value, "item") else value)
    role = role_of(name) or ""
    count = extent(value.shape, value.stride())
    contiguous = count == value.numel()
    low = high = None
    if count and role != "out" and ranges:
        # bool and fp8 have no min, max or isfinite in torch: their values as float32
        widen = value.dtype == torch.bool or (value.is_floating_point() and value.element_size() == 1)
        seen = value.detach().float() if widen else value.detach()
        finite = seen[torch.isfinite(seen)] if seen.is_floating_point() else seen
        if finite.numel():
            low, high = float(finite.min()), float(finite.max())
    return Arg(name, type_, count, role, contiguous, low, high)


def passed(autotuner, args) -> dict:
    """The arguments of one ``CachingAutotuner.run`` call by name: the kernel's parameters
    in order, less those it declares constexpr (Inductor passes sizes of 1 typed
    constexpr all the same)."""
    fn = autotuner.fn
    declared = set(getattr(fn, "constexprs", ()))
    return dict(zip([n for i, n in enumerate(fn.arg_names) if i not in declared], args))


def kernel_ptx(autotuner, launcher) -> str:
    """The PTX of the launcher's kernel: kept by Triton's compiled kernel where the launcher
    holds it, else the file beside its cubin in the Triton cache."""
    binary = getattr(launcher, "__globals__", {}).get("bin") or getattr(launcher, "bin", None)
    asm = getattr(binary, "asm", None)
    if asm is not None and "ptx" in asm:
        text = asm["ptx"]
        return text.decode() if isinstance(text, bytes) else text
    name, folder = autotuner.fn.__name__, str(getattr(launcher, "cache_hash", ""))
    roots = [os.environ.get("TRITON_CACHE_DIR", "")]
    try:  # Inductor's own Triton cache (kernels it loaded from its caches live there)
        from torch._inductor.runtime.runtime_utils import triton_cache_dir

        roots.append(triton_cache_dir(autotuner.triton_meta.get("device", 0)))
    except Exception:  # another torch: the places below
        pass
    try:
        import triton

        roots.append(str(triton.knobs.cache.dir))
    except Exception:  # an older Triton: the environment variable is the only place
        pass
    for root in filter(None, roots):
        path = Path(root) / folder / f"{name}.ptx"
        if path.is_file():
            return path.read_text()
    raise EvoError(f"capture: no PTX for {name} in {folder} of {', '.join(filter(None, roots))}")


class Recorder(LaunchHook):
    """While active, every Inductor Triton launch is appended to ``launches`` (a context
    manager: the patch is undone on exit, whatever happens)."""

    def __init__(self):
        super().__init__()
        self.launches: list[Launch] = []

    def launch(self, autotuner, args, stream, run):
        before = arguments_of(autotuner, args)  # values as the launch finds them
        result = run()
        self.launches.append(launch_of(autotuner, args, before))
        return result


def arguments_of(autotuner, args, ranges: bool = True) -> list[Arg]:
    """Each argument of the launch; ``ranges``: with the values its tensors hold (not while
    a CUDA graph is being captured: reading a tensor synchronises, which capture forbids)."""
    import torch

    ranges = ranges and not torch.cuda.is_current_stream_capturing()
    signature = autotuner.triton_meta.get("signature", {})
    out = []
    for name, value in passed(autotuner, args).items():
        type_ = signature.get(name, "")
        if type_ == "constexpr":  # a size of 1 compiled in: passed, not a PTX parameter
            continue
        out.append(_arg(name, str(type_), value, ranges))
    return out


def launch_of(autotuner, args, before: list[Arg]) -> Launch:
    """The Launch that ``autotuner`` (tuned: one launcher) just made with ``args``, whose
    arguments were ``before`` (``arguments_of``) as the launch found them."""
    (launcher,) = autotuner.launchers
    _, grid = autotuner._interpret_args_grid(args, launcher.config)
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    return Launch(
        kernel=autotuner.fn.__name__, ptx=kernel_ptx(autotuner, launcher), grid=grid,
        num_warps=int(launcher.config.num_warps), shared=int(getattr(launcher, "shared", 0) or 0),
        args=tuple(before), cache_hash=str(getattr(launcher, "cache_hash", "")))


def capture(fn, *inputs, out, warmup: int = 1, profile: bool = True) -> dict:
    """Capture the Triton kernels of one call of ``fn(*inputs)`` (a step of a
    ``torch.compile``d program) into the folder ``out``; returns the manifest (module
    docstring). ``warmup`` calls first compile and autotune, unrecorded."""
    from evo.model.program import need_torch

    torch = need_torch("evo.capture")  # a clear RuntimeFailure without torch or a GPU
    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    with Recorder() as recorder:
        fn(*inputs)
        torch.cuda.synchronize()
    if not recorder.launches:
        raise EvoError("capture: the call launched no Inductor Triton kernel (is it "
                       "torch.compile'd, on a CUDA device, and not all in cuBLAS?)")
    times, total = gpu_times(fn, inputs) if profile else ({}, 0.0)
    wall = step_wall_us(fn, inputs) if profile else None
    return write(recorder.launches, out, times, total, source={
        "torch": torch.__version__, "device": torch.cuda.get_device_name()}, step_wall_us=wall)


# ---------------------------------------------------------------------- writing (no torch)


def code_roles(launch: Launch) -> dict[str, str]:
    """Each pointer's role, from what the kernel's code does with it: a pointer named for
    output that the code also reads or adds into atomically (an embedding's backward
    scatters into a gradient an earlier kernel zeroed: its earlier content counts) is
    inout, and so is an input the code writes. A pointer Inductor did not name (a
    user-defined Triton kernel's ``x_ptr``, ``output``) is an input where the code only
    reads it (or never touches it), else inout: judged whole, as nothing says it is all
    written. A workspace (``WORKSPACES``) keeps no role."""
    from harness.kernels.spec_ptx import pointer_uses, ptx_entries

    entries = ptx_entries(launch.ptx)
    entry = launch.kernel if launch.kernel in entries else next(iter(entries), None)
    uses = pointer_uses(launch.ptx, entry) if entry else {}
    roles = {}
    for arg, declared in zip(launch.args, entries.get(entry, [])):
        use = uses.get(declared.name)
        if arg.pointer and not arg.role and not arg.name.startswith(WORKSPACES):
            roles[arg.name] = "in" if use is None or use.role in (None, "in") else "inout"
            continue
        widen = use is not None and use.role not in (None, arg.role) and arg.role in ("in", "out")
        roles[arg.name] = "inout" if widen else arg.role
    return roles


def _param(arg: Arg, role: str | None = None):
    """The spec param of a launch's argument; ``role``: the code's (``code_roles``)."""
    from evo import api

    if not arg.pointer:
        dtype = DTYPES.get(arg.type)
        if dtype is None or dtype in ("bf16", "f16", "u8", "i8", "f8e4m3", "f8e5m2"):
            raise EvoError(f"scalar {arg.name} of type {arg.type}")
        return api.scalar(arg.name, dtype, arg.value)
    dtype = DTYPES.get(arg.type[1:])
    if dtype is None:
        raise EvoError(f"{arg.name} points to {arg.type[1:]}, which evo's buffers do not hold")
    role = role or arg.role
    if not role:
        raise EvoError(f"{arg.name} is a workspace (not an input or output)")
    # a view with holes leaves elements unwritten: judged whole, as inout
    role = role if arg.contiguous or role == "in" else "inout"
    if role == "out":
        return api.buffer(arg.name, dtype, arg.count, role="out")
    if arg.low is None:
        return api.buffer(arg.name, dtype, arg.count, role=role)
    if dtype[0] in "iu" or arg.type == "*i1":
        return api.buffer(arg.name, dtype, arg.count, role=role, fill="int",
                          low=int(arg.low), high=int(arg.high) + 1)
    low, high = arg.low, arg.high
    if low == high:  # one value seen (a gradient still zero at the first step): drawn
        # around it, not constant, or the gate could not see a variant read it wrongly
        low, high = (0.0, 1.0) if low == 0 else sorted((low / 2, low * 3 / 2))
    return api.buffer(arg.name, dtype, arg.count, role=role, fill="uniform", low=low, high=high)


class _Compiled:
    """What ``evo.api.from_triton`` reads of a compiled Triton kernel, from a Launch."""

    def __init__(self, launch: Launch):
        self.asm = {"ptx": launch.ptx}
        self.name = launch.kernel
        self.metadata = {"num_warps": launch.num_warps, "shared": launch.shared, "name": launch.kernel}


def read_at_run_time(spec, ptx: str) -> list[str]:
    """The scalar params (sizes) the kernel's code reads. Inductor compiles static sizes
    into the code and passes them as params Triton never reads; a kernel compiled for
    dynamic shapes reads them, and one launcher then runs it at every size."""
    from harness.kernels.spec_ptx import params_read, ptx_entries

    declared = ptx_entries(ptx).get(spec.entry, [])
    read = params_read(ptx, spec.entry)
    return [p.name for p, q in zip(spec.params, declared) if p.kind == "scalar" and q.name in read]


def same_code(kernels: list[dict]) -> dict[str, list[str]]:
    """A capture's kernels that one launcher runs at several sizes, by the code they
    share: a kernel compiled for dynamic shapes (its code reads its sizes), or one whose
    code does not depend on them (a pointwise kernel whose block divides every size runs
    unmasked), captured once per size it ran at. Each such kernel's name -> the names of
    every entry with its code, in manifest order (the largest share first: the one
    ``evo run --model`` evolves). A kernel captured at one size that does not read its
    sizes is not in it. One code is one compiled kernel (Triton's cache hash): where a
    capture lacks it, entries are never grouped (a forward and a backward kernel may
    share a name, not their code)."""
    groups: dict[tuple, list[str]] = {}
    reads = {k["name"] for k in kernels if k.get("reads_sizes")}
    for k in kernels:
        compiled = k["source"].get("cache_hash") or k["name"]  # no hash: a group of its own
        groups.setdefault((k["source"]["kernel"], compiled), []).append(k["name"])
    return {name: names for names in groups.values() for name in names
            if len(names) > 1 or name in reads}


def other_sizes(spec) -> list:
    """The specs of the other captured sizes of a code one launcher runs at several
    (``same_code``; ``spec`` read from a capture folder's kernels/); [] for any other."""
    from harness.kernels.spec import load_spec

    folder = Path(spec.spec_path).parent.parent if spec.spec_path else None
    if folder is None or not (folder / MANIFEST).is_file():
        return []
    # the manifest alone says which they are: only their specs are read (a run asks this
    # of every kernel it finishes; reading them all each time was N x N spec loads)
    kernels = json.loads((folder / MANIFEST).read_text())["kernels"]
    names = set(same_code(kernels).get(spec.name, [])) - {spec.name}
    return [load_spec(folder / k["spec"]) for k in kernels if k["name"] in names]


def write(launches: list[Launch], out, times: dict[str, float] | None = None, total_us: float = 0.0,
          source: dict | None = None, step_timed: bool = True,
          step_wall_us: float | None = None) -> dict:
    """The capture folder from recorded launches (module docstring); returns the manifest.
    ``total_us``: what the shares are of, the step's GPU time, or (``step_timed`` false:
    ``evo capture`` of a whole program) the Triton kernels' own. ``step_wall_us``: the
    step's own time (``step_wall_us()``), where a step was timed."""
    from evo import api

    out = Path(out).expanduser().resolve()  # the specs' paths are absolute: relative to it
    times = times or {}
    groups: dict[tuple, list[Launch]] = {}
    for launch in launches:
        groups.setdefault(launch.key(), []).append(launch)
    per_name: dict[str, int] = {}
    for launch in launches:
        per_name[launch.kernel] = per_name.get(launch.kernel, 0) + 1
    kernels, skipped, names = [], [], set()
    for same in groups.values():
        first = same[0]
        name = first.kernel
        while name in names:  # one name, other code (a forward and a backward graph)
            name = f"{name}_{len(names)}"
        try:
            roles = code_roles(first)
            params = [_param(a, roles.get(a.name)) for a in first.args]
            spec = api.from_triton(_Compiled(first), grid=first.grid, params=params, name=name,
                                   folder=out / "kernels")
        except EvoError as err:
            skipped.append({"kernel": first.kernel, "launches": len(same), "reason": str(err)})
            continue
        names.add(name)
        # the profiler names kernels, not launches: a name's time split by launches
        us = times.get(first.kernel)
        us = None if us is None else us * len(same) / per_name[first.kernel]
        kernels.append({
            "name": name, "spec": str(spec.spec_path.relative_to(out)), "launches": len(same),
            "gpu_us": us, "share": (us / total_us if us is not None and total_us else None),
            "grid": list(first.grid), "block": 32 * first.num_warps,
            "source": {"kernel": first.kernel, "cache_hash": first.cache_hash},
            # sizes its code reads: compiled for dynamic shapes, not installed (install.plan)
            "reads_sizes": read_at_run_time(spec, first.ptx),
            "launch": dataclasses.asdict(first) | {"ptx": None}})
    kernels.sort(key=lambda k: -(k["gpu_us"] or 0.0))
    triton_us = sum(times.get(name, 0.0) for name in per_name)
    manifest = {"format": FORMAT, "source": source or {},
                "step_gpu_us": (total_us or None) if step_timed else None,
                "step_wall_us": step_wall_us if step_timed else None,
                "share_of": "the step's GPU time" if step_timed else "the Triton kernels' GPU time",
                "triton_gpu_us": triton_us or None, "kernels": kernels, "skipped": skipped}
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read(folder) -> dict:
    """A capture folder's manifest, each kernel's spec loaded (``kernel_spec``)."""
    from harness.kernels.spec import load_spec

    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise EvoError(f"{folder} is not a capture folder: no {MANIFEST} (make one with evo.capture)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise EvoError(f"{path}: capture format {manifest.get('format')!r}, this evo reads {FORMAT}")
    for kernel in manifest["kernels"]:
        kernel["kernel_spec"] = load_spec(folder / kernel["spec"])
    return manifest
