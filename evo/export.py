"""``evo export RUN KERNEL``: the evolved kernel back into the user's program.

Writes, into ``RUN/export/KERNEL/`` (or ``-o DIR``):

- ``KERNEL.ptx``: the best PTX of the run (what was measured and checked);
- ``KERNEL.cubin``: that PTX assembled by ptxas for the architecture its ``.target``
  names, with the ptxas options its genome carries (as the run compiled it);
- ``KERNEL.launch.json``: entry, grid, block, dynamic shared memory, the parameters in
  order (name, kind, dtype), the genome, the baseline's launch and the measured speedup;
- ``load_KERNEL.py``: a loader with ``launch(*args)`` on CuPy (a ``RawModule`` of the
  cubin, or of the PTX on a GPU of another architecture).

The grid is the one that covers the spec's sizes: a genome that changed the block size or
made each thread handle more elements (``block``, ``coarsen``) shrank it for those sizes,
and the launch file shows the baseline's launch beside it so a caller with other sizes
can scale it. For a Triton kernel, the loader replaces the Triton call (the spec's
parameter list holds Triton's extra scratch parameters, which the loader passes too), or,
with ``--triton-dump``, Triton itself launches the evolved PTX in place of its own
(``triton_override``).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from evo.checkpoint import BACKEND, estimated
from evo.rundir import RunDir, write_atomic
from genomes.errors import EvoError
from genomes.genome import Genome

_LOADER = '''"""Load and launch {kernel}: {what} (run {run}).

    from load_{kernel} import launch
    launch({call})

Buffers are CuPy arrays (or anything with a device pointer CuPy accepts), scalars Python
numbers; all in the order above, the kernel's own parameter order. The launch shape
({grid} x {block}) covers the sizes of the spec it was evolved on; see
{kernel}.launch.json for the baseline's shape.
Genome: {genome}
"""

import json
import pathlib

import cupy
import numpy

HERE = pathlib.Path(__file__).resolve().parent
LAUNCH = json.loads((HERE / "{kernel}.launch.json").read_text())
_SCALAR_TYPES = {{"f32": numpy.float32, "f64": numpy.float64, "f16": numpy.float16,
                 "i32": numpy.int32, "u32": numpy.uint32, "i64": numpy.int64,
                 "u64": numpy.uint64, "i8": numpy.int8, "u8": numpy.uint8}}
_functions = {{}}


def function():
    """The kernel as a CuPy RawKernel function: the cubin when this GPU's architecture is
    the one it was assembled for, else the PTX (the driver compiles it for this GPU)."""
    device = cupy.cuda.Device().id
    if device not in _functions:
        arch = "sm_" + cupy.cuda.Device().compute_capability
        code = HERE / ("{kernel}.cubin" if arch == LAUNCH["arch"] else "{kernel}.ptx")
        module = cupy.RawModule(path=str(code))
        _functions[device] = module.get_function(LAUNCH["entry"])
    return _functions[device]


def launch(*args, stream=None):
    """Launch the evolved kernel with its arguments in the kernel's parameter order."""
    params = LAUNCH["params"]
    if len(args) != len(params):
        names = ", ".join(p["name"] for p in params)
        raise TypeError(f"{kernel} takes {{len(params)}} arguments ({{names}}), got {{len(args)}}")
    values = tuple(a if p["kind"] == "buffer" else _SCALAR_TYPES[p["dtype"]](a)
                   for a, p in zip(args, params))
    function()(tuple(LAUNCH["grid"]), tuple(LAUNCH["block"]), values,
               shared_mem=LAUNCH["shared_mem"], stream=stream)
'''


def find_spec(run: RunDir, kernel: str):
    """The spec of ``kernel`` among the run's suite (its config.toml), or an EvoError."""
    from evo.run_kernels import resolve_suite

    suite = tomllib.loads(run.config_text())["run"]["suite"]
    try:
        specs = resolve_suite(suite)
    except EvoError as err:
        raise EvoError(f"{run.path}: cannot read the run's kernels again ({err}); run "
                       "evo export where the run was started") from None
    for spec in specs:
        if spec.name == kernel:
            return spec
    raise EvoError(f"{run.path}: no kernel {kernel!r} in the run (its kernels: "
                   f"{', '.join(s.name for s in specs)})")


def export_kernel(run_path: Path, kernel: str, out: Path | None = None,
                  triton_dump: Path | None = None) -> list[Path]:
    """Write the export files of ``kernel``'s best variant (module docstring); with
    ``triton_dump``, also its Triton override (``triton_override``); return the files."""
    from evo.report import results_from_checkpoint, speedup
    from harness.compile import compile_ptx

    run = RunDir.open(run_path)
    best = run.path / "best"
    if not (best / f"{kernel}.ptx").is_file():
        done = sorted(p.stem for p in best.glob("*.ptx")) if best.is_dir() else []
        raise EvoError(f"{run.path}: no best/{kernel}.ptx (kernels with a result: "
                       f"{', '.join(done) or 'none yet'})")
    spec = find_spec(run, kernel)
    ptx = (best / f"{kernel}.ptx").read_text()
    genome = json.loads((best / f"{kernel}.genome.json").read_text())
    launch_file = best / f"{kernel}.launch.json"
    launch = json.loads(launch_file.read_text()) if launch_file.is_file() \
        else spec.launch.to_json()
    compiled = compile_ptx(ptx)
    if not compiled.ok:
        raise EvoError(f"{kernel}: ptxas failed on best/{kernel}.ptx: {compiled.error}")
    strategy = tomllib.loads(run.config_text())["run"]["strategy"]
    result = next((r for r in results_from_checkpoint(run, strategy) if r.kernel == kernel),
                  None)
    measured = speedup(result) if result else None
    saved = run.read_checkpoint()
    backend, static = saved.get(BACKEND, ""), estimated(saved)
    params = [{"name": p.name, "kind": p.kind, "dtype": p.dtype} for p in spec.params]
    description = {
        "kernel": kernel, "entry": spec.entry, "arch": compiled.arch,
        "grid": list(launch["grid"]), "block": list(launch["block"]),
        "shared_mem": spec.shared_mem, "params": params, "genome": genome,
        "baseline_launch": {"grid": list(spec.grid), "block": list(spec.block)},
        "speedup": round(measured, 4) if measured else None, "measured_with": backend,
        **({"speedup_note": "static estimate, not measured"} if static else {}),
        "registers": compiled.registers, "run": str(run.path),
    }
    folder = out or run.path / "export" / kernel
    folder.mkdir(parents=True, exist_ok=True)
    call = ", ".join(p["name"] for p in params)
    what = ("the variant ranked first by a static estimate; NOT checked for correctness: no "
            "GPU ran it (measure it with evo measure on a GPU before use)" if static else
            "the fastest correct variant evo found")
    loader = _LOADER.format(kernel=kernel, what=what, run=run.path.name, call=call,
                            grid=tuple(launch["grid"]), block=tuple(launch["block"]),
                            genome=str(Genome.from_json(genome)))
    files = {f"{kernel}.ptx": ptx, f"{kernel}.cubin": compiled.cubin,
             f"{kernel}.launch.json": json.dumps(description, indent=1) + "\n",
             f"load_{kernel}.py": loader}
    written = []
    for name, content in files.items():
        write_atomic(folder / name, content)
        written.append(folder / name)
    if triton_dump is not None:
        written.append(triton_override(folder, spec, ptx, launch, triton_dump))
    return written


def triton_override(folder: Path, spec, ptx: str, launch: dict, dump: Path) -> Path:
    """``folder/triton_override/<hash>/<entry>.ptx``: the evolved PTX where Triton looks for
    a replacement of the kernel's PTX (``TRITON_KERNEL_OVERRIDE=1``,
    ``TRITON_OVERRIDE_DIR``). ``dump`` is a ``TRITON_KERNEL_DUMP`` folder of the user's
    program: the kernel is the dumped PTX equal to the spec's baseline, and ``<hash>`` its
    folder, Triton's key for the kernel. Triton launches with its own grid, block and ptxas
    options, so a genome that changed the launch or carries ptxas options cannot go there."""
    from genomes.ptxas_flags import flags_in

    if [list(launch["grid"]), list(launch["block"])] != [list(spec.grid), list(spec.block)]:
        raise EvoError(f"{spec.name}: the best genome changed the launch, which Triton "
                       "chooses itself; use load_*.py in place of the Triton call")
    if flags_in(ptx):
        raise EvoError(f"{spec.name}: the best genome sets ptxas options "
                       f"({' '.join(flags_in(ptx))}) that Triton's own ptxas call would "
                       "drop; use load_*.py in place of the Triton call")
    baseline = spec.ptx_path.read_text()
    found = [p for p in sorted(Path(dump).glob(f"*/{spec.entry}.ptx"))
             if p.read_text() == baseline]
    if not found:
        raise EvoError(f"{dump}: no dumped {spec.entry}.ptx equal to {spec.name}'s baseline "
                       "PTX (run the program with TRITON_KERNEL_DUMP=1 TRITON_DUMP_DIR="
                       f"{dump}, with the Triton version and arguments the spec came from)")
    target = folder / "triton_override" / found[0].parent.name / f"{spec.entry}.ptx"
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, ptx)
    return target


def cmd_export(args) -> int:
    from evo import exit_codes

    written = export_kernel(args.run, args.kernel, args.out, args.triton_dump)
    for path in written:
        print(f"wrote {path}")
    if args.triton_dump:  # the override file comes last: <folder>/triton_override/<hash>/
        print(f"run the program with TRITON_KERNEL_OVERRIDE=1 TRITON_ALWAYS_COMPILE=1 "
              f"TRITON_OVERRIDE_DIR={written[-1].parents[1]} to launch the evolved PTX")
    return exit_codes.OK
