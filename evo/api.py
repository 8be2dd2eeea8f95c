"""evo from Python, in the spirit of Kernel Tuner's ``tune_kernel()``.

    from evo import api
    spec = api.kernel(ptx_text, grid=4096, block=256,
                      params=[api.buffer("x", "f32", n), api.buffer("y", "f32", n, role="out"),
                              api.scalar("n", "u32", n)])
    base = api.measure(spec, backend="static")              # a harness.record.Measurement
    results = api.run([spec], generations=2, backend="static")   # [RunResult], a run folder

``kernel`` builds a ``KernelSpec`` in code with the rules a spec file is read by
(``harness.kernels.spec.spec_from_table``): its PTX and a TOML spec are written to a folder (by
default ``<tmp>/evo-<uid>/kernels``, named by content), because the run folder, the
finalist check and ``evo run --resume`` name kernels by file. ``measure`` goes through the
same Evaluator as ``evo measure``; ``run`` the same ``evo.run.start_and_execute`` as
``evo run``. ``evo.run`` is that module, so the package exports this ``run`` as
``evo.evolve`` (``evo.kernel``, ``evo.measure``, ... are the functions below).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from genomes.errors import EvoError
from genomes.genome import Genome
from harness.record import Measurement
from harness.kernels.spec import (BufferParam, KernelSpec, ScalarParam, SpecError, Tolerance, load_spec,
                                  read_param, read_ptx, spec_from_table)
from harness.kernels.spec_ptx import check_ptx, choose_entry, ptx_entries
from harness.kernels.spec_write import file_stem, param_table, spec_toml

__all__ = ["RunResult", "buffer", "capture", "from_call", "from_triton", "from_triton_call", "kernel", "measure", "run",
           "scalar"]

TRITON_SCRATCH = ("global_scratch", "profile_scratch")  # the pointers Triton appends, in order


def buffer(name: str, dtype: str, count: int, role: str = "in", fill: str = "normal",
           **fill_opts) -> BufferParam:
    """A buffer param, as a ``[[params]]`` table with these keys would read: dtype (f32, i32,
    ...), element count, role in/out/inout, fill normal (mean, std) / uniform (low, high) /
    int (low, high) / const (value). A bad value is one SpecError naming the param."""
    table = {"name": name, "kind": "buffer", "dtype": dtype, "count": _plain(count), "role": role}
    if not (role == "out" and fill == "normal" and not fill_opts):  # an output is never filled
        table.update(fill=fill, **{k: _plain(v) for k, v in fill_opts.items()})
    return read_param(table, "evo.api.buffer")


def scalar(name: str, dtype: str, value: int | float) -> ScalarParam:
    """A scalar param passed by value (an int in the dtype's range, or a number)."""
    return read_param({"name": name, "kind": "scalar", "dtype": dtype, "value": _plain(value)},
                      "evo.api.scalar")


def kernel(ptx: str | Path, *, grid, block, params, entry: str | None = None, shared_mem: int = 0,
           timing: str | None = None, tolerance=(1e-5, 1e-5), reference: str | None = None,
           peer: str | None = None, name: str | None = None, caches: str = "warm",
           description: str = "", meta: Mapping | None = None,
           folder: str | Path | None = None) -> KernelSpec:
    """A KernelSpec built in code, checked as ``evo measure`` checks a spec file.

    ``ptx``: PTX text, or a path to a .ptx file. ``grid``/``block``: an int or up to three
    ints. ``params``: in PTX order, ``buffer(...)``/``scalar(...)`` or dicts with a
    ``[[params]]`` table's keys (``kind`` may be left out: buffer when there is a count).
    ``entry`` defaults to the PTX's only entry, ``name`` to the entry, ``timing`` to clock64
    for one block else events; ``tolerance`` is (rtol, atol). The PTX and a spec file go to
    ``folder`` (default ``<tmp>/evo-<uid>/kernels``); the spec's ``spec_path`` names it.
    """
    text = _ptx_text(ptx)
    entry = choose_entry(ptx_entries(text), entry)
    name = entry if name is None else name
    where = f"kernel {name!r}"
    table = {"name": name, "entry": entry, "grid": _dim3(grid), "block": _dim3(block),
             "shared_mem": _plain(shared_mem), "caches": caches, "description": description,
             "tolerance": _tolerance(tolerance, where),
             "params": ([_param(p, where, i) for i, p in enumerate(params)]
                        if isinstance(params, (list, tuple)) else params)}
    optional = {"timing": timing, "reference": reference, "peer": peer,
                "meta": dict(meta) if meta is not None else None}
    table.update({k: v for k, v in optional.items() if v is not None})
    out = _folder(folder)
    stem = file_stem(name)
    ptx_file = out / f"{stem}-{_digest(text)}.ptx"
    if not (ptx_file.is_file() and ptx_file.read_text() == text):
        _write(ptx_file, text)
    table["ptx"] = ptx_file.name
    settings = json.dumps(table, sort_keys=True, default=repr)
    toml_file = out / f"{stem}-{_digest(text + settings)}.toml"
    spec = spec_from_table(table, toml_file, where)
    check_ptx(dataclasses.replace(spec, spec_path=None), text)  # errors name the kernel
    _write(toml_file, spec_toml(spec, out))
    return spec


def from_triton(compiled, *, grid, params, block=None, name: str | None = None,
                **options) -> KernelSpec:
    """A KernelSpec for a Triton compiled kernel (``triton.compile(...)``'s result, or what
    launching a ``@triton.jit`` function returns), without importing Triton.

    Reads ``compiled.asm["ptx"]`` (the PTX, as Triton emits it), ``compiled.metadata``'s
    ``shared`` (dynamic shared memory), ``num_warps`` (block = 32 x warps unless ``block``
    is given), ``name`` (the entry; else ``compiled.name``, else the PTX's only entry) and,
    where present, ``global_scratch_size``/``profile_scratch_size``; ``metadata`` may be an
    object or a dict. ``params``: the kernel's own arguments in order, constexprs left out;
    where the PTX entry takes one or two pointers more, they are the scratch Triton appends
    (``TRITON_SCRATCH``), added as 256-byte zeroed u8 buffers. Other keywords go to
    ``kernel()`` (``entry=`` and ``shared_mem=`` there win over what is read here).
    """
    asm = getattr(compiled, "asm", None)
    text = asm.get("ptx") if isinstance(asm, Mapping) else None
    if not isinstance(text, str):
        raise SpecError(f"from_triton: {type(compiled).__name__} has no PTX text in "
                        f"asm['ptx']; pass the compiled kernel that triton.compile returns")
    entries = ptx_entries(text)
    entry = _triton_attr(compiled, "name")
    entry = entry if entry in entries else (next(iter(entries)) if len(entries) == 1 else None)
    if block is None:
        warps = _triton_attr(compiled, "num_warps")
        if not isinstance(warps, int) or warps <= 0:
            raise SpecError("from_triton: the compiled kernel has no metadata.num_warps; "
                            "pass block=")
        target = _triton_attr(compiled, "target")
        block = warps * getattr(target, "warp_size", 32)
    params = list(params)
    extra = len(entries.get(entry, ())) - len(params)
    for scratch in TRITON_SCRATCH[:extra] if 0 < extra <= len(TRITON_SCRATCH) else ():
        size = _triton_attr(compiled, f"{scratch}_size") or 0
        if size:  # the kernel reads and writes it: 256 zeroed bytes would not do
            raise SpecError(f"from_triton: the kernel uses Triton's {scratch} ({size} B per "
                            f"program); list it in params yourself, after the kernel's own")
        params.append(buffer(scratch, "u8", 256, role="in", fill="const", value=0))
    settings = {"entry": entry, "shared_mem": _triton_attr(compiled, "shared") or 0,
                "name": name, **options}  # the caller's entry= or shared_mem= wins
    return kernel(text, grid=grid, block=block, params=params, **settings)


def from_triton_call(fn, grid, *args, **kwargs) -> KernelSpec:
    """A KernelSpec from a real call ``fn[grid](*args, **kwargs)`` of a ``@triton.jit``
    function: the call is made once, and its arguments give the params (``evo.triton_call``).
    ``name=``, ``folder=`` and ``tolerance=`` are evo's; every other keyword is the call's."""
    from evo.triton_call import from_triton_call as from_call

    return from_call(fn, grid, *args, **kwargs)


def from_call(ptx, grid, block, *args, **options) -> KernelSpec:
    """A KernelSpec from a kernel's PTX and the arguments a program calls it with (arrays
    of NumPy, CuPy or PyTorch, and numbers), no value filled by hand: ``evo.ptx_call``."""
    from evo.ptx_call import from_call as spec_of_call

    return spec_of_call(ptx, grid, block, *args, **options)


def capture(fn, *inputs, out, warmup: int = 1, profile: bool = True) -> dict:
    """Capture the Triton kernels one call of ``fn(*inputs)`` (a step of a
    ``torch.compile``d program) launches into the folder ``out``: a spec per distinct
    kernel and ``manifest.json`` (launches, GPU time share). ``evo.model.capture``."""
    from evo.model.capture import capture as run_capture

    return run_capture(fn, *inputs, out=out, warmup=warmup, profile=profile)


def install(model, run):
    """The run's evolved kernels in this process's ``torch.compile``d program from now on:
    ``evo.model.install.install``."""
    from evo.model.install import install as put_in

    return put_in(model, run)


def measure(spec_or_name, genome=None, *, backend: str = "auto", store: str | Path | None = None,
            seed: int = 0, gpu: int = 0, device: str | None = None) -> Measurement:
    """One genome (inline text like ``"vec_ld(width=4)"``, a JSON file, a Genome, or None for
    the baseline) of one kernel (a KernelSpec, a suite name or a spec path), measured as
    ``evo measure`` does: ptxas, the store, then the backend ("auto", "gpu", "replay" or
    "static"; a static figure has ``timer == "static"``: an estimate, not a measurement).
    ``store``: the measurement store (default ``$EVO_STORE`` or runs/store.sqlite;
    ``":memory:"`` keeps nothing). A static figure that assembled has ``valid`` None, not
    True: no GPU ran the kernel, so its output was not checked (``unchecked``)."""
    from evo.kernel_run import one_evaluator

    spec, genome = _spec(spec_or_name), _genome(genome)
    with one_evaluator(backend, store, gpu, device, seed) as (evaluator, _):
        return unchecked(evaluator.evaluate(spec, [genome])[0])


def unchecked(m: Measurement) -> Measurement:
    """``m`` with ``valid`` None where it is a static estimate that assembled: the search
    ranks such figures (``valid`` True inside), a caller must not read them as checked."""
    if m.is_static and m.valid:
        return dataclasses.replace(m, valid=None,
                                   reason="not checked: a static estimate (no GPU ran the kernel)")
    return m


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One kernel's outcome of ``run``: cycles (None where invalid), the best genome, and
    the run folder (``best_ptx`` is the kernel's best PTX there). ``static``: the figures are
    the static backend's estimates, not measurements."""

    kernel: str
    baseline_cycles: float | None
    best_cycles: float | None
    speedup: float | None
    genome: Genome
    run_path: Path
    static: bool
    evals: int
    generations: int
    result: object = dataclasses.field(repr=False, compare=False)  # evo.search.KernelResult

    @property
    def best_ptx(self) -> Path:
        return self.run_path / "best" / f"{self.kernel}.ptx"

    def __str__(self) -> str:
        fig = lambda c: "-" if c is None else f"{c:.0f}"
        gain = f", {self.speedup:.2f}x" if self.speedup else ""
        tag = " (static estimate, not measured)" if self.static else ""
        return (f"{self.kernel}: {fig(self.baseline_cycles)} -> {fig(self.best_cycles)} cycles"
                f"{gain}{tag}, genome {self.genome or '(baseline)'}")


def run(kernels, *, generations: int = 9, pop: int = 5, strategy: str = "evolve",
        backend: str = "auto", seed: int = 1, out: str | Path | None = None,
        priors: str = "auto", store: str | Path | None = None,
        config_file: str | Path | None = None, verbosity: int = 0, **config) -> list[RunResult]:
    """Evolve kernels as ``evo run`` does and return one RunResult per kernel.

    ``kernels``: one or a list of KernelSpecs, suite names, glob patterns or spec paths.
    ``out``: the run folder (default runs/<time>); ``store`` default runs/store.sqlite.
    ``config_file``: an evo.toml to start from (default: evo's defaults; the CLI's implicit
    ./evo.toml is not read). More ``[run]`` keys as keywords (``max_evals=45``), other
    sections as dicts (``evolve={"elites": 2}``); ``verbosity`` 1 shows progress on stderr.
    """
    from evo import config as config_mod
    from evo import report
    from evo import run as run_mod
    from evo.search import valid_cycles

    items = [kernels] if isinstance(kernels, (str, Path, KernelSpec)) else list(kernels)
    suite = _suite(items)
    names = {f.name for f in dataclasses.fields(config_mod.Config)}  # run, evolve, timing, ...
    sections = {k: config.pop(k) for k in list(config) if k in names}
    cfg = config_mod.load(config_file).override(
        "run", suite=suite, generations=generations, pop=pop, strategy=strategy,
        backend=backend, seed=seed, priors=priors, store=None if store is None else str(store),
        **config)
    for section, values in sections.items():
        if not isinstance(values, Mapping):
            raise config_mod.ConfigError(f"{section}= must be a dict of [{section}] keys")
        cfg = cfg.override(section, **values)
    rundir, results = run_mod.start_and_execute(cfg, Path(out) if out is not None else None,
                                                verbosity, list(sys.argv))
    return [RunResult(r.kernel, valid_cycles(r.baseline), valid_cycles(r.best), report.speedup(r),
                      Genome.from_json(r.best_genome), rundir.path.resolve(),
                      (r.best or r.baseline or {}).get("timer") == "static", r.evals,
                      r.generations, r) for r in results]


# --- helpers ----------------------------------------------------------------------------

def _ptx_text(ptx) -> str:
    """PTX text as given, or read from a path (a string with no newline and no .entry)."""
    if isinstance(ptx, Path) or (isinstance(ptx, str) and "\n" not in ptx and ".entry" not in ptx):
        path = Path(ptx).expanduser()
        if not path.is_file():
            raise SpecError(f"no such PTX file: {path} (give PTX text or a .ptx path)")
        return read_ptx(path)
    if not isinstance(ptx, str):
        raise SpecError(f"ptx must be PTX text or a path, got {type(ptx).__name__}")
    return ptx


def _plain(value):
    """A NumPy scalar (``np.int32(n)``, as Kernel Tuner users write) as the Python number it
    holds: the spec reader takes Python ints and floats, as TOML gives them."""
    return value.item() if type(value).__module__ == "numpy" and hasattr(value, "item") else value


def _dim3(value):
    """An int or 1-3 ints as the [x, y, z] a spec holds; anything else as given, for the
    spec reader to reject by name."""
    value = [_plain(v) for v in value] if isinstance(value, (list, tuple)) else _plain(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, 1, 1]
    if isinstance(value, (list, tuple)) and 1 <= len(value) <= 3:
        return list(value) + [1] * (3 - len(value))
    return value


def _tolerance(value, where: str) -> dict:
    if isinstance(value, Tolerance):
        return {"rtol": value.rtol, "atol": value.atol}
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return {"rtol": value[0], "atol": value[1]}
    if isinstance(value, Mapping):
        return dict(value)
    raise SpecError(f"{where}: tolerance must be (rtol, atol), got {value!r}")


def _param(param, where: str, index: int) -> dict:
    """One param as its table; objects go through read_param again with the rest."""
    if isinstance(param, (BufferParam, ScalarParam)):
        return param_table(param)
    if isinstance(param, Mapping):
        table = {key: _plain(value) for key, value in param.items()}
        table.setdefault("kind", "buffer" if "count" in table else "scalar")
        return table
    raise SpecError(f"{where}: params[{index}] must be buffer(...), scalar(...) or a dict, "
                    f"got {param!r}")


def _folder(folder) -> Path:
    if folder is None:
        user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
        folder = Path(tempfile.gettempdir()) / f"evo-{user}" / "kernels"
    return Path(folder).expanduser().resolve()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _write(path: Path, text: str) -> None:
    from evo.rundir import write_atomic  # atomic: another process may read the same file

    write_atomic(path, text)


def _triton_attr(compiled, key: str):
    meta = getattr(compiled, "metadata", None)
    value = meta.get(key) if isinstance(meta, Mapping) else getattr(meta, key, None)
    return value if value is not None else getattr(compiled, key, None)


def _spec(spec_or_name) -> KernelSpec:
    if isinstance(spec_or_name, KernelSpec):
        check_ptx(spec_or_name)
        return spec_or_name
    if isinstance(spec_or_name, (str, Path)):
        from harness.kernels.suite import find_kernel

        return find_kernel(spec_or_name)
    raise EvoError(f"a kernel is a KernelSpec, a suite name or a spec path, got {spec_or_name!r}")


def _genome(genome) -> Genome:
    from genomes.genome import load_genome

    if genome is None or isinstance(genome, Genome):
        return genome or Genome()
    if isinstance(genome, Path):
        return load_genome(str(genome))
    if isinstance(genome, str):
        return load_genome(genome)
    if isinstance(genome, (dict, list)):
        return Genome.from_json(genome)
    raise EvoError(f"a genome is inline text, a JSON file, a Genome or None, got {genome!r}")


def _suite(items: list) -> list[str]:
    """What ``[run] suite`` holds for each kernel: names and paths as given; a KernelSpec as
    its spec file, written anew where the spec differs from its file (or has none)."""
    suite, named = [], {}
    for item in items:
        if isinstance(item, KernelSpec):
            path = _spec_file(item)
            if named.setdefault(item.name, path) != path:
                raise EvoError(f"two different kernels are named {item.name!r}: give one "
                               f"another name (kernel(..., name=...))")
            suite.append(str(path))
        elif isinstance(item, (str, Path)):
            suite.append(str(item))
        else:
            raise EvoError(f"a kernel is a KernelSpec, a suite name or a spec path, got {item!r}")
    return suite


def _spec_file(spec: KernelSpec) -> Path:
    if spec.spec_path is not None and spec.spec_path.is_file():
        try:
            if load_spec(spec.spec_path) == spec:
                return spec.spec_path
        except SpecError:
            pass
    text = spec_toml(spec)
    path = _folder(None) / f"{file_stem(spec.name)}-{_digest(text)}.toml"
    _write(path, text)
    return path


