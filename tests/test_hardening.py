"""Issue 13 ("Hardening"), CPU side: one test per row of its table. Each bad input is one
line naming the problem and what to do, a non-zero exit, no traceback, nothing half-written.
Real ptxas, real SQLite; `evo run` on the static backend."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT, gpu_available, needs_ptxas
from evo.cli import build_parser, main
from evo.exit_codes import FAILURE

KERNEL = "gemm_tile_2x2x2"
SUITE = ROOT / "harness" / "kernels"
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0


def evo(*args, cwd, umask: int = -1) -> subprocess.CompletedProcess:
    """The real entry point in a subprocess: exactly what a user sees."""
    return subprocess.run([sys.executable, "-m", "evo.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, umask=umask)


def one_line(rc: int, err: str, *needles: str, code: int = 2) -> str:
    """Assert a one-line error (after any progress lines) and return it."""
    assert rc == code and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("evo: error:")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    for needle in needles:
        assert needle in errors[0], err
    return errors[0]


def fails(capsys, args, *needles, code: int = 2) -> str:
    rc = main([str(a) for a in args])
    return one_line(rc, capsys.readouterr().err, *needles, code=code)


def static_run(out, store, *extra) -> list:
    return ["run", "--kernel", KERNEL, "--backend", "static", "--generations", "1", "--pop", "2",
            "--seed", "3", "--store", store, "--out", out, "-q", *extra]


def copy_kernel(dest, name: str, edit=lambda text: text):
    """gemm_tile_2x2x2 under another name in ``dest`` (its own .ptx), the spec edited."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(SUITE / f"{KERNEL}.ptx", dest / f"{name}.ptx")
    text = (SUITE / f"{KERNEL}.toml").read_text()
    text = text.replace(f'name = "{KERNEL}"', f'name = "{name}"')
    text = text.replace(f'ptx = "{KERNEL}.ptx"', f'ptx = "{name}.ptx"')
    (dest / f"{name}.toml").write_text(edit(text))
    return dest / f"{name}.toml"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """One finished static run, written under umask 027."""
    tmp = tmp_path_factory.mktemp("small")
    proc = evo(*static_run(tmp / "run", tmp / "store.sqlite"), cwd=tmp, umask=0o027)
    assert proc.returncode == 0, proc.stderr
    return tmp / "run"


# ------------------------------------------------------------ a binary file given as PTX
@needs_ptxas
@pytest.mark.parametrize("command", ["compile", "init-kernel", "apply", "run"])
def test_binary_file_as_ptx(tmp_path, command):
    from harness.compile import compile_ptx

    cubin = compile_ptx((SUITE / f"{KERNEL}.ptx").read_text()).cubin
    (tmp_path / "bin.ptx").write_bytes(cubin)  # the likely mistake: a cubin named .ptx
    args = {"compile": ["compile", "bin.ptx"],
            "init-kernel": ["init-kernel", "bin.ptx"],
            "apply": ["apply", "vec_ld", "bin.ptx", "-o", "out.ptx"],
            "run": ["run", "--kernel", "bin.toml", "--backend", "static", "--out", "r",
                    "--store", "s.sqlite", "-q"]}[command]
    if command == "run":
        copy_kernel(tmp_path, "bin")
        (tmp_path / "bin.ptx").write_bytes(cubin)
    before = set(os.listdir(tmp_path))
    proc = evo(*args, cwd=tmp_path)
    one_line(proc.returncode, proc.stderr, "bin.ptx: not a PTX text file", "nvcc -ptx")
    assert set(os.listdir(tmp_path)) == before  # no bin.toml, no out.ptx, no run folder


# ------------------------------------------------------------ --out naming a file
def test_out_names_an_existing_file(tmp_path, capsys):
    (tmp_path / "f").write_text("mine")
    fails(capsys, static_run(tmp_path / "f", tmp_path / "s.sqlite"), "is a file, not a run folder",
          "--out")
    assert (tmp_path / "f").read_text() == "mine"


# ------------------------------------------------------------ read-only output
def test_out_under_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("mine")
    fails(capsys, static_run(tmp_path / "f" / "run", tmp_path / "s.sqlite"),
          "cannot create run folder", "is a file, not a folder", "--out", code=FAILURE)


def test_default_runs_folder_unwritable(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    proc = evo("run", "--kernel", KERNEL, "--backend", "static", "--store", "s.sqlite", "-q",
               cwd=tmp_path)
    one_line(proc.returncode, proc.stderr, "runs is a file, not a folder", "--out", code=FAILURE)


@needs_ptxas
def test_init_kernel_and_apply_output_unwritable(tmp_path, capsys):
    (tmp_path / "f").write_text("mine")
    shutil.copy(SUITE / f"{KERNEL}.ptx", tmp_path / "k.ptx")
    fails(capsys, ["init-kernel", tmp_path / "k.ptx", "-o", tmp_path / "f" / "k.toml"],
          "cannot write", "is a file, not a folder", code=FAILURE)
    fails(capsys, ["apply", "vec_ld", KERNEL, "-o", tmp_path / "f" / "v.ptx"],
          "cannot write", "is a file, not a folder", code=FAILURE)
    assert sorted(os.listdir(tmp_path)) == ["f", "k.ptx"]


@needs_ptxas
def test_plot_into_unwritable_folder(small_run, tmp_path, capsys):
    run = shutil.copytree(small_run, tmp_path / "run")
    shutil.rmtree(run / "plots", ignore_errors=True)
    (run / "plots").write_text("not a folder")
    fails(capsys, ["plot", run], "cannot write", "plots is a file, not a folder", code=FAILURE)


@needs_ptxas
def test_resume_with_unwritable_events(small_run, tmp_path, capsys):
    run = shutil.copytree(small_run, tmp_path / "run")
    (run / "events.jsonl").unlink()
    (run / "events.jsonl").mkdir()  # unwritable even for root
    fails(capsys, ["run", "--resume", run, "--generations", "2", "-q"],
          "cannot write to run folder", "events.jsonl", code=FAILURE)


@needs_ptxas
@pytest.mark.skipif(ROOT_USER, reason="root writes through chmod; the variants above cover it")
def test_read_only_permissions(small_run, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    run = shutil.copytree(small_run, tmp_path / "run")
    shutil.rmtree(run / "plots", ignore_errors=True)
    (run / "events.jsonl").chmod(0o444)
    ro.chmod(0o555)
    run.chmod(0o555)
    try:
        fails(capsys, static_run(ro / "run", tmp_path / "s.sqlite"), "cannot create run folder",
              code=FAILURE)
        fails(capsys, ["apply", "vec_ld", KERNEL, "-o", ro / "v.ptx"], "cannot write",
              code=FAILURE)
        fails(capsys, ["plot", run], "cannot write", code=FAILURE)
        fails(capsys, ["run", "--resume", run, "-q"], "cannot write to run folder", code=FAILURE)
    finally:
        ro.chmod(0o755)
        run.chmod(0o755)


# ------------------------------------------------------------ a store with a damaged middle
@pytest.fixture
def damaged_store(tmp_path):
    from harness.record import Measurement
    from harness.store import Store

    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        for i in range(1500):
            store.put("NVIDIA H200", f"k{i % 7}", f"p{i}", f"c{i}",
                      Measurement(kernel=f"k{i % 7}", device="NVIDIA H200", valid=True,
                                  cycles=100.0 + i, timer="clock64", n=5,
                                  notes={"pad": "x" * 200}))
    size = path.stat().st_size
    assert size > 200_000 and not (tmp_path / "store.sqlite-wal").exists()
    with open(path, "r+b") as f:  # 4 KB of garbage in the middle
        f.seek(size // 2)
        f.write(random.Random(13).randbytes(4096))
    return path


def test_damaged_store_is_reported_with_a_way_out(damaged_store, tmp_path, capsys):
    line = fails(capsys, static_run(tmp_path / "run", damaged_store), "is damaged",
                 f"evo store repair {damaged_store}", code=FAILURE)
    assert "store.sqlite" in line and not (tmp_path / "run").exists()
    fails(capsys, ["store", "stats", damaged_store], "is damaged", "evo store repair",
          code=FAILURE)
    fails(capsys, ["measure", KERNEL, "--backend", "static", "--store", damaged_store],
          "is damaged", code=FAILURE)


def test_store_check_and_repair(damaged_store, capsys):
    from harness.store import Store

    assert main(["store", "check", str(damaged_store)]) == 1
    out = capsys.readouterr().out
    assert "damaged" in out and "evo store repair" in out
    assert main(["store", "repair", str(damaged_store)]) == 0
    out = capsys.readouterr().out
    aside = damaged_store.with_name("store.sqlite.damaged")
    assert "repaired" in out and str(aside) in out and aside.is_file()
    assert main(["store", "check", str(damaged_store)]) == 0
    assert "ok" in capsys.readouterr().out
    with Store(damaged_store) as store:
        rows = store.stats()["rows"]
        assert 1300 < rows < 1500  # one damaged stretch lost, the rest kept
        assert store.lookup_code("NVIDIA H200", "k0", "c0").cycles == 100.0
    assert main(["store", "repair", str(damaged_store)]) == 0  # sound now: nothing to do
    assert "nothing to repair" in capsys.readouterr().out


def test_store_check_of_a_file_that_is_not_sqlite(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    fails(capsys, ["store", "repair", tmp_path / "notes.txt"], "not a SQLite file")
    assert (tmp_path / "notes.txt").read_text() == "hello"


# ------------------------------------------------------------ spec that does not match the PTX
def _drop_first_param(text: str) -> str:
    head, _, rest = text.partition("[[params]]")
    return head + rest[rest.index("[[params]]"):]


@needs_ptxas
@pytest.mark.parametrize("edit,needles", [
    (_drop_first_param, ("spec lists 2 params but PTX entry", "takes 3", "evo init-kernel")),
    (lambda t: t.replace(f'entry = "{KERNEL}"', 'entry = "gemm_tile_2x2x3"'),
     ("entry 'gemm_tile_2x2x3' is not in", f"did you mean '{KERNEL}'")),
], ids=["params", "entry"])
@pytest.mark.parametrize("command", ["run", "measure", "compile"])
def test_spec_checked_against_ptx(tmp_path, capsys, edit, needles, command):
    spec = copy_kernel(tmp_path / "k", "mine", edit)
    args = {"run": static_run(tmp_path / "run", tmp_path / "s.sqlite"),
            "measure": ["measure", spec, "--backend", "static", "--store", tmp_path / "s.sqlite"],
            "compile": ["compile", spec]}[command]
    if command == "run":
        args[args.index("--kernel") + 1] = str(spec)
    fails(capsys, args, *needles)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------ strategy and backend names
def _choices(command: str, option: str) -> tuple:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if option in a.option_strings)
    return tuple(action.choices)


def test_strategy_and_backend_names_have_one_owner():
    from evo import bench, config, strategies
    from harness import backends

    assert config.STRATEGIES is strategies.NAMES and config.BACKENDS is backends.BACKENDS
    assert _choices("run", "--strategy") == strategies.NAMES
    for command in ("run", "measure", "bench"):
        assert _choices(command, "--backend") == backends.BACKENDS
    base = config.Config()
    for arm in bench.STRATEGIES:  # every bench arm is one of the strategies, with a budget
        assert bench.strategy_config(base, arm, 5).run.strategy in strategies.NAMES
    for name in strategies.NAMES:
        module = strategies.get(name)
        assert all(callable(getattr(module, f, None)) for f in ("start", "step", "finished", "best"))


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    return tmp_path_factory.mktemp("contract") / "store.sqlite"


@needs_ptxas
@pytest.mark.parametrize("strategy", __import__("evo.strategies").strategies.NAMES)
def test_every_strategy_runs_on_static(strategy, shared_store, tmp_path):
    # --max-evals caps every strategy (oracle's 56,700 genomes included) at a few.
    proc = evo("run", "--kernel", KERNEL, "--backend", "static", "--strategy", strategy,
               "--generations", "2", "--pop", "2", "--max-evals", "4", "--store", shared_store,
               "--out", tmp_path / "run", "-q", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    saved = json.loads((tmp_path / "run" / "checkpoint.json").read_text())["kernels"][KERNEL]
    assert saved["done"] and 1 <= saved["evals"] <= 4
    assert (tmp_path / "run" / "best" / f"{KERNEL}.genome.json").is_file()


@needs_ptxas
@pytest.mark.parametrize("backend", __import__("harness.backends").backends.BACKENDS)
def test_every_backend_runs(backend, small_run, tmp_path):
    if backend == "gpu" and not gpu_available():
        pytest.skip("no GPU")
    # replay answers from the static run's store, under the static device
    (tmp_path / "evo.toml").write_text('[run]\ndevice = "static"\n' if backend == "replay" else "")
    store = small_run.parent / "store.sqlite"
    proc = evo("run", "--config", "evo.toml", "--kernel", KERNEL, "--backend", backend,
               "--generations", "1", "--pop", "2", "--seed", "3", "--store", store,
               "--out", tmp_path / "run", "-q", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / "run" / "report.md").is_file()


# ------------------------------------------------------------ Triton's .target sm_90a
@pytest.fixture
def sm90a_ptx(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    (tmp_path / "k.cu").write_text('extern "C" __global__ void add1(float* x, int n) '
                                   "{ int i = threadIdx.x; if (i < n) x[i] += 1.0f; }\n")
    subprocess.run(["nvcc", "-arch=sm_90a", "-ptx", "k.cu", "-o", "k.ptx"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=120)
    assert ".target sm_90a" in (tmp_path / "k.ptx").read_text()
    return tmp_path / "k.ptx"


@needs_ptxas
def test_sm_90a_ptx_assembles_for_its_target(sm90a_ptx, tmp_path, capsys):
    from harness.compile import compile_ptx, target_arch

    result = compile_ptx(sm90a_ptx.read_text(), "sm_90")
    assert result.ok and result.arch == "sm_90a", result.error
    assert target_arch(".version 9.0\n.target sm_90\n", "sm_80") == "sm_80"
    assert target_arch(".target sm_100f\n", "sm_90") == "sm_100f"
    assert main(["compile", str(sm90a_ptx)]) == 0
    assert "sm_90a" in capsys.readouterr().out
    (tmp_path / "k.toml").write_text(
        'name = "add1"\nptx = "k.ptx"\ngrid = [1, 1, 1]\nblock = [32, 1, 1]\n'
        '[[params]]\nname = "x"\nkind = "buffer"\ndtype = "f32"\ncount = 32\nrole = "inout"\n'
        '[[params]]\nname = "n"\nkind = "scalar"\ndtype = "i32"\nvalue = 32\n')
    assert main(["measure", str(tmp_path / "k.toml"), "--genome", "cache_cs", "--backend",
                 "static", "--store", str(tmp_path / "s.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "cycles:" in out and "not checked" in out


# ------------------------------------------------------------ --kernel 'mydir/*.toml'
def test_kernel_path_glob(tmp_path, monkeypatch, capsys):
    from evo.run_kernels import resolve_suite

    for name in ("alpha", "beta"):
        copy_kernel(tmp_path / "mydir", name)
    monkeypatch.chdir(tmp_path)
    assert [k.name for k in resolve_suite(["mydir/*.toml"])] == ["alpha", "beta"]
    assert [k.name for k in resolve_suite([str(tmp_path / "mydir" / "al*.ptx")])] == ["alpha"]
    fails(capsys, ["run", "--kernel", "nodir/*.toml", "--backend", "static", "--out", "r"],
          "path pattern 'nodir/*.toml' matches no .toml or .ptx file")
    assert not (tmp_path / "r").exists()


@needs_ptxas
def test_kernel_path_glob_runs(tmp_path, capsys):
    for name in ("alpha", "beta"):
        copy_kernel(tmp_path / "mydir", name)
    args = static_run(tmp_path / "run", tmp_path / "s.sqlite")
    args[args.index("--kernel") + 1] = str(tmp_path / "mydir" / "*.toml")
    assert main([str(a) for a in args]) == 0, capsys.readouterr().err
    saved = json.loads((tmp_path / "run" / "checkpoint.json").read_text())
    assert sorted(saved["kernels"]) == ["alpha", "beta"]


# ------------------------------------------------------------ a failed run leaves no folder
def test_failed_run_leaves_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = ["run", "--kernel", "gemm_tile_3x3x3", "--backend", "static", "--store", "s.sqlite"]
    fails(capsys, [*bad, "--out", "r"], "unknown kernel")
    assert not (tmp_path / "r").exists()
    fails(capsys, bad, "unknown kernel")  # the default runs/<timestamp>
    assert not any((tmp_path / "runs").iterdir())
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    fails(capsys, [*bad, "--out", "mine"], "mine is a folder with other files in it, not a run")
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]  # refused before writing anything


# ------------------------------------------------------------ config strings with a newline
@needs_ptxas
def test_config_string_with_newline_survives_resume(tmp_path, capsys):
    (tmp_path / "evo.toml").write_text('[llm]\nmodel = "line one\\nline two\\t\\u0001"\n')
    args = static_run(tmp_path / "run", tmp_path / "s.sqlite", "--config", tmp_path / "evo.toml")
    assert main([str(a) for a in args]) == 0
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())
    assert saved["llm"]["model"] == "line one\nline two\t\x01"
    assert main(["run", "--resume", str(tmp_path / "run"), "--generations", "2", "-q"]) == 0


def test_config_dumps_round_trips_control_characters():
    from evo import config

    cfg = config.Config().override("llm", model='a\nb\r"c"\\d\x7f\x00 é', base_url="x\ty")
    assert config.from_dict(tomllib.loads(config.dumps(cfg))) == cfg


# ------------------------------------------------------------ list items in evo.toml
@pytest.mark.parametrize("line,needle", [
    ('gpus = ["a", -3]', "[run] gpus must be a list of GPU ids (integers >= 0), got 'a'"),
    ("gpus = [0, -3]", "[run] gpus must be a list of GPU ids (integers >= 0), got -3"),
    ("gpus = [true]", "got True"),
    ("suite = [1]", "[run] suite must be a list of kernel names or glob patterns"),
    ('suite = [""]', "non-empty strings"),
])
def test_config_list_items_are_checked(tmp_path, monkeypatch, capsys, line, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.toml").write_text(f"[run]\n{line}\n")
    fails(capsys, ["run", "--config", "bad.toml", "--backend", "static"], "bad.toml", needle)
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------ file modes follow the umask
@needs_ptxas
def test_run_files_follow_the_umask(small_run):
    files = [p for p in small_run.rglob("*") if p.is_file()]
    assert {"config.toml", "events.jsonl", "checkpoint.json", "report.md"} <= {p.name for p in files}
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    assert set(modes.values()) == {0o640}, modes  # 0666 less umask 027, not mkstemp's 0600


def test_write_atomic_follows_the_umask(tmp_path):
    code = ("import sys; from pathlib import Path; from evo.rundir import write_atomic; "
            "write_atomic(Path(sys.argv[1]), 'x')")
    for umask, mode in ((0o022, 0o644), (0o002, 0o664), (0o077, 0o600)):
        path = tmp_path / f"f{umask:o}"
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, umask=umask,
                       cwd=ROOT, timeout=60)
        assert stat.S_IMODE(path.stat().st_mode) == mode


# ------------------------------------------------------------ evo measure on the static backend
@needs_ptxas
def test_measure_static_says_correctness_was_not_checked(tmp_path, capsys):
    assert main(["measure", KERNEL, "--genome", "vec_st", "--backend", "static",
                 "--store", str(tmp_path / "s.sqlite")]) == 0
    lines = {ln.split(":")[0]: ln for ln in capsys.readouterr().out.splitlines()}
    assert "not checked" in lines["valid"] and "no GPU" in lines["valid"]
    assert "yes" not in lines["valid"]
    for key in ("cycles", "baseline", "speedup"):
        assert "static estimate" in lines[key], lines[key]
    for key in ("registers", "spills"):  # ptxas's own figures: exact
        assert "estimate" not in lines[key], lines[key]


# ------------------------------------------------------------ evo plot on a run with no data
def test_plot_with_no_data(tmp_path, capsys):
    from evo import config
    from evo.rundir import RunDir

    run = RunDir.create(tmp_path / "run", config.dumps(config.Config()))
    fails(capsys, ["plot", run.path], "nothing to plot", "no evaluations yet")
    assert not (run.path / "plots").exists()


# ------------------------------------------------------------ last resort in evo.cli.main
def test_unforeseen_os_and_sqlite_errors_are_one_line(monkeypatch, capsys):
    from evo import commands

    def broken(args):
        raise PermissionError(13, "Permission denied", "some/file")

    monkeypatch.setattr(commands, "cmd_kernels", broken)
    fails(capsys, ["kernels"], "some/file", "Permission denied", code=FAILURE)

    def malformed(args):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(commands, "cmd_kernels", malformed)
    fails(capsys, ["kernels"], "malformed", "evo store repair", code=FAILURE)


# ------------------------------------------------------------ honest exit statuses (issue 31)
@needs_ptxas
def test_a_run_whose_baseline_fails_reports_all_kernels_and_exits_1(tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    spec = SUITE / "gemm_tile_2x2x2.toml"
    text = spec.read_text().replace('name = "gemm_tile_2x2x2"', 'name = "broken_tile"')
    (broken / "broken_tile.toml").write_text(text)
    ptx_name = tomllib.loads(text).get("ptx", "gemm_tile_2x2x2.ptx")
    (broken / ptx_name).write_text((SUITE / ptx_name).read_text().replace("ret;", "bogus_op;", 1))
    rc = main(["run", "--kernel", str(broken / "broken_tile.toml"), "--kernel", "gemm_tile_2x2x2",
               "--backend", "static", "--generations", "1", "--pop", "2", "--out",
               str(tmp_path / "run"), "--store", str(tmp_path / "s.sqlite"), "-q"])
    out, err = capsys.readouterr()
    assert rc == 1, err
    assert "broken_tile" in out and "gemm_tile_2x2x2" in out  # both in the table
    assert "evo: error: the baseline of broken_tile failed" in err and "1 other kernel(s) ran" in err


def test_two_kernels_of_one_name_and_a_name_that_is_a_path_are_refused(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    for name in ("relu.toml", "relu.ptx"):
        (other / name).write_text((SUITE / name).read_text())
    fails(capsys, ["run", "--kernel", "relu", "--kernel", str(other / "relu.toml"), "--backend",
                   "static", "--out", str(tmp_path / "r")], "two kernels are named 'relu'")
    escape = (SUITE / "relu.toml").read_text().replace('name = "relu"', 'name = "../../escape/k"')
    (other / "escape.toml").write_text(escape)
    fails(capsys, ["run", "--kernel", str(other / "escape.toml"), "--backend", "static",
                   "--out", str(tmp_path / "r")], "'name' must be a file name")


# ------------------------------------------------------------ kernels named by a relative path
@needs_ptxas
def test_a_run_of_a_relative_spec_path_is_exported_and_resumed_from_elsewhere(
        tmp_path, monkeypatch, capsys):
    """`evo run --kernel mine/k.toml` in one directory: the run's config.toml keeps the
    path absolute, so `evo export` and `evo run --resume` work from any other directory
    (they said "cannot read the run's kernels again ... run evo export where the run was
    started"); suite names stay names."""
    copy_kernel(tmp_path / "project" / "mine", "k")
    monkeypatch.chdir(tmp_path / "project")
    args = static_run(tmp_path / "run", tmp_path / "s.sqlite")
    args[args.index("--kernel") + 1] = "mine/k.toml"
    assert main([str(a) for a in [*args, "--kernel", "relu"]]) == 0, capsys.readouterr().err
    suite = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["run"]["suite"]
    assert suite == [str(tmp_path / "project" / "mine" / "k.toml"), "relu"]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), "k"]) == 0, capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path / "run"), "--generations", "2", "-q"]) == 0, \
        capsys.readouterr().err
