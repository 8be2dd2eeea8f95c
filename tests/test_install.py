"""evo.model.install_plan.plan and evo.model.verify.report on the CPU, on the committed capture
(tests/data/capture/decoder) and run folders written here with real genes and real ptxas."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evo.model import capture
from evo.model.install_plan import plan
from evo.model.verify import report
from genomes.errors import EvoError
from genomes.genome import apply_genome, parse_inline

from conftest import capture_with_one_code, needs_ptxas

DECODER = Path(__file__).parent / "data" / "capture" / "decoder"


def _best(run: Path, spec, genome: str, grid=None) -> None:
    applied = apply_genome(spec.ptx_text(), parse_inline(genome), spec.launch)
    launch = applied.launch.to_json() | ({"grid": grid} if grid else {})
    (run / "best").mkdir(parents=True, exist_ok=True)
    (run / "best" / f"{spec.name}.ptx").write_text(applied.ptx)
    (run / "best" / f"{spec.name}.genome.json").write_text(json.dumps(parse_inline(genome).to_json()))
    (run / "best" / f"{spec.name}.launch.json").write_text(json.dumps(launch))


@needs_ptxas
def test_the_plan_installs_what_changed_the_code_and_says_why_not_for_the_rest(tmp_path):
    kernels = capture.read(DECODER)["kernels"]
    specs = [k["kernel_spec"] for k in kernels]
    with pytest.raises(EvoError, match="is not a run folder"):
        plan(DECODER, tmp_path)
    (tmp_path / "checkpoint.json").write_text(json.dumps({"kernels": {}}))
    _best(tmp_path, specs[0], "maxnreg(n=32)")
    _best(tmp_path, specs[1], "")  # the baseline stayed best
    _best(tmp_path, specs[2], "maxnreg(n=32)", grid=[64, 1, 1])  # as coarsen would
    _best(tmp_path, specs[3], "maxnreg(n=32)", grid=[384, 1, 1])  # 512 / 384: no factor
    _best(tmp_path, specs[4], "maxnreg(n=32)")
    launch = json.loads((tmp_path / "best" / f"{specs[4].name}.launch.json").read_text())
    (tmp_path / "best" / f"{specs[4].name}.launch.json").write_text(
        json.dumps(launch | {"grid": [64, 1, 1], "block": [256, 1, 1]}))  # as block would
    choices = {c.name: c for c in plan(DECODER, tmp_path)}
    first = choices[specs[0].name]
    assert first.cubin and first.cubin[:4] == b"\x7fELF" and first.genome == "maxnreg(n=32)"
    assert first.scalars == {a["name"]: a["value"] for a in kernels[0]["launch"]["args"]
                             if not a["type"].startswith("*")}
    assert choices[specs[1].name].reason == "the baseline stayed best"
    assert first.grid_divisor == (1, 1, 1)
    shrunk = choices[specs[2].name]  # Inductor's grid, divided by 2 as it launches
    assert shrunk.cubin and shrunk.grid_divisor == (2, 1, 1) and shrunk.reason == ""
    assert choices[specs[3].name].cubin is None
    assert choices[specs[3].name].reason == ("its genome changes the grid (512, 1, 1) -> "
                                            "(384, 1, 1), not by a whole factor")
    assert choices[specs[4].name].cubin is None
    assert choices[specs[4].name].reason.startswith(
        "its genome changes the block ((128, 1, 1) -> (256, 1, 1)), which the program's")
    assert len(specs) == 5
    checkpoint = {"kernels": {specs[0].name: {"known": {'{"genes": []}': {
        "valid": False, "reason": "wrong result: 9 of 9 elements differ"}}}}}
    (tmp_path / "checkpoint.json").write_text(json.dumps(checkpoint))
    failed = {c.name: c for c in plan(DECODER, tmp_path)}[specs[0].name]
    assert failed.cubin is None
    assert failed.reason == "its baseline failed the gate in this run: wrong result: 9 of 9 elements differ"


@needs_ptxas
def test_a_kernel_that_reads_its_sizes_at_run_time_is_not_installed(tmp_path):
    """Dynamic shapes: the captured code reads xnumel, so one launcher runs it at every
    size, and evo checked the variant at the captured one only."""
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(DECODER, cap)
    kernels = capture.read(cap)["kernels"]
    spec = kernels[0]["kernel_spec"]
    size = next(p.name for p in spec.params if p.kind == "scalar")
    index = [p.name for p in spec.params].index(size)
    first_read = next(line for line in spec.ptx_text().splitlines() if "ld.param.b64" in line)
    reads = (f"{first_read}\n\t.reg .b32 %evo_n;\n"
             f"\tld.param.b32 %evo_n, [{spec.entry}_param_{index}];")
    spec.ptx_path.write_text(spec.ptx_text().replace(first_read, reads, 1))
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.json").write_text(json.dumps({"kernels": {}}))
    spec = capture.read(cap)["kernels"][0]["kernel_spec"]
    _best(run, spec, "maxnreg(n=32)")
    (choice,) = [c for c in plan(cap, run) if c.name == spec.name]
    assert choice.cubin is None and choice.reason.startswith(f"its code reads {size} at run time")
    plain = {c.name: c for c in plan(DECODER, _decoder_run(tmp_path / "plain", "maxnreg(n=32)"))}
    assert plain[spec.name].cubin is not None  # the static kernel, as captured: installed


@needs_ptxas
def test_a_dynamic_kernel_is_installed_for_every_size_once_checked_at_each(tmp_path):
    """One code runs at every size: installed (matched at any size) only where the run
    checked its best at the capture's other size; that size's entry says it goes with it."""
    cap = tmp_path / "cap"
    _, one, other = capture_with_one_code(cap, 0, 1, reads_sizes=True)
    spec = capture.read(cap)["kernels"][0]["kernel_spec"]
    index = next(i for i, p in enumerate(spec.params) if p.kind == "scalar")
    first_read = next(line for line in spec.ptx_text().splitlines() if "ld.param.b64" in line)
    spec.ptx_path.write_text(spec.ptx_text().replace(first_read, (
        f"{first_read}\n\t.reg .b32 %evo_n;\n\tld.param.b32 %evo_n, [{spec.entry}_param_{index}];"), 1))
    spec = capture.read(cap)["kernels"][0]["kernel_spec"]
    run = tmp_path / "run"
    _best(run, spec, "maxnreg(n=32)")
    key = parse_inline("maxnreg(n=32)").effective().dumps()

    def choices(sizes):
        entry = {} if sizes is None else {"sizes": {"from": key, "kept": key, "at": sizes, "demoted": []}}
        (run / "checkpoint.json").write_text(json.dumps({"kernels": {spec.name: entry}}))
        return {c.name: c for c in plan(cap, run)}

    assert "not checked at its other captured sizes" in choices(None)[one["name"]].reason
    bad = choices({other["name"]: {"valid": False, "reason": "wrong result: 3 elements differ"}})
    assert bad[one["name"]].cubin is None
    assert bad[one["name"]].reason.endswith(f"failed at the captured size {other['name']}: "
                                            "wrong result: 3 elements differ")
    good = choices({other["name"]: {"valid": True, "reason": ""}})
    assert good[one["name"]].cubin is not None and good[one["name"]].scalars == {}
    assert good[other["name"]].cubin is None
    assert good[other["name"]].reason.startswith(f"one code at every size: {one['name']}'s")


def _decoder_run(run: Path, genome: str) -> Path:
    (run / "best").mkdir(parents=True)
    (run / "checkpoint.json").write_text(json.dumps({"kernels": {}}))
    _best(run, capture.read(DECODER)["kernels"][0]["kernel_spec"], genome)
    return run


def test_the_report_says_the_step_the_limit_and_each_kernel():
    from evo.model.install_plan import Choice

    manifest = capture.read(DECODER)
    choices = [Choice(k["name"], k["source"]["kernel"], "", {}, b"x" if i == 0 else None,
                      reason="" if i == 0 else "not evolved in this run")
               for i, k in enumerate(manifest["kernels"])]
    verdict = {"baseline_ms": 2.0, "evolved_ms": 1.9, "speedup": 2.0 / 1.9, "repeats": 30,
               "outputs_agree": True, "rtol": 0.05, "atol": 0.05, "max_abs_err": 0.01,
               "max_rel_err": 0.02}
    import types

    first = manifest["kernels"][0]
    run = types.SimpleNamespace(kernel=first["name"], speedup=1.25, result=types.SimpleNamespace(
        baseline={"bytes_moved": 4e6, "copy_gbps": 4000.0, "us_per_launch": 2.0},  # 50 %
        best={"notes": {"bytes_moved": 4e6, "copy_gbps": 4000.0, "us_per_launch": 1.6}}))
    text = report(verdict, manifest, choices, [run])
    assert text.splitlines()[0].startswith("step: torch.compile 2.000 ms -> with evo's kernels 1.900 ms (1.053x")
    share = manifest["triton_gpu_us"] / manifest["step_gpu_us"]
    assert f"{100 * share:.1f} % of the step's GPU time" in text
    assert f"at most {1 / (1 - share):.2f}x faster" in text
    assert text.count("| yes") == 1 and text.count("no: not evolved in this run") == 4
    busy = manifest["step_gpu_us"]  # 32 us of GPU work in a 2 ms step: the host's step
    assert (f"the GPU is busy {busy / 1e3:.3f} ms of the 2.000 ms step "
            f"({100 * busy / 2e3:.0f} %): the rest is the host launching work") in text
    assert "the GPU is busy" not in report(verdict | {"baseline_ms": busy / 1e3 * 1.1}, manifest, choices)
    ran = report(verdict | {"kernels_installed": [], "kernels_refused": {
        choices[0].kernel: "RuntimeError: no kernel image"}}, manifest, choices)
    assert ran.count("| yes") == 0 and "no: RuntimeError: no kernel image" in ran
    assert "no: not launched with its captured code and sizes" in report(
        verdict | {"kernels_installed": []}, manifest, choices)
    other = "Inductor compiled other code for it in this run than it captured"
    assert f"no: {other}" in report(verdict | {"kernels_installed": [], "kernels_not_found": {
        choices[0].kernel: other}}, manifest, choices)
    assert f"{first['name']} | {100 * first['share']:.1f} % | 1.25x | 50 % -> 62 % | yes" in text
    saved = first["gpu_us"] * 0.5  # half its time is above the roofline
    step = manifest["step_gpu_us"]
    assert (f"would save at most {saved:.1f} us of the step's GPU time "
            f"({step / (step - saved):.3f}x)") in text
    # the measure: how much of that gap the step itself closed (2.0 -> 1.9 ms, more
    # than the roofline allows here: noise); a change within it is a share of the gap
    assert saved < 100.0
    assert "the step took 100.0 us less: more than these kernels could save at the copy roofline" in text
    near = report(verdict | {"evolved_ms": 2.0 - saved / 2e3}, manifest, choices, [run])
    assert f"the step took {saved / 2:.1f} us less: 50 % of that gap closed" in near
    assert "within that noise" not in text and "within that noise" not in near
    noisy = report(verdict | {"control": 1.06}, manifest, choices, [run])  # A/A moved more
    assert "the A/A control, its own kernels timed again in the same rounds: 1.060x: the change " \
           "is within that noise" in noisy.splitlines()[0]
    slower = report(verdict | {"evolved_ms": verdict["baseline_ms"] + 0.05}, manifest, choices, [run])
    assert "the step took 50.0 us more: none of that gap closed" in slower


def test_the_outputs_line_and_the_model_checks_say_how_close():
    from evo.model.install_plan import Choice
    from evo.model.verify import outputs_line

    base = {"outputs_agree": True, "rtol": 0.05, "atol": 0.05, "max_abs_err": 0.0,
            "max_rel_err": 0.0}
    assert outputs_line(base | {"bitwise": True, "eager_max_abs_err": 0.25}) == \
        "outputs bitwise equal; torch.compile's own differ from eager by 0.25"
    assert outputs_line(base | {"bitwise": False, "within_tolerance": True,
                                "max_abs_err": 0.01}).startswith("outputs agree (rtol 0.05")
    near = outputs_line(base | {"bitwise": False, "within_tolerance": False, "max_abs_err": 0.5,
                                "eager_max_abs_err": 0.75})
    assert near.startswith("outputs differ no more than compiling alone") and "0.75" in near
    assert "DIFFER (" in outputs_line(base | {"outputs_agree": False, "within_tolerance": False,
                                              "bitwise": False, "max_abs_err": 2.0})
    manifest = capture.read(DECODER)
    k = manifest["kernels"][0]
    choices = [Choice(k["name"], k["source"]["kernel"], "", {}, b"x")]
    verdict = base | {"baseline_ms": 2.0, "evolved_ms": 1.9, "speedup": 1.05, "repeats": 3,
                      "checks": {k["source"]["kernel"]: [
                          {"agree": True, "bitwise": True, "max_abs_err": 0.0, "worst": ""}] * 2}}
    assert "| yes | bitwise equal (2 launches)" in report(verdict, manifest, choices)
    verdict |= {"control": 1.002, "in_model": {k["source"]["kernel"]: {
        "own_us": 12.0, "evolved_us": 10.0, "timed": 10}}}
    text = report(verdict, manifest, choices)
    assert "(1.050x end to end, median of 3 rounds; the A/A control, its own kernels timed " \
           "again in the same rounds: 1.002x)" in text
    assert "| 12.00 -> 10.00 us (1.20x, 10 each)" in text
    verdict["in_model"][k["source"]["kernel"]]["timed"] = 1  # one launch is not a median
    assert "| not timed: 1 launch(es) of each code, 3 needed" in report(verdict, manifest, choices)
    verdict["checks"][k["source"]["kernel"]] = [{"agree": False, "bitwise": False,
                                                 "max_abs_err": 3.0, "worst": "out_ptr0: 7 of 9"}]
    assert "| DIFFERS: out_ptr0: 7 of 9" in report(verdict, manifest, choices)


@needs_ptxas
def test_the_plan_assembles_for_the_gpu_the_program_compiled_for(tmp_path):
    """A capture from an A100 (PTX .target sm_80) is installed as an sm_80 cubin, not as
    evo's default sm_90, which an A100 would refuse to load."""
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(DECODER, cap)
    first = capture.read(cap)["kernels"][0]
    ptx = first["kernel_spec"].ptx_text()
    sm80 = ptx.replace(".target sm_90a", ".target sm_80")
    assert sm80 != ptx
    ptx_file = next(p for p in (cap / "kernels").rglob("*.ptx") if p.read_text() == ptx)
    ptx_file.write_text(sm80)
    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    (run / "checkpoint.json").write_text(json.dumps({"kernels": {}}))
    best = apply_genome(sm80, parse_inline("maxnreg(n=32)")).ptx
    (run / "best" / f"{first['kernel_spec'].name}.ptx").write_text(best)
    choice = {c.name: c for c in plan(cap, run)}[first["name"]]
    assert choice.cubin, choice.reason
    # a CUDA ELF's e_flags hold the SM version in bits 8-15 (0x50: sm_80, 0x5a: sm_90)
    assert (int.from_bytes(choice.cubin[48:52], "little") >> 8) & 0xFF == 80


# --------------------------------------------------------------------------- the finder


class _Autotuner:
    """Inductor's CachingAutotuner as the finder sees it: a name and one launcher."""

    def __init__(self, name: str):
        self.fn = SimpleNamespace(__name__=name)
        self.launchers = [object()]


class _Finder:
    """``Installed`` whose launchers are dict entries (no Triton): ``good`` kernels get a
    new function, ``bad`` ones raise while being prepared."""

    @staticmethod
    def make(names):
        from evo.model.install import Installed, Swap
        from evo.model.install_plan import Choice

        class Finder(Installed):
            prepared: list = []

            def _prepare(self, autotuner, launcher, args):
                name = autotuner.fn.__name__
                Finder.prepared.append(name)
                if not any(kernel == name for kernel, _ in self.choices):
                    return None  # not captured: as the real one
                if name == "bad":
                    raise RuntimeError("no CUfunction")
                holder = {"function": f"{name}-own"}
                return Swap(name, [(holder, "function", f"{name}-own", f"{name}-evolved")])

        return Finder([Choice(n, n, "sha", {}, cubin=b"x") for n in names])


def test_the_finder_prepares_a_launcher_once_records_refusals_and_swaps_while_enabled():
    finder = _Finder.make(["good", "bad", "later"])
    good, bad = _Autotuner("good"), _Autotuner("bad")
    finder._look(good, ())
    finder._look(good, ())
    finder._look(bad, ())
    entry = finder.entry_for(good, ())
    holder = entry.items[0][0]
    assert type(finder).prepared == ["good", "bad"]  # each launcher once
    assert holder["function"] == "good-evolved" and finder.swapped == {"good": True}
    assert finder.refused == {"bad": "RuntimeError: no CUfunction"}
    assert finder.entry_for(bad, ()) is None
    assert "good: evolved code" in finder.describe()
    assert "bad: its own code (could not swap: RuntimeError: no CUfunction)" in finder.describe()
    assert "later: its own code (not launched with its captured code and sizes yet)" in finder.describe()
    finder.disable()
    assert holder["function"] == "good-own" and finder.swapped == {"good": False}


def test_a_kernel_not_found_says_whether_its_code_or_its_sizes_differed():
    from evo.model.install import Installed
    from evo.model.install_plan import Choice

    finder = Installed([Choice("k", "k", "sha1", {"xnumel": 64}, cubin=b"x")])
    assert finder._match("k", "sha2", lambda scalars: True) is None  # autotuning's other pick
    assert "compiled other code for it in this run" in finder.not_found("k")
    assert finder._match("k", "sha1", lambda scalars: scalars == {"xnumel": 32}) is None
    assert "compiled other code" in finder.not_found("k")  # the first reason stays
    finder.missed.clear()
    assert finder._match("k", "sha1", lambda scalars: False) is None
    assert finder.not_found("k") == "launched at other sizes than it was captured with"
    assert finder._match("k", "sha1", lambda scalars: scalars == {"xnumel": 64}).kernel == "k"
    assert "k" not in finder.missed


def test_verify_puts_the_evolved_code_in_once_and_takes_it_out_at_the_end():
    from evo.model.check import ProgramCheck

    check = ProgramCheck([], {})
    check.finder = _Finder.make(["good"])
    good = _Autotuner("good")
    entry = check._entry(good, ())
    holder = entry.items[0][0]
    assert holder["function"] == "good-evolved"
    holder["function"] = "good-own"  # as _twice/_timed leave it between launches
    assert check._entry(good, ()) is entry and holder["function"] == "good-own"  # not again
    assert check._entry(_Autotuner("other"), ()) is None
    check.__exit__(None, None, None)
    assert holder["function"] == "good-own"


def test_a_captured_launcher_gets_the_evolved_cubin_at_its_sizes_only(monkeypatch):
    """``Installed._prepare`` with stand-ins for Triton's launcher and loader: the launcher
    whose PTX and sizes are the captured ones has its CUfunction swapped for the loaded
    cubin's; at other sizes, or with other code, it keeps its own (and says why)."""
    import sys
    import types

    from evo.model.install import Installed
    from evo.model.install_plan import Choice, code_sha as _sha

    loaded = []

    def load_binary(name, cubin, shared, device):
        loaded.append((name, cubin, shared, device))
        return "module", f"{name}-evolved", 0, 0

    fake = types.ModuleType("triton")
    fake.runtime = SimpleNamespace(driver=SimpleNamespace(active=SimpleNamespace(
        utils=SimpleNamespace(load_binary=load_binary))))
    monkeypatch.setitem(sys.modules, "triton", fake)

    def autotuner(ptx: str):
        scope = {"bin": SimpleNamespace(asm={"ptx": ptx}), "function": "own"}
        launcher = types.FunctionType((lambda: None).__code__, scope)
        launcher.shared = 128
        fn = SimpleNamespace(__name__="k", arg_names=["in_ptr0", "xnumel"], constexprs=())
        return SimpleNamespace(fn=fn, launchers=[launcher], triton_meta={"device": 0}), scope

    finder = Installed([Choice("k", "k", _sha("PTX"), {"xnumel": 64}, cubin=b"cubin")])
    other_size, _ = autotuner("PTX")
    assert finder.entry_for(other_size, ("x", 32)) is None
    assert finder.not_found("k") == "launched at other sizes than it was captured with"
    other_code, _ = autotuner("other PTX")
    assert finder.entry_for(other_code, ("x", 64)) is None and not loaded
    right, scope = autotuner("PTX")
    swap = finder.entry_for(right, ("x", 64))
    assert swap.name == "k" and swap.items == [(scope, "function", "own", "k-evolved")]
    assert loaded == [("k", b"cubin", 128, 0)] and "k" not in finder.missed


def test_a_shrunk_grid_is_launched_by_inductors_launcher_divided(monkeypatch):
    """A genome that gave each thread k threads' work (coarsen_tile) is installed with
    Inductor's own launcher: its generated code computes the captured grid, and the runner
    it calls is swapped for one launching k times fewer blocks, with the evolved function;
    switched off, both are its own again."""
    import sys
    import types

    from evo.model.install import Installed
    from evo.model.install_plan import Choice, code_sha as _sha

    fake = types.ModuleType("triton")
    fake.runtime = SimpleNamespace(driver=SimpleNamespace(active=SimpleNamespace(
        utils=SimpleNamespace(load_binary=lambda name, cubin, shared, device: (
            "module", "evolved", 0, 0)))))
    monkeypatch.setitem(sys.modules, "triton", fake)
    launched = []
    scope = {"bin": SimpleNamespace(asm={"ptx": "PTX"}), "function": "own",
             "runner": lambda *args: launched.append(args)}
    exec("def launcher(in_ptr0, xnumel, stream):\n"  # the shape Inductor generates
         "    grid_0 = -(xnumel // -64)\n    grid_1 = 1\n    grid_2 = 1\n"
         "    runner(grid_0, grid_1, grid_2, stream, function, in_ptr0, xnumel)\n", scope)
    launcher = scope["launcher"]
    launcher.shared = 0
    fn = SimpleNamespace(__name__="k", arg_names=["in_ptr0", "xnumel"], constexprs=())
    autotuner = SimpleNamespace(fn=fn, launchers=[launcher], triton_meta={"device": 0})
    finder = Installed([Choice("k", "k", _sha("PTX"), {"xnumel": 4096}, cubin=b"cubin",
                               grid_divisor=(4, 1, 1))])
    finder._look(autotuner, ("x", 4096))
    launcher("x", 4096, "s")
    finder.disable()
    launcher("x", 4096, "s")
    finder.enable()
    launcher("x", 4096, "s")
    assert launched == [(16, 1, 1, "s", "evolved", "x", 4096), (64, 1, 1, "s", "own", "x", 4096),
                        (16, 1, 1, "s", "evolved", "x", 4096)]
    assert finder.describe() == "k: evolved code  []"


def test_a_grid_changed_for_a_code_of_several_sizes_is_not_installed(tmp_path):
    from evo.model.install_plan import _grid_divisor

    spec = SimpleNamespace(grid=(128, 1, 1), block=(128, 1, 1))
    path = tmp_path / "k.launch.json"
    path.write_text(json.dumps({"grid": [32, 1, 1], "block": [128, 1, 1]}))
    assert _grid_divisor(path, spec, fixed=True) == ((4, 1, 1), "")
    divisor, why = _grid_divisor(path, spec, fixed=False)
    assert divisor == () and why.startswith("its genome shrinks the grid, installed only for a code run at one size")
    assert _grid_divisor(tmp_path / "none.launch.json", spec, fixed=False) == ((1, 1, 1), "")
    path.write_text("{")
    assert _grid_divisor(path, spec, fixed=True)[1].startswith("its launch file k.launch.json does not read")


def test_verify_restores_what_inductor_names_written_and_what_the_spec_judges_written():
    """Between the two codes of a checked launch, verify puts back every tensor the launch
    writes: those Inductor names out/in_out, and those the spec judges written (an output
    the code adds into is inout there); scalars are never tensors to put back."""
    import dataclasses

    from evo.model.check import ProgramCheck

    k = capture.read(DECODER)["kernels"][0]
    spec = k["kernel_spec"]
    params = [dataclasses.replace(p, role="inout") if p.name == "in_ptr3" else p for p in spec.params]
    judged = dataclasses.replace(spec, params=params)
    name = k["source"]["kernel"]
    autotuner = SimpleNamespace(fn=SimpleNamespace(__name__=name, arg_names=[p.name for p in spec.params]))
    args = [SimpleNamespace(clone=None) if p.kind == "buffer" else 7 for p in spec.params]
    for specs, written in (({}, {"out_ptr1"}), ({name: judged}, {"out_ptr1", "in_ptr3"})):
        assert set(ProgramCheck([], specs)._written(autotuner, args)) == written


def test_verify_times_the_two_codes_in_turn_at_each_size(monkeypatch):
    """A code compiled for dynamic shapes runs every size from one launcher: a program
    alternating two sizes must not have one code timed at each (its 0.87x on an H200 was
    the sizes, not the code). Each size gets both codes in turn; sizes weigh by launches."""
    from evo.model import check
    from evo.model.install import Swap

    monkeypatch.setattr(check, "elapsed_us", lambda pairs, statistic: statistic([b - a for a, b in pairs]))
    holder = {"function": "own"}
    us = {("own", 1): 10.0, ("new", 1): 9.0, ("own", 2): 20.0, ("new", 2): 18.0}
    size = {"now": 1}

    class Timer:
        def time(self, stream, run):
            return run(), (0.0, us[(holder["function"], size["now"])])

    program_check = check.ProgramCheck([], {}, timed=4)
    program_check.timer = Timer()
    entry = Swap("k", [(holder, "function", "own", "new")])
    for launch in range(16):
        size["now"] = 1 + launch % 2
        program_check._timed(lambda: None, entry, None, (("xnumel", size["now"]),))
    assert program_check.times_us() == {"k": {"own_us": 15.0, "evolved_us": 13.5, "timed": 8}}
    assert holder["function"] == "new"  # the evolved code stays in


@needs_ptxas
def test_the_plan_leaves_out_what_verify_found_differing_or_slower_in_the_program(tmp_path):
    """evo verify keeps its verdicts in the run folder; evo.install then leaves out a best
    that differed from its own code on the program's data or ran slower there (for that
    same best only), while verify itself checks every best anew."""
    from evo.model.install_plan import VERIFIED

    run = _decoder_run(tmp_path / "run", "maxnreg(n=32)")
    name = capture.read(DECODER)["kernels"][0]["name"]

    def choice(verdict, **kw):
        (run / VERIFIED).write_text(json.dumps({"kernels": {name: verdict}}))
        return {c.name: c for c in plan(DECODER, run, **kw)}[name]

    timed = {"genome": "maxnreg(n=32)", "agree": True, "timed": 6}
    assert choice(timed | {"own_us": 10.0, "evolved_us": 9.0}).cubin is not None
    slower = choice(timed | {"own_us": 10.0, "evolved_us": 10.5})
    assert slower.cubin is None and slower.reason.startswith("slower in the program: 10.00 us -> 10.50 us")
    assert choice(timed | {"own_us": 10.0, "evolved_us": 10.5}, verified=False).cubin is not None
    differs = choice({"genome": "maxnreg(n=32)", "agree": False, "worst": "out_ptr1: 3 elements"})
    assert differs.cubin is None and "differing from its own code" in differs.reason
    other_best = choice(timed | {"genome": "maxnreg(n=64)", "own_us": 10.0, "evolved_us": 12.0})
    assert other_best.cubin is not None  # a verdict on another best says nothing of this one
    assert choice(timed | {"own_us": 10.0, "evolved_us": 10.5, "timed": 2}).cubin is not None


@needs_ptxas
def test_a_program_checks_verdicts_kept_leave_out_a_kernel_slower_in_the_program(tmp_path):
    """What ``evo verify`` and the round trip do after their ProgramCheck: its verdicts per
    installed choice (``kernel_verdicts``) kept in the run folder (``keep_verdicts``), and the
    plan then leaves out a best that ran slower in the program, keeps one that agreed."""
    from evo.model.check import ProgramCheck, keep_verdicts, kernel_verdicts
    from evo.model.install_plan import VERIFIED

    run = _decoder_run(tmp_path / "run", "maxnreg(n=32)")
    chosen = [c for c in plan(DECODER, run) if c.cubin is not None]
    assert len(chosen) == 1
    kernel, name = chosen[0].kernel, chosen[0].name
    check = ProgramCheck(chosen, {})
    check.results[kernel] = [{"agree": True, "bitwise": True, "max_abs_err": 0.0, "worst": ""}] * 3
    check.launched[kernel] = 23

    def verdicts(own_us: float, evolved_us: float) -> dict:
        check.times_us = lambda: {kernel: {"own_us": own_us, "evolved_us": evolved_us, "timed": 10}}
        return kernel_verdicts(check, chosen)

    slower = verdicts(10.0, 11.0)
    assert slower[name]["checked"] == 3
    assert slower[name]["agree"] is True and slower[name]["launched"] == 23
    assert slower[name]["genome"] == chosen[0].genome and slower[name]["evolved_us"] == 11.0
    keep_verdicts(run, ["python", "app.py"], slower)
    assert json.loads((run / VERIFIED).read_text())["program"] == "python app.py"
    left_out = {c.name: c for c in plan(DECODER, run)}[name]
    assert left_out.cubin is None and left_out.reason.startswith("slower in the program: 10.00 us -> 11.00 us")
    keep_verdicts(run, ["python", "app.py"], verdicts(10.0, 9.0))
    assert {c.name: c for c in plan(DECODER, run)}[name].cubin is not None


@needs_ptxas
def test_a_code_one_launcher_runs_at_two_sizes_is_installed_once_checked_at_both(tmp_path):
    """Its code reads no size, yet the capture saw it at two (one launcher): installed like
    a dynamic kernel, only with its best checked at the other size, matched at either."""
    cap = tmp_path / "cap"
    _, one, other = capture_with_one_code(cap, 0, 1)
    spec = capture.read(cap)["kernels"][0]["kernel_spec"]
    run = tmp_path / "run"
    _best(run, spec, "maxnreg(n=32)")
    (run / "checkpoint.json").write_text(json.dumps({"kernels": {}}))
    unchecked = {c.name: c for c in plan(cap, run)}[one["name"]]
    sibling = {c.name: c for c in plan(cap, run)}[other["name"]]
    assert sibling.reason == f"one code with {one['name']}, evolved once as it: {unchecked.reason}"
    assert unchecked.cubin is None
    assert unchecked.reason.startswith("one launcher runs its code at 2 captured sizes: its best was not checked")
    key = parse_inline("maxnreg(n=32)").effective().dumps()
    (run / "checkpoint.json").write_text(json.dumps({"kernels": {spec.name: {"sizes": {
        "from": key, "kept": key, "at": {other["name"]: {"valid": True}}, "demoted": []}}}}))
    checked = {c.name: c for c in plan(cap, run)}[one["name"]]
    assert checked.cubin is not None and checked.scalars == {}
