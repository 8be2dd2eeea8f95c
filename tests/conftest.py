"""Shared test fixtures: the suite's PTX files, and the `gpu` marker's skip rule."""

from __future__ import annotations

import contextlib
import json
import shutil
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL_DIR = ROOT / "harness" / "kernels"


def suite_ptx_files() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.ptx"))


def _nvidia_device_present() -> bool:
    """Whether this machine has an NVIDIA GPU, asked without CuPy: the driver's device
    nodes (Linux) or nvidia-smi listing one."""
    if Path("/dev/nvidiactl").exists() or any(Path("/dev").glob("nvidia[0-9]*")):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    import subprocess

    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


@cache
def gpu_state() -> tuple[bool, str]:
    """(CuPy sees a CUDA device, why not). On a machine with an NVIDIA GPU a CuPy that
    cannot be imported or cannot see it is a failure of every GPU test, not a skip: a
    broken install must not pass as "no GPU" (issue 32)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        return count > 0, "" if count else "CuPy sees no CUDA device"
    except Exception as err:  # judged below: skip without a GPU, fail with one
        return False, f"{type(err).__name__}: {err}"


def gpu_available() -> bool:
    return gpu_state()[0]


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or gpu_available() or _nvidia_device_present():
        return  # with a GPU and a broken CuPy they fail: pytest_runtest_setup
    skip = pytest.mark.skip(reason=f"no GPU (CuPy cannot see a CUDA device: {gpu_state()[1]})")
    for item in gpu_items:
        item.add_marker(skip)


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not gpu_available():
        pytest.fail(f"this machine has an NVIDIA GPU, but CuPy cannot use it: {gpu_state()[1]}",
                    pytrace=False)


needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None and not (
    __import__("importlib").util.find_spec("nvidia") is not None), reason="ptxas not found")


def measuring(kernel: str, measure, code_keys=None, spec=None):
    """What ``evo.search.search_kernel`` measures through, from plain functions: a
    ``KernelRun``'s shape (``name``, ``spec``, ``measure``, ``code_keys``, ``changes_alone``)
    for fake measures (genes applicable where the spec is known: found here)."""
    from types import SimpleNamespace

    return SimpleNamespace(name=kernel, spec=spec, measure=measure, code_keys=code_keys,
                           changes_alone=None)


@contextlib.contextmanager
def gpu_evaluator(seed: int, store: bool = True):
    """An Evaluator measuring on GPU 0 (its worker started here, closed on the way out)
    over an in-memory store, or none (``store=False``): what GPU test modules set up."""
    from harness.backends.gpu import GpuBackend
    from harness.evaluate import Evaluator
    from harness.store import Store

    backend = GpuBackend([0], seed=seed)
    try:
        if store:
            with Store(":memory:") as memory:
                yield Evaluator(backend, memory)
        else:
            yield Evaluator(backend)
    finally:
        backend.close()


def capture_with_one_code(folder: Path, first: int, second: int, reads_sizes: bool = False):
    """A copy of the committed decoder capture (tests/data/capture/decoder) in ``folder``
    whose entries ``first`` and ``second`` are one compiled code that one launcher ran at
    two sizes (``reads_sizes``: and its code reads them): (manifest, first's entry,
    second's entry), the manifest written."""
    shutil.copytree(ROOT / "tests" / "data" / "capture" / "decoder", folder)
    data = json.loads((folder / "manifest.json").read_text())
    one, other = data["kernels"][first], data["kernels"][second]
    other["source"] = dict(one["source"])
    if reads_sizes:
        one["reads_sizes"] = other["reads_sizes"] = ["xnumel"]
    (folder / "manifest.json").write_text(json.dumps(data))
    return data, one, other


def first_genes_assembled(text: str, launch, seed, randoms: int, longest: int,
                          baseline: bool = False) -> tuple[list, list[str]]:
    """Each transform's first gene alone on ``text`` with ``launch`` (asserted applied or
    a no-op), then ``randoms`` random genomes of 2 to ``longest`` genes (the RNG seeded
    with ``seed``), assembled by ptxas, after the baseline itself where ``baseline``:
    (compile results, failures), where a register budget below what an instruction needs
    (wmma, wgmma) is ptxas's clean refusal, as a search meets it, not a failure."""
    import random

    from genomes.genome import Genome, apply_genome
    from genomes.variation import gene_alphabet, random_genome
    from harness.compile import compile_many

    first: dict = {}
    for gene in gene_alphabet():
        first.setdefault(gene.transform, gene)
    variants, labels = ([text], ["baseline"]) if baseline else ([], [])
    for gene in first.values():
        applied = apply_genome(text, Genome((gene,)), launch)
        outcome = applied.outcomes[0]
        assert outcome.status in ("applied", "no-op"), (gene, outcome.detail)
        if outcome.status == "applied":
            variants.append(applied.ptx)
            labels.append(str(gene))
    rng = random.Random(seed)
    for _ in range(randoms):
        variants.append(apply_genome(text, random_genome(rng, 2, longest), launch).ptx)
        labels.append("random genome")
    results = compile_many(variants)
    failures = [f"{label}: {r.error}" for label, r in zip(labels, results)
                if not r.ok and "Insufficient registers" not in r.error]
    return results, failures


@pytest.fixture
def widen_gene(monkeypatch):
    """A test transform ``widen`` that halves the grid (a launch-changing gene), registered
    for the test: whether an earlier gene keeps the launch it was applied for."""
    import genomes.transforms as transforms_mod
    from genomes.transforms.base import Transform

    def wider(module, launch):
        return 1, launch.with_shape((launch.grid[0] // 2, 1, 1), launch.block)

    widen = Transform(name="widen", group="widen", summary="test", applies_when="always",
                      params=(), apply=wider, edits_launch=True)
    table = {**transforms_mod.registry(), "widen": widen}
    monkeypatch.setattr(transforms_mod, "registry", lambda: table)
    return widen

