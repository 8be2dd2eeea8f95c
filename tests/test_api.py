"""The Python API (evo/api.py): specs built in code, measure and run on the static backend,
the README's example."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, needs_ptxas
from evo import api
from evo.config import ConfigError
from genomes.errors import EvoError
from genomes.genome import Genome
from harness.kernels.spec import SpecError, load_spec
from harness.kernels.spec_write import spec_toml
from harness.kernels.suite import find_kernel, list_kernels

TRITON = ROOT / "tests" / "data" / "unseen" / "triton"
N = 1 << 20


@pytest.fixture(autouse=True)
def own_tmp(tmp_path, monkeypatch):
    """Kernels built in code go under tmp_path, not the user's temp folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def same_effect(a, b) -> None:
    """Two specs that launch and check the same thing (the files they sit in aside)."""
    skip = {"ptx_path", "spec_path"}
    for f in dataclasses.fields(a):
        if f.name not in skip:
            assert getattr(a, f.name) == getattr(b, f.name), f.name
    assert a.ptx_text() == b.ptx_text()


def relu_params():
    return [api.buffer("x", "f32", N), api.buffer("y", "f32", N, role="out"),
            api.scalar("n", "u32", N)]


def relu(**kw):
    suite = find_kernel("relu")
    return api.kernel(suite.ptx_text(), grid=N // 256, block=256, tolerance=(0.0, 0.0),
                      params=relu_params(), **kw)


# ------------------------------------------------------------------ specs built in code
def test_kernel_equals_load_spec_of_the_same_toml():
    want = find_kernel("relu")
    spec = relu(reference="relu", peer="harness.kernels.peers:relu", description=want.description)
    same_effect(spec, want)
    assert load_spec(spec.spec_path) == spec  # the file it names reads back to itself
    folder = Path(tempfile.gettempdir()).resolve() / f"evo-{os.getuid()}" / "kernels"
    assert spec.ptx_path.parent == spec.spec_path.parent == folder

    want = load_spec(TRITON / "leaky_relu.toml")
    params = [{"name": "x", "dtype": "f32", "count": N, "role": "in", "fill": "normal"},
              {"name": "y", "dtype": "f32", "count": N, "role": "out"},
              {"name": "n", "dtype": "i32", "value": N}, api.scalar("slope", "f32", 0.01)]
    params += [api.buffer(s, "u8", 256, fill="const", value=0) for s in api.TRITON_SCRATCH]
    spec = api.kernel(TRITON / "leaky_relu.ptx", grid=(1024,), block=[128, 1], params=params,
                      tolerance=(1e-5, 1e-6), description=want.description, name="leaky_relu",
                      peer=want.peer)
    same_effect(spec, want)
    assert spec.timing == "events" and spec.entry == "leaky_relu"


def test_same_kernel_same_files_and_folder_option(tmp_path):
    a, b = relu(), relu()
    assert a == b and a.spec_path == b.spec_path
    c = relu(folder=tmp_path / "mine")
    assert c.spec_path.parent == tmp_path / "mine" and 'ptx = "relu-' in c.spec_path.read_text()
    # not a suite name: stored under its name and what it measures (KernelSpec.store_name)
    assert re.fullmatch(r"relu_cold@cold#[0-9a-f]{12}", relu(name="relu_cold", caches="cold").store_name)
    odd = relu(name="relu odd", description='a "quoted"\tline\n', meta={"odd key": 1, "on": True,
                                                                         "s": "\\x", "f": 0.5})
    assert load_spec(odd.spec_path) == odd and odd.spec_path.name.startswith("relu_odd-")


def test_numpy_scalars_are_plain_numbers():
    np = pytest.importorskip("numpy")
    n = np.int32(N)
    spec = api.kernel(find_kernel("relu").ptx_text(), grid=np.int64(N // 256),
                      block=(np.int32(256),),
                      params=[api.buffer("x", "f32", n, fill="uniform", low=np.float32(-1)),
                              {"name": "y", "dtype": "f32", "count": n, "role": "out"},
                              api.scalar("n", "u32", n)])
    assert spec.grid == (N // 256, 1, 1) and spec.params[2].value == N
    assert type(spec.params[0].count) is int and spec.params[0].low == -1.0


def test_spec_files_round_trip_every_suite_spec(tmp_path):
    for spec in list_kernels() + [load_spec(p) for p in sorted(TRITON.glob("*.toml"))]:
        path = tmp_path / f"{spec.name}.toml"
        path.write_text(spec_toml(spec))
        assert dataclasses.replace(load_spec(path), spec_path=spec.spec_path) == spec, spec.name


@pytest.mark.parametrize("make, words", [
    (lambda: api.buffer("x", "f32", 0), ["param 'x'", "'count'", "positive"]),
    (lambda: api.buffer("x", "f23", 4), ["param 'x'", "'dtype'", "did you mean 'f32'"]),
    (lambda: api.buffer("x", "f32", 4, role="output"), ["param 'x'", "'role'", "'output'"]),
    (lambda: api.buffer("x", "f32", 4, lo=0), ["param 'x'", "unknown key 'lo'", "'low'"]),
    (lambda: api.buffer("x", "f32", 4, fill="uniform", low=2, high=1), ["param 'x'", "low < high"]),
    (lambda: api.buffer("x", "i32", 4), ["param 'x'", "float dtype"]),
    (lambda: api.scalar("n", "u32", -1), ["param 'n'", "'value'"]),
    (lambda: relu_kernel([{"name": "x", "dtype": "f32", "count": -1}, *relu_params()[1:]]),
     ["kernel 'relu'", "param 'x'", "'count'"]),
    (lambda: relu_kernel(relu_params() + [api.scalar("x", "f32", 1.0)]), ["'x'", "twice"]),
    (lambda: relu_kernel(relu_params()[:2]), ["relu", "2 params", "takes 3"]),
    (lambda: relu_kernel(relu_params()[:2] + [api.scalar("n", "f64", 1.0)]),
     ["param 'n'", "64 bits", "relu_param_2"]),
    (lambda: relu_kernel(relu_params()[:2] + [7]), ["kernel 'relu'", "params[2]"]),
    (lambda: relu_kernel(relu_params(), block=2048), ["kernel 'relu'", "2048 threads"]),
    (lambda: relu_kernel(relu_params(), timing="clock64"), ["kernel 'relu'", "clock64"]),
    (lambda: relu_kernel(relu_params(), entry="relu2"), ["'relu2'", "did you mean 'relu'"]),
    (lambda: api.kernel("missing.ptx", grid=1, block=1, params=[]), ["missing.ptx"]),
])
def test_bad_params_give_one_error_naming_them(make, words):
    with pytest.raises(SpecError) as err:
        make()
    message = str(err.value)
    assert "\n" not in message and isinstance(err.value, EvoError)
    for word in words:
        assert word in message, (word, message)


def relu_kernel(params, **kw):
    kw.setdefault("block", 256)
    return api.kernel(find_kernel("relu").ptx_text(), grid=N // 256, params=params, **kw)


# ------------------------------------------------------------------ Triton
def fake_compiled(name: str, shared: int, dict_metadata: bool = False, **extra):
    """What from_triton reads of triton.compile's result, and nothing more."""
    meta = {"name": name, "shared": shared, "num_warps": 4, **extra}
    return SimpleNamespace(asm={"ptx": (TRITON / f"{name}.ptx").read_text()}, name=name,
                           metadata=meta if dict_metadata else SimpleNamespace(**meta))


def test_from_triton_adds_scratch_and_reads_shared_memory_and_block():
    want = load_spec(TRITON / "leaky_relu.toml")
    own = want.params[:4]
    spec = api.from_triton(fake_compiled("leaky_relu", 0), grid=1024, params=list(own),
                           tolerance=(1e-5, 1e-6), description=want.description, peer=want.peer)
    same_effect(spec, want)
    want = load_spec(TRITON / "rms_norm.toml")
    spec = api.from_triton(fake_compiled("rms_norm", 16, dict_metadata=True,
                                         global_scratch_size=0, profile_scratch_size=0),
                           grid=1024, params=list(want.params[:5]), tolerance=(1e-5, 1e-6),
                           description=want.description, peer=want.peer)
    same_effect(spec, want)
    assert spec.shared_mem == 16 and spec.block == (128, 1, 1)
    given = api.from_triton(fake_compiled("rms_norm", 16), grid=1024, params=list(want.params),
                            shared_mem=32)  # scratch given: none added; shared_mem= wins
    assert given.params == want.params and given.shared_mem == 32


def test_from_triton_says_what_it_cannot_do():
    own = list(load_spec(TRITON / "leaky_relu.toml").params[:4])
    with pytest.raises(SpecError, match="global_scratch .64 B per program"):
        api.from_triton(fake_compiled("leaky_relu", 0, global_scratch_size=64), grid=1024,
                        params=own)
    no_warps = fake_compiled("leaky_relu", 0)
    del no_warps.metadata.num_warps
    with pytest.raises(SpecError, match="block="):
        api.from_triton(no_warps, grid=1024, params=own)
    assert api.from_triton(no_warps, grid=1024, block=128, params=own).block == (128, 1, 1)
    with pytest.raises(SpecError, match="asm"):
        api.from_triton(object(), grid=1, params=[])
    with pytest.raises(SpecError, match="dynamic shared memory"):  # metadata.shared missing
        api.from_triton(fake_compiled("rms_norm", 0), grid=1024,
                        params=list(load_spec(TRITON / "rms_norm.toml").params[:5]))


# ------------------------------------------------------------------ measure and run
@needs_ptxas
def test_measure_baseline_and_genome_on_static(tmp_path):
    spec, store = relu(), tmp_path / "store.sqlite"
    base = api.measure(spec, backend="static", store=store)
    # valid None: it assembled, and no GPU ran it, so its output was not checked
    assert base.valid is None and base.is_static and base.cycles > 0
    assert "static estimate, not measured; output not checked" in base.label()
    assert base.reason.startswith("not checked") and base.fitness == base.cycles
    m = api.measure(spec, "coarsen(k=4)", backend="static", store=store)
    assert m.valid is None and m.is_static and [g["status"] for g in m.notes["genes"]] == ["applied"]
    again = api.measure(spec, Genome.from_json(["coarsen(k=4)"]), backend="static", store=store)
    assert again.cached and again.cycles == m.cycles
    assert api.measure("relu", backend="static", store=":memory:").cycles > 0  # a suite name
    broken = spec.ptx_text().replace("ret;", "bogus_op;", 1)  # ptxas refuses it: checked, False
    bad = api.measure(api.kernel(broken, grid=spec.grid, block=spec.block, params=list(spec.params)),
                      backend="static", store=":memory:")
    assert bad.valid is False and bad.reason.startswith("ptxas error")
    with pytest.raises(EvoError, match="replay"):
        api.measure(spec, backend="replay", store=tmp_path / "absent.sqlite")
    with pytest.raises(EvoError):
        api.measure(spec, "no_such_gene(k=1)", backend="static", store=":memory:")


@needs_ptxas
def test_run_returns_objects_and_writes_a_run_folder(tmp_path):
    spec = relu()
    out = tmp_path / "runs" / "api"
    results = api.run([spec, "saxpy"], generations=2, pop=3, backend="static",
                      seed=3, out=out, priors="none", store=tmp_path / "store.sqlite",
                      max_evals=20, evolve={"elites": 1})
    assert [r.kernel for r in results] == ["relu", "saxpy"]
    for r in results:
        assert isinstance(r, api.RunResult) and r.static and r.run_path == out.resolve()
        assert r.baseline_cycles > 0 and r.best_cycles <= r.baseline_cycles
        assert r.speedup == pytest.approx(r.baseline_cycles / r.best_cycles)
        assert isinstance(r.genome, Genome) and r.best_ptx.is_file() and r.generations == 2
        assert "static estimate, not measured" in str(r)
    for name in ("config.toml", "meta.json", "events.jsonl", "checkpoint.json", "report.md"):
        assert (out / name).is_file(), name
    assert str(spec.spec_path) in (out / "config.toml").read_text()
    best = json.loads((out / "best" / "relu.genome.json").read_text())
    assert best == results[0].genome.to_json()


def test_run_checks_its_config_before_making_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'generatoins'"):
        api.run("relu", out=tmp_path / "r", generatoins=2)
    with pytest.raises(ConfigError, match="elitez"):
        api.run("relu", out=tmp_path / "r", evolve={"elitez": 2})
    assert not (tmp_path / "r").exists()


def test_run_names_specs_by_a_file_that_reads_back_to_them():
    spec = relu()
    assert api._suite([spec, "relu_dram"]) == [str(spec.spec_path), "relu_dram"]
    changed = dataclasses.replace(spec, grid=(2048, 1, 1))  # its file says 4096
    (path,) = api._suite([changed])
    assert path != str(spec.spec_path) and load_spec(path) == dataclasses.replace(
        changed, spec_path=Path(path))
    with pytest.raises(EvoError, match="two different kernels are named 'relu'"):
        api._suite([spec, changed])


def test_import_evo_stays_cheap_and_exports_the_api_lazily():
    code = ("import sys, evo; assert 'evo.api' not in sys.modules and 'numpy' not in sys.modules;"
            "from evo import api; assert evo.kernel is api.kernel and evo.evolve is api.run;"
            "from evo import run; assert run.__name__ == 'evo.run'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@needs_ptxas
def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert 'backend=BACKEND' in code and 'BACKEND = "static"' in code
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "static estimate, not measured" in out and "valid: None" in out  # not checked
    assert (tmp_path / "runs" / "relu_api" / "report.md").is_file()
