"""evo capture and evo verify on a program written for this test (GPU, torch, Triton): a
bf16 block under torch.compile, run as ``python app.py STEPS``. Its kernels are captured
with their launch counts and shares; an evolved kernel that is right agrees inside the
program on its own data, a wrong one is caught there; a real evo run on the capture
goes through verify.

Run with ``python3 -m pytest -m gpu -x -q tests/test_program_gpu.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

APP = """
import sys
import torch

torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, 2 * dim)
        self.down = torch.nn.Linear(2 * dim, dim)

    def forward(self, x):
        h = self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return x + h * torch.sigmoid(h)


block = torch.compile(Block().cuda().to(torch.bfloat16), mode=sys.argv[2] if len(sys.argv) > 2 else None)
x = torch.randn(32, 64, 512, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    for _ in range(int(sys.argv[1])):
        y = block(x)
torch.cuda.synchronize()
print("checksum", float(y.float().sum()))
"""


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    from evo.cli import main
    from evo.model.capture import read

    root = tmp_path_factory.mktemp("program")
    app = root / "app.py"
    app.write_text(APP)
    assert main(["capture", "--out", str(root / "cap"), "--", "python", str(app), "6"]) == 0
    return root, app, read(root / "cap")


def test_a_programs_kernels_are_captured_with_counts_and_shares(captured):
    _, _, m = captured
    assert m["kernels"] and m["step_gpu_us"] is None and m["triton_gpu_us"] > 0
    assert all(k["launches"] == 6 for k in m["kernels"]), [k["launches"] for k in m["kernels"]]
    shares = [k["share"] for k in m["kernels"]]
    assert all(s and 0 < s <= 1 for s in shares) and sum(shares) == pytest.approx(1.0)
    assert m["source"]["exit_status"] == 0 and "app.py 6" in m["source"]["command"]
    assert "bf16" in {p.dtype for k in m["kernels"] for p in k["kernel_spec"].buffers()}


def _run_with(root, m, name: str, ptx_of) -> str:
    """A run folder whose best variant of each kernel is ``ptx_of(kernel PTX)``."""
    run = root / name
    (run / "best").mkdir(parents=True)
    (run / "checkpoint.json").write_text(json.dumps({"kernels": {}}))
    for k in m["kernels"]:
        spec = k["kernel_spec"]
        (run / "best" / f"{spec.name}.ptx").write_text(ptx_of(spec.ptx_text()))
        (run / "best" / f"{spec.name}.genome.json").write_text(json.dumps({"genes": []}))
    return str(run)


def test_a_right_variant_agrees_in_the_program_and_a_wrong_one_is_caught(captured, capsys):
    from evo.cli import main
    from genomes.genome import apply_genome, parse_inline

    root, app, m = captured
    right = _run_with(root, m, "right", lambda ptx: apply_genome(ptx, parse_inline("maxnreg(n=128)")).ptx)
    cap = str(root / "cap")
    assert main(["verify", "--model", cap, "--run", right, "--", "python", str(app), "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("on 3 launch(es)") == len(m["kernels"]), out
    assert "checksum" in out  # the program ran to its end, with the evolved kernels
    assert "in the program:" not in out  # 4 launches: all checked, none left to time
    assert f"next: in the program, import evo; evo.install(model={cap!r}, run={right!r})" in out
    # a wrong variant: the first float add of every kernel made a subtract
    wrong = _run_with(root, m, "wrong", lambda ptx: ptx.replace("add.f32", "sub.f32", 1))
    assert main(["verify", "--model", cap, "--run", wrong, "--", "python", str(app), "4"]) == 1
    out = capsys.readouterr().out
    changed = [k for k in m["kernels"] if "add.f32" in k["kernel_spec"].ptx_text()]
    assert changed and out.count("DIFFERS on the program's data") >= 1, out


def test_an_evo_run_on_the_capture_goes_through_verify(captured, capsys, tmp_path):
    from evo.cli import main

    root, app, m = captured
    cap, run = str(root / "cap"), str(tmp_path / "run")
    assert main(["run", "--model", cap, "--generations", "1", "--pop", "4", "--out", run,
                 "--store", str(tmp_path / "store.sqlite"), "-q"]) == 0
    capsys.readouterr()
    status = main(["verify", "--model", cap, "--run", run, "--", "python", str(app), "3"])
    out, err = capsys.readouterr()
    evolved = [line for line in out.splitlines() if "launch(es)" in line or "DIFFERS" in line]
    if evolved:  # some kernel beat its baseline: each one checked, and agreeing
        assert status == 0 and not any("DIFFERS" in line for line in evolved), out
    else:  # every baseline stayed best: nothing to check, and it says so
        assert status == 1 and "nothing checked" in err, out + err


def with_spin(ptx: str, cycles: int) -> str:
    """``ptx`` spinning ``cycles`` SM cycles on %clock64 before its first ``ret``."""
    spin = f"""\t{{
\t.reg .u64 %evo_t<3>;
\t.reg .pred %evo_p;
\tmov.u64 %evo_t0, %clock64;
EVO_SPIN:
\tmov.u64 %evo_t1, %clock64;
\tsub.u64 %evo_t2, %evo_t1, %evo_t0;
\tsetp.lt.u64 %evo_p, %evo_t2, {cycles};
\t@%evo_p bra EVO_SPIN;
\t}}
"""
    return ptx.replace("\tret;", spin + "\tret;", 1)


def test_verify_times_each_kernel_in_the_program_and_sees_a_slower_one(captured, capsys):
    """After the checked launches, the next ones run each code in turn, timed: a variant
    that spins 40,000 cycles (~20 us) before it returns reads slower in the program."""
    from evo.cli import main

    root, app, m = captured
    slow = _run_with(root, m, "slow", lambda ptx: with_spin(ptx, 40000))
    cap = str(root / "cap")
    assert main(["verify", "--model", cap, "--run", slow, "--timed", "5", "--",
                 "python", str(app), "16"]) == 0
    out = capsys.readouterr().out
    timed = [line for line in out.splitlines() if "in the program:" in line]
    assert len(timed) == len(m["kernels"]), out
    for line in timed:  # "in the program: 12.34 us -> 33.21 us a launch (0.372x; 5 launches ..."
        own, evolved = (float(x) for x in line.split(":", 1)[1].split("us a launch")[0].split("us ->"))
        assert evolved > own + 10, line
        assert "5 launches of each code" in line and "16 launches in this run" in line, line
    saved = float(out.split("GPU time the evolved kernels saved over this run: ")[1].split(" us")[0])
    assert saved < 0, out  # it cost time, and says so
    assert out.count("slower here: evo.install leaves it out") == len(m["kernels"]), out
    from evo.model.install_plan import plan

    left_out = plan(cap, slow)  # what evo.install would put in now: none of them
    assert all(c.cubin is None and c.reason.startswith("slower in the program") for c in left_out)


def test_a_program_under_cuda_graphs_is_counted_per_replay_and_verified(tmp_path, capsys):
    """torch.compile(mode="reduce-overhead"): kernels launched while a graph is captured
    count once per replay; verify checks them where they run outside the graph (the
    warm-up step) and the graph records the evolved code; the program ends normally."""
    from evo.cli import main
    from evo.model.capture import read
    from genomes.genome import apply_genome, parse_inline

    app = tmp_path / "app.py"
    app.write_text(APP)
    cap = tmp_path / "cap"
    assert main(["capture", "--out", str(cap), "--", "python", str(app), "7", "reduce-overhead"]) == 0
    out = capsys.readouterr().out
    m = read(cap)
    assert m["source"]["graphed"], out
    assert all(k["launches"] == 7 for k in m["kernels"]), [(k["name"], k["launches"]) for k in m["kernels"]]
    # timed on the graph's replays (profiler), not only where a kernel ran outside a graph
    assert all(k["gpu_us"] and k["share"] for k in m["kernels"]), [(k["name"], k["gpu_us"]) for k in m["kernels"]]
    right = _run_with(tmp_path, m, "right", lambda ptx: apply_genome(ptx, parse_inline("maxnreg(n=128)")).ptx)
    assert main(["verify", "--model", str(cap), "--run", right, "--", "python", str(app), "5",
                 "reduce-overhead"]) == 0
    out = capsys.readouterr().out
    assert "checksum" in out and "DIFFERS" not in out, out
    # each kernel ran once outside the graph (the warm-up step, where it compiled and tuned)
    assert out.count("on 1 launch(es)") == len(m["kernels"]), out
    assert out.count("run inside a CUDA graph") == len(m["kernels"]), out

INSTALLING = """
import sys
import evo

installed = evo.install(model=sys.argv[1], run=sys.argv[2])
sys.argv[1:] = sys.argv[3:]
""" + APP + """
print(installed.describe())
installed.remove()
"""


def test_a_program_that_calls_evo_install_runs_the_evolved_kernels(captured, capsys):
    """``evo.install`` in the user's own program: a right variant leaves its output bit
    for bit, a wrong one changes it (so the evolved code is what ran), and it says so."""
    from evo.model.program import run_program
    from genomes.genome import apply_genome, parse_inline

    root, app, m = captured
    installing = root / "installing.py"
    installing.write_text(INSTALLING)

    def checksum(*argv) -> tuple[str, str]:
        assert run_program(["python", *map(str, argv)]) == 0
        out = capsys.readouterr().out
        return out.split("checksum ")[1].split()[0], out

    own, _ = checksum(app, 2)
    cap = root / "cap"
    right = _run_with(root, m, "installed_right",
                      lambda ptx: apply_genome(ptx, parse_inline("maxnreg(n=128)")).ptx)
    same, out = checksum(installing, cap, right, 2)
    assert same == own and out.count(": evolved code") == len(m["kernels"]), out
    wrong = _run_with(root, m, "installed_wrong", lambda ptx: ptx.replace("add.f32", "sub.f32", 1))
    changed, out = checksum(installing, cap, wrong, 2)
    assert changed != own, out


def test_evo_install_runs_a_program_unchanged_with_the_evolved_kernels(captured, capsys):
    """``evo install -- python app.py`` and the environment it prints (a fresh Python
    process, the start-up hook): a wrong variant changes the program's output, so the
    evolved code is what ran, in both; the program's own file is untouched."""
    import os
    import subprocess
    import sys

    from evo.cli import main
    from evo.model.install_cmd import environment

    root, app, m = captured
    cap = root / "cap"
    wrong = _run_with(root, m, "cli_wrong", lambda ptx: ptx.replace("add.f32", "sub.f32", 1))
    plain = subprocess.run([sys.executable, str(app), "2"], capture_output=True, text=True, timeout=300)
    own = plain.stdout.split("checksum ")[1].split()[0]
    assert main(["install", "--model", str(cap), "--run", wrong, "--", "python", str(app), "2"]) == 0
    out, err = capsys.readouterr()
    assert out.split("checksum ")[1].split()[0] != own, out
    assert err.count(": evolved code") == len(m["kernels"]), err
    env = {**os.environ, **environment(cap, wrong)}
    env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parents[1])  # evo itself
    hooked = subprocess.run([sys.executable, str(app), "2"], capture_output=True, text=True,
                            env=env, timeout=300)
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout.split("checksum ")[1].split()[0] != own, hooked.stdout + hooked.stderr


DYNAMIC = """
import sys
import torch

torch.manual_seed(0)
block = torch.nn.Sequential(torch.nn.LayerNorm(512), torch.nn.Linear(512, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, 512)).cuda().to(torch.bfloat16)
step = torch.compile(block, dynamic=True)
xs = [torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16) for rows in (1500, 2048)]
with torch.no_grad():
    for i in range(int(sys.argv[1])):
        y = step(xs[i % 2])
torch.cuda.synchronize()
print("checksum", float(y.float().sum()))
"""


def test_a_kernel_compiled_for_dynamic_shapes_is_evolved_once_checked_at_each_size_and_installed(
        tmp_path, capsys):
    """dynamic=True: one code and one launcher for both sizes. The run evolves it once,
    checks its best at the other captured size, and verify finds it at either size."""
    from evo.cli import main
    from evo.model.capture import read, same_code

    app = tmp_path / "app.py"
    app.write_text(DYNAMIC)
    cap, run = str(tmp_path / "cap"), str(tmp_path / "run")
    assert main(["capture", "--out", cap, "--", "python", str(app), "6"]) == 0
    groups = same_code(read(cap)["kernels"])
    pairs = {tuple(names) for names in groups.values() if len(names) == 2}
    assert pairs, groups
    assert main(["run", "--model", cap, "--generations", "1", "--pop", "4", "--out", run,
                 "--store", str(tmp_path / "store.sqlite"), "-q"]) == 0
    kernels = json.loads((tmp_path / "run" / "checkpoint.json").read_text())["kernels"]
    assert not any(other in kernels for _, other in pairs)  # evolved once, at one size
    for evolved, other in pairs:  # checked at the other size: kept passes there
        sizes = kernels[evolved]["sizes"]
        assert sizes["at"].get(other, {}).get("valid") or sizes["kept"] == '{"genes": []}', sizes
    capsys.readouterr()
    status = main(["verify", "--model", cap, "--run", run, "--", "python", str(app), "8"])
    out, err = capsys.readouterr()
    assert "DIFFERS" not in out and (status == 0 or "nothing checked" in err), out + err
    for evolved, other in pairs:
        if f"  {evolved}: bitwise" in out or f"  {evolved}: within" in out:  # installed
            assert f"{other}: not installed: one code at every size: {evolved}'s" in out, out

    # a right variant said checked at both sizes: installed, found at either, checked in the program
    from genomes.genome import apply_genome, parse_inline

    evolved, other = sorted(pairs)[0]
    spec = next(k["kernel_spec"] for k in read(cap)["kernels"] if k["name"] == evolved)
    genome = parse_inline("maxnreg(n=128)")
    hand = tmp_path / "hand"
    (hand / "best").mkdir(parents=True)
    (hand / "best" / f"{evolved}.ptx").write_text(apply_genome(spec.ptx_text(), genome).ptx)
    (hand / "best" / f"{evolved}.genome.json").write_text(json.dumps(genome.to_json()))
    key = genome.effective().dumps()
    (hand / "checkpoint.json").write_text(json.dumps({"kernels": {evolved: {"sizes": {
        "from": key, "kept": key, "at": {other: {"valid": True, "reason": ""}}, "demoted": []}}}}))
    assert main(["verify", "--model", cap, "--run", str(hand), "--", "python", str(app), "8"]) == 0
    out = capsys.readouterr().out
    assert f"  {evolved}: bitwise equal on 3 launch(es)" in out, out  # sizes in turn: both
    assert f"{other}: not installed: one code at every size: {evolved}'s" in out, out


USER_KERNEL = """
import sys
import torch
import triton
import triton.language as tl


@triton.jit
def scaled_add(x, y, result, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = i < n
    tl.store(result + i, 2.0 * tl.load(x + i, mask=keep) + tl.load(y + i, mask=keep), mask=keep)


def fused(a, b):
    out = torch.empty_like(a)
    scaled_add[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
    return torch.relu(out)


step = torch.compile(fused)
a = torch.randn(1 << 20, device="cuda")
b = torch.randn(1 << 20, device="cuda")
for _ in range(int(sys.argv[1])):
    y = step(a, b)
torch.cuda.synchronize()
print("checksum", float(y.sum()))
"""


def test_a_user_defined_triton_kernel_in_a_compiled_program_is_captured(tmp_path, capsys):
    """A Triton kernel the user wrote, launched inside torch.compile, keeps the user's
    parameter names (x, y, result): captured with roles from its code, not skipped as
    workspaces (written CPU-first, session 19: run on a GPU in the next)."""
    from evo.cli import main
    from evo.model.capture import read

    app = tmp_path / "app.py"
    app.write_text(USER_KERNEL)
    cap = tmp_path / "cap"
    assert main(["capture", "--out", str(cap), "--", "python", str(app), "4"]) == 0
    out = capsys.readouterr().out
    m = read(cap)
    user = [k for k in m["kernels"] if "scaled_add" in k["name"]]
    assert user, out + str(m["skipped"])
    roles = {p.name: p.role for p in user[0]["kernel_spec"].buffers()}
    assert roles.get("x") == "in" and roles.get("y") == "in" and roles.get("result") == "inout", roles
