"""Measurement backends: who turns compiled variants into Measurements.

Every backend has the same small interface, so the evaluation pipeline (harness/evaluate.py)
does not care whether numbers come from a GPU, from the store, or from a static estimate:

* ``name``: "gpu", "replay" or "static"; ``device``: the device name results are stored
  under (a GPU's name, or ``"static"``);
* ``writes_store``: whether the pipeline should store what it answers (replay: no);
* ``compile_many(ptx_list, arch, workers) -> list[CompileResult]``: ptxas over the batch
  (default: threads on this host; the cluster backend may compile on its workers' hosts);
* ``measure_many(spec, variants, baseline=None) -> list[Measurement]``, one per variant, in
  order. Every variant handed over compiled cleanly and has a unique ``code_hash``;
  ``baseline`` is the kernel's baseline measurement when known (for the >10x flag);
* ``offers() -> dict``: what it can do at once, for the caller to size its work:
  ``measure_slots`` (candidates measured at once: GPUs, cluster workers) and
  ``compile_slots`` (ptxas processes at once);
* ``close()``.

``make_backend("auto" | "gpu" | "replay" | "static", ...)`` builds one; "auto" picks the GPU
when CuPy imports and sees a device, else static, and says which in ``chosen_because``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from genomes.errors import EvoError
from genomes.genome import GeneOutcome, Genome
from genomes.launch import Launch
from harness.compile import CompileResult, compile_many
from harness.record import Measurement

BACKENDS = ("auto", "gpu", "replay", "static")


@dataclass
class Variant:
    """One candidate on its way through the pipeline: genome, PTX, and once compiled, code.

    ``code_hash`` is :func:`harness.store.code_hash` of the compiled cubin (and, like
    ``ptx_hash``, ends in the spec's ``launch_suffix`` when the launch is not the spec's);
    ``is_baseline``
    marks the kernel's own unmodified PTX (checked against the NumPy reference, not itself).
    """

    genome: Genome
    ptx: str
    ptx_hash: str
    outcomes: list[GeneOutcome] = field(default_factory=list)
    compiled: CompileResult | None = None
    code_hash: str = ""
    is_baseline: bool = False
    twin_ptx: str | None = None  # the PTX with its clock64 twin entry, made in the apply pool
    clock_cubin: bytes | str | None = None  # gpu backend: instrumented cubin (or why none)
    clock_entry: str | None = None  # the entry of clock_cubin to time (None: the spec's)
    launch: Launch | None = None  # the launch its genome implies (None: the spec's own)


class Backend:
    """The interface every backend implements (see the module docstring)."""

    name = "backend"
    device = ""
    writes_store = True
    wants_clock_ptx = False  # whether clock64 variants should come with their clock64 twin (gpu)
    remeasures = False  # a second measurement of the same code is a new reading (gpu), not a copy
    lend = None  # or lend(share, device) -> one GPU's id, kept from measurements while held (gpu)
    book = None  # or book() -> the GPU a finalist check's processes will run on (gpu)
    chosen_because = ""

    def compile_many(self, ptx_list: list[str], arch: str, workers: int) -> list[CompileResult]:
        """Each PTX assembled by ptxas, in order (``harness.compile.compile_many``)."""
        return compile_many(ptx_list, arch, workers=workers)

    def offers(self) -> dict:
        """What the backend does at once (module docstring): one candidate, ptxas on every
        core here."""
        return {"measure_slots": 1, "compile_slots": os.cpu_count() or 1}

    def prepare(self, spec, variants: list[Variant]) -> None:
        """CPU work ahead of ``measure_many`` (run while another batch is measured)."""

    def measure_many(self, spec, variants: list[Variant],
                     baseline: Measurement | None = None) -> list[Measurement]:
        raise NotImplementedError

    def describe(self) -> str:
        """One line for reports: backend, device, and why it was chosen."""
        why = f" ({self.chosen_because})" if self.chosen_because else ""
        return f"{self.name} on {self.device}{why}"

    def close(self) -> None:
        """Release what the backend holds (GPU worker processes); safe to call twice."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def gpu_visible() -> tuple[bool, str]:
    """(True, "") when CuPy imports and sees at least one CUDA device, else (False, why)."""
    try:
        import cupy
    except Exception as err:  # ImportError, or a CUDA library that fails to load
        return False, f"CuPy not importable ({type(err).__name__})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:
        return False, f"CuPy sees no CUDA device ({err})"
    return (count > 0, "" if count > 0 else "CuPy sees no CUDA device")


def make_backend(kind: str, *, store=None, gpus: list[int] | None = None, device: str | None = None,
                 seed: int = 0, arch: str = "sm_90", timing: dict | None = None,
                 cluster: str = "", cluster_compile: str = "auto") -> Backend:
    """Build a backend by name. ``store`` is needed by replay; ``gpus`` by gpu (default [0]);
    ``device`` names replay's device (default: the store's only GPU device); ``timing``
    holds the gpu backend's measuring knobs (check_sets, warmup, min_reps, max_reps,
    target_rel_sem, timeout_s), as in evo.toml's [timing]. ``cluster`` (``local[:N]`` or a
    Dask scheduler address): measure on that cluster's workers with the gpu or static
    backend (``harness.backends.cluster``; auto: gpu when every worker sees a GPU);
    ``cluster_compile``: where its ptxas runs (``harness.backends.cluster.COMPILE_ON``)."""
    if kind not in BACKENDS:
        raise EvoError(f"unknown backend {kind!r}; one of {', '.join(BACKENDS)}")
    if cluster:
        from harness.backends.cluster import ClusterBackend

        return ClusterBackend(cluster, kind, {"seed": seed, "arch": arch, "timing": timing},
                              compile_on=cluster_compile)
    why = ""
    if kind == "auto":
        ok, reason = gpu_visible()
        kind, why = ("gpu", "auto: CuPy sees a GPU") if ok else ("static", f"auto: {reason}")
    if kind == "gpu":
        from harness.backends.gpu import GpuBackend

        knobs = dict(timing or {})
        extra = {k: knobs.pop(k) for k in ("check_sets", "timeout_s") if k in knobs}
        backend: Backend = GpuBackend(gpus or [0], seed=seed, arch=arch, timing=knobs, **extra)
    elif kind == "replay":
        from harness.backends.replay import ReplayBackend

        if store is None:
            raise EvoError("the replay backend needs a measurement store (--store)")
        backend = ReplayBackend(store, device)
    else:
        from harness.backends.static import StaticBackend

        backend = StaticBackend()
    backend.chosen_because = why or backend.chosen_because
    return backend


__all__ = ["BACKENDS", "Backend", "Variant", "gpu_visible", "make_backend"]
