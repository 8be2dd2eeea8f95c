"""evo.model.capture on the CPU, on a committed capture (tests/data/capture/decoder: the
example decoder's Inductor kernels, captured on an H200 with torch 2.11): the manifest and
specs read back and assemble, the launches it records write the same specs again, and the
rules that make specs from launches (roles, extents, dedup, time split, refusals)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evo.model import capture, step_time
from evo.model.capture import Arg, Launch
from genomes.errors import EvoError

from conftest import capture_with_one_code, needs_ptxas

DECODER = Path(__file__).parent / "data" / "capture" / "decoder"


@pytest.fixture(scope="module")
def manifest():
    return capture.read(DECODER)


def _launches(manifest) -> list[Launch]:
    """The launches the committed manifest records, with their PTX from the spec files."""
    out = []
    for k in manifest["kernels"]:
        d = dict(k["launch"])
        d["args"] = tuple(Arg(**a) for a in d["args"])
        d["grid"] = tuple(d["grid"])
        d["ptx"] = k["kernel_spec"].ptx_text()
        out.append(Launch(**d))
    return out


def test_the_committed_capture_reads_back_with_bf16_and_index_buffers(manifest):
    assert manifest["source"]["torch"].startswith("2.11") and manifest["step_gpu_us"] > 0
    assert len(manifest["kernels"]) == 5 and manifest["skipped"] == []
    dtypes = {p.dtype for k in manifest["kernels"] for p in k["kernel_spec"].buffers()}
    assert {"bf16", "i64"} <= dtypes
    embed = next(k for k in manifest["kernels"] if k["launch"]["args"][0]["type"] == "*i64")
    ids = embed["kernel_spec"].param("in_ptr0")
    assert (ids.fill, ids.low, ids.high) == ("int", 6, 8103)  # the ids seen: gathers stay in bounds
    for k in manifest["kernels"]:
        spec = k["kernel_spec"]
        assert spec.block == (k["block"], 1, 1) and spec.grid == tuple(k["grid"])
        assert [p.name for p in spec.buffers()][-2:] == ["global_scratch", "profile_scratch"]


@needs_ptxas
def test_every_captured_kernel_assembles_and_a_gene_applies(manifest):
    from evo import api

    for k in manifest["kernels"]:
        m = api.measure(k["kernel_spec"], backend="static", store=":memory:")
        assert m.valid is None and m.timer == "static" and m.cycles, (k["name"], m.reason)
    first = manifest["kernels"][0]["kernel_spec"]
    assert api.measure(first, "cache_ld(policy=cs)", backend="static", store=":memory:").cycles


def test_the_recorded_launches_write_the_same_specs_again(manifest, tmp_path):
    launches = _launches(manifest)
    times = {k["source"]["kernel"]: k["gpu_us"] for k in manifest["kernels"]}
    again = capture.write(launches, tmp_path, times, manifest["step_gpu_us"], manifest["source"])
    back = capture.read(tmp_path)
    assert [k["name"] for k in back["kernels"]] == [k["name"] for k in manifest["kernels"]]
    for old, new in zip(manifest["kernels"], back["kernels"]):
        assert new["kernel_spec"].params == old["kernel_spec"].params
        assert new["kernel_spec"].ptx_text() == old["kernel_spec"].ptx_text()
        assert new["share"] == pytest.approx(old["share"])
    assert again["triton_gpu_us"] == pytest.approx(manifest["triton_gpu_us"])


def test_a_step_that_waits_on_the_host_is_said_to_in_the_manifest_and_the_run_report(manifest, tmp_path, capsys):
    """A captured step's own time beside its GPU work: where the GPU is busy for less than
    WAITS_ON_HOST of it, faster kernels shorten only that part, and the run's report says so
    before anyone waits for the A/B (transformers' steps at 8 x 512: 34-42 %, session 24)."""
    from evo.cli import main

    launches = _launches(manifest)
    times = {k["source"]["kernel"]: k["gpu_us"] for k in manifest["kernels"]}
    gpu = manifest["step_gpu_us"]
    busy = capture.write(launches, tmp_path / "busy", times, gpu, step_wall_us=gpu / 0.9)
    waits = capture.write(launches, tmp_path / "waits", times, gpu, step_wall_us=gpu * 3)
    assert capture.read(tmp_path / "waits")["step_wall_us"] == pytest.approx(gpu * 3)
    assert step_time.waits_on_host(busy) == "" and step_time.waits_on_host({"step_gpu_us": gpu}) == ""
    line = step_time.waits_on_host(waits)
    assert line.startswith(f"the step waits on the host: its GPU work is {gpu / 1e3:.3f} of its "
                           f"{3 * gpu / 1e3:.3f} ms (33 %)"), line
    program = capture.write(launches, tmp_path / "program", times, gpu, step_timed=False, step_wall_us=1.0)
    assert program["step_wall_us"] is None  # a whole program has no one step
    for name, says in (("waits", True), ("busy", False)):
        run = tmp_path / f"run_{name}"
        code = main(["run", "--model", str(tmp_path / name), "--backend", "static", "--generations", "1",
                     "--pop", "2", "--out", str(run), "--store", str(tmp_path / f"{name}.sqlite"), "-q"])
        assert code == 0, capsys.readouterr().out
        report = (run / "report.md").read_text()
        assert ("  The step waits on the host: its GPU work is" in report) == says, report[-800:]


def test_a_relative_folder_works_as_the_readme_writes_it(manifest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = capture.write(_launches(manifest)[:1], "cap")
    assert m["kernels"][0]["spec"].startswith("kernels/")
    assert capture.read("cap")["kernels"][0]["kernel_spec"].params == manifest["kernels"][0]["kernel_spec"].params


def test_identical_launches_are_one_kernel_and_share_their_names_time(manifest, tmp_path):
    first = _launches(manifest)[0]
    wider = Launch(**{**first.__dict__, "grid": (first.grid[0] * 2, 1, 1)})
    m = capture.write([first, first, wider], tmp_path, {first.kernel: 9.0}, 30.0)
    assert [(k["launches"], k["gpu_us"]) for k in m["kernels"]] == [(2, 6.0), (1, 3.0)]
    assert m["kernels"][1]["name"] == first.kernel + "_1"  # same name, other launch
    assert m["triton_gpu_us"] == 9.0 and m["kernels"][0]["share"] == pytest.approx(0.2)


def test_a_kernel_that_cannot_be_a_spec_is_listed_with_the_reason(manifest, tmp_path):
    first = _launches(manifest)[0]
    workspace = Launch(**{**first.__dict__, "kernel": "k_ws", "args": first.args[:-3] + (
        Arg("ws_ptr", "*u8", 64, ""),) + first.args[-2:]})
    fnuz = Launch(**{**first.__dict__, "kernel": "k_fnuz", "args": (
        Arg("in_ptr0", "*fp8e4b8", 64, "in", low=0.0, high=1.0),) + first.args[1:]})
    m = capture.write([first, workspace, fnuz], tmp_path)
    assert [k["name"] for k in m["kernels"]] == [first.kernel]
    reasons = {s["kernel"]: s["reason"] for s in m["skipped"]}
    assert "ws_ptr is a workspace" in reasons["k_ws"]
    assert "fp8e4b8, which evo's buffers do not hold" in reasons["k_fnuz"]  # AMD's fp8
    assert json.loads((tmp_path / capture.MANIFEST).read_text())["skipped"] == m["skipped"]


@pytest.mark.parametrize("name, role", [("in_ptr0", "in"), ("out_ptr3", "out"), ("arg_A", "in"),
                                        ("in_out_ptr0", "inout"), ("ws_ptr", None), ("sem_ptr", None)])
def test_roles_come_from_inductors_argument_names(name, role):
    assert capture.role_of(name) == role


def test_an_output_the_code_also_adds_into_is_inout(manifest, tmp_path):
    """An embedding's backward adds atomically into a gradient an earlier kernel zeroed
    (out_ptr0 by name): judged as an output alone, the rows no token touched read as
    unwritten and the baseline failed. The code's atomic makes it inout."""
    import re

    first = _launches(manifest)[0]
    store = next(line for line in first.ptx.splitlines() if re.search(r"\bst\.global", line))
    address = re.search(r"\[([^\]]+)\]", store).group(1)
    adds = first.ptx.replace(store, f"{store}\n\tred.global.add.u32 [{address}], 0;", 1)
    capture.write([Launch(**{**first.__dict__, "ptx": adds})], tmp_path / "adds")
    capture.write([first], tmp_path / "plain")
    roles = {}
    for name in ("plain", "adds"):
        spec = capture.read(tmp_path / name)["kernels"][0]["kernel_spec"]
        roles[name] = {p.name: p.role for p in spec.params if p.kind == "buffer"}
    (written,) = [n for n, r in roles["plain"].items() if r == "out"]
    assert roles["adds"] == roles["plain"] | {written: "inout"}


def test_a_templates_arg_pointers_are_inputs_not_workspaces(manifest, tmp_path):
    """max-autotune's GEMM templates name their inputs arg_A, arg_B: kernels to evolve."""
    first = _launches(manifest)[0]
    inputs = [a for a in first.args if a.role == "in"]
    renamed = {a.name: f"arg_{chr(65 + i)}" for i, a in enumerate(inputs)}
    args = tuple(Arg(**{**a.__dict__, "name": renamed[a.name], "role": capture.role_of(renamed[a.name])})
                 if a.name in renamed else a for a in first.args)  # the role a launch records
    m = capture.write([Launch(**{**first.__dict__, "args": args})], tmp_path)
    assert not m["skipped"]
    spec = capture.read(tmp_path)["kernels"][0]["kernel_spec"]
    assert [spec.param(n).role for n in renamed.values()] == ["in"] * len(renamed)


def test_a_user_defined_kernels_own_names_take_their_roles_from_its_code(manifest, tmp_path):
    """A Triton kernel the user wrote and torch.compile launched keeps the user's names
    (x, result): read only, an input; written, inout (nothing says it is all written)."""
    first = _launches(manifest)[0]
    user = {a.name: f"user_{a.name.split('_')[0]}{i}" for i, a in enumerate(first.args) if a.pointer}
    args = tuple(Arg(**{**a.__dict__, "name": user[a.name], "role": capture.role_of(user[a.name]) or ""})
                 if a.name in user else a for a in first.args)
    assert not capture.write([Launch(**{**first.__dict__, "args": args})], tmp_path)["skipped"]
    spec = capture.read(tmp_path)["kernels"][0]["kernel_spec"]
    want = {user[a.name]: ("inout" if a.role == "out" else a.role) for a in first.args if a.pointer}
    assert {p.name: p.role for p in spec.buffers() if p.name in want} == want


def test_extent_counts_what_a_strided_view_reaches():
    assert capture.extent((4, 8), (8, 1)) == 32
    assert capture.extent((4, 8), (16, 1)) == 56  # rows of a wider buffer: holes between them
    assert capture.extent((3, 0), (1, 1)) == 0 and capture.extent((), ()) == 1


def test_a_strided_output_is_judged_whole_as_inout(manifest, tmp_path):
    first = _launches(manifest)[0]
    args = tuple(Arg(**{**a.__dict__, "contiguous": False}) if a.role == "out" else a
                 for a in first.args)
    m = capture.write([Launch(**{**first.__dict__, "args": args})], tmp_path)
    spec = capture.read(tmp_path)["kernels"][0]["kernel_spec"]
    assert spec.param("out_ptr1").role == "inout", m


def test_a_folder_without_a_manifest_is_one_clear_error(tmp_path):
    with pytest.raises(EvoError, match="not a capture folder: no manifest.json"):
        capture.read(tmp_path)
    shutil.copytree(DECODER, tmp_path / "c")
    (tmp_path / "c" / capture.MANIFEST).write_text(json.dumps({"format": 99, "kernels": []}))
    with pytest.raises(EvoError, match="capture format 99"):
        capture.read(tmp_path / "c")


def test_evo_run_model_on_a_folder_that_is_no_capture_says_so(tmp_path, capsys):
    """`evo run --model` given a plain folder or a run folder (a user's slip): exit 2 with
    what the folder is and where a capture comes from, not "cannot read: Is a directory"."""
    from evo.checkpoint import FILE
    from evo.cli import main

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / FILE).write_text("{}")
    for folder, said in ((tmp_path, "is a folder, not a capture"),
                         (tmp_path / "run", "is a run folder, not a capture")):
        assert main(["run", "--model", str(folder), "--backend", "static", "-q"]) == 2
        err = capsys.readouterr().err
        assert said in err and "evo capture -o DIR" in err and "Is a directory" not in err, err


@needs_ptxas
def test_evo_run_model_evolves_a_captures_kernels_largest_share_first(tmp_path, capsys):
    from evo.cli import main
    from evo.run_kernels import resolve_suite

    order = [s.name for s in resolve_suite([str(DECODER)])]
    assert order == [k["name"] for k in capture.read(DECODER)["kernels"]]
    code = main(["run", "--model", str(DECODER), "--backend", "static", "--generations", "1",
                 "--pop", "2", "--out", str(tmp_path / "run"), "--store", str(tmp_path / "s.sqlite"), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert sorted(p.stem for p in (tmp_path / "run" / "best").glob("*.ptx")) == sorted(order)
    assert f"next: evo verify --model {DECODER} --run {tmp_path / 'run'}" in out
    # report.md says what the speedups would do to the model, from the capture's shares
    report = (tmp_path / "run" / "report.md").read_text()
    line = next(ln for ln in report.splitlines() if ln.startswith(f"- {DECODER}: the "))
    manifest = capture.read(DECODER)
    share = sum(k["share"] for k in manifest["kernels"])
    assert f"the {len(order)} kernel(s) evolved are {100 * share:.1f} % of the step's GPU time" in line
    assert "(static estimates, not measured)" in line and "x on it)" in line


def test_the_arguments_of_a_launch_are_named_without_declared_constexprs():
    """What the recorder and the installer both read of a CachingAutotuner.run call."""
    import types

    fn = types.SimpleNamespace(arg_names=["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"], constexprs=[3])
    autotuner = types.SimpleNamespace(fn=fn)
    assert capture.passed(autotuner, ("a", "b", 256)) == {"in_ptr0": "a", "out_ptr0": "b", "xnumel": 256}
    from evo.model.install import Installed

    assert Installed._same_shape(autotuner, ("a", "b", 256), {"xnumel": 256})
    assert not Installed._same_shape(autotuner, ("a", "b", 512), {"xnumel": 256})


def test_a_whole_programs_capture_says_its_shares_are_of_the_triton_time(manifest, tmp_path):
    """evo capture of a program times its Triton kernels only: no step time is claimed."""
    first = _launches(manifest)[0]
    m = capture.write([first] * 3, tmp_path, {first.kernel: 9.0}, 9.0, step_timed=False)
    assert m["step_gpu_us"] is None and m["share_of"] == "the Triton kernels' GPU time"
    assert m["kernels"][0]["launches"] == 3 and m["kernels"][0]["share"] == pytest.approx(1.0)
    assert capture.write([first], tmp_path / "b", {first.kernel: 9.0}, 30.0)["step_gpu_us"] == 30.0


def test_fp8_pointers_become_fp8_buffers_drawn_over_the_range_seen(manifest, tmp_path):
    first = _launches(manifest)[0]
    fp8 = Launch(**{**first.__dict__, "kernel": "k_fp8", "args": (
        Arg("in_ptr0", "*fp8e4nv", 64, "in", low=-2.0, high=3.0),) + first.args[1:]})
    assert not capture.write([fp8], tmp_path)["skipped"]
    x = capture.read(tmp_path)["kernels"][0]["kernel_spec"].param("in_ptr0")
    assert (x.dtype, x.fill, x.low, x.high, x.nbytes) == ("f8e4m3", "uniform", -2.0, 3.0, 64)


def test_an_input_seen_constant_is_drawn_around_its_value(manifest, tmp_path):
    """A float input the capture saw at one value (zeros: a gradient at the first step)
    is drawn, not filled: a constant hides a variant that reads the wrong elements."""
    first = _launches(manifest)[0]
    for seen, drawn in ((0.0, (0.0, 1.0)), (-2.0, (-3.0, -1.0)), (4.0, (2.0, 6.0))):
        k = Launch(**{**first.__dict__, "args": (
            Arg("in_ptr0", "*bf16", 64, "in", low=seen, high=seen),) + first.args[1:]})
        capture.write([k], tmp_path / str(seen))
        x = capture.read(tmp_path / str(seen))["kernels"][0]["kernel_spec"].param("in_ptr0")
        assert (x.fill, x.low, x.high) == ("uniform", *drawn)


def test_a_kernel_that_reads_its_sizes_is_marked_dynamic_in_the_manifest(manifest, tmp_path):
    first = _launches(manifest)[0]
    spec = manifest["kernels"][0]["kernel_spec"]
    size = next(i for i, p in enumerate(spec.params) if p.kind == "scalar")
    load = next(line for line in first.ptx.splitlines() if "ld.param.b64" in line)
    reads = f"{load}\n\t.reg .b32 %evo_n;\n\tld.param.b32 %evo_n, [{spec.entry}_param_{size}];"
    dynamic = Launch(**{**first.__dict__, "ptx": first.ptx.replace(load, reads, 1)})
    assert capture.write([first], tmp_path / "static")["kernels"][0]["reads_sizes"] == []
    marked = capture.write([dynamic], tmp_path / "dynamic")["kernels"][0]["reads_sizes"]
    assert marked == [spec.params[size].name]


def test_a_dynamic_kernel_captured_at_two_sizes_is_evolved_once_and_knows_its_other_size(tmp_path, capsys):
    """One code, one launcher, every size: the capture's two entries of it are one kernel
    to evolve (the larger share), and its other size is where its best is checked."""
    from evo.run_kernels import resolve_suite

    cap = tmp_path / "cap"
    data, one, other = capture_with_one_code(cap, 1, 2, reads_sizes=True)
    specs = resolve_suite([str(cap)])
    assert [s.name for s in specs] == [k["name"] for k in data["kernels"] if k is not other]
    assert f"{one['name']}'s code runs at 2 captured sizes from one launcher" in capsys.readouterr().err
    evolved = next(s for s in specs if s.name == one["name"])
    assert [s.name for s in capture.other_sizes(evolved)] == [other["name"]]
    assert capture.other_sizes(specs[0]) == []  # a static kernel has no other sizes


def test_a_code_that_does_not_read_its_sizes_but_runs_at_two_is_one_kernel_too(tmp_path):
    """A pointwise kernel whose block divides both sizes runs unmasked: its code reads no
    size, yet one launcher runs it at both (dynamic=True, H200): one kernel to evolve and
    check at each size, as a dynamic one; a static kernel at one size stays apart."""
    from evo.run_kernels import resolve_suite

    cap = tmp_path / "cap"
    data, one, other = capture_with_one_code(cap, 1, 2)
    groups = capture.same_code(data["kernels"])
    assert groups == {one["name"]: [one["name"], other["name"]], other["name"]: [one["name"], other["name"]]}
    assert [s.name for s in resolve_suite([str(cap)])] == [k["name"] for k in data["kernels"] if k is not other]
    for k in (one, other):  # without the compiled kernel's hash, one name is not one code
        k["source"]["cache_hash"] = ""
    assert capture.same_code(data["kernels"]) == {}


def test_a_capture_with_no_kernel_to_evolve_says_why(tmp_path):
    from evo.run_kernels import resolve_suite

    (tmp_path / capture.MANIFEST).write_text(json.dumps({"format": capture.FORMAT, "kernels": [], "skipped": [
        {"kernel": "triton_k", "launches": 2, "reason": "ws_ptr is a workspace (not an input or output)"}]}))
    with pytest.raises(EvoError, match="holds no kernel evo can evolve .1 skipped: triton_k: ws_ptr is a workspace"):
        resolve_suite([str(tmp_path)])


def test_a_run_on_a_capture_leaves_out_the_kernels_compiled_for_dynamic_shapes(tmp_path, capsys):
    from evo.run_kernels import resolve_suite

    cap = tmp_path / "cap"
    shutil.copytree(DECODER, cap)
    data = json.loads((cap / capture.MANIFEST).read_text())
    data["kernels"][1]["reads_sizes"] = ["xnumel"]
    (cap / capture.MANIFEST).write_text(json.dumps(data))
    names = [s.name for s in resolve_suite([str(cap)])]
    assert names == [k["name"] for i, k in enumerate(data["kernels"]) if i != 1]
    assert "1 kernel(s) left out, compiled for dynamic shapes" in capsys.readouterr().err
    for k in data["kernels"]:
        k["reads_sizes"] = ["xnumel"]
    (cap / capture.MANIFEST).write_text(json.dumps(data))
    with pytest.raises(EvoError, match="every captured kernel is compiled for dynamic shapes"):
        resolve_suite([str(cap)])


def test_the_profilers_kernel_times_add_up_by_name():
    """One reading of torch.profiler's kernel events for evo.capture's shares and a
    program capture's graph replays: GPU events only, summed by name, with their runs."""
    from types import SimpleNamespace as Event

    events = [Event(key="k", device_time_total=10.0, device_type="DeviceType.CUDA", count=2),
              Event(key="k", device_time_total=5.0, device_type="DeviceType.CUDA", count=1),
              Event(key="j", device_time_total=0.0, device_type="DeviceType.CUDA", count=4),
              Event(key="aten::add", device_time_total=3.0, device_type="DeviceType.CPU", count=1)]
    prof = Event(key_averages=lambda: events)
    assert step_time.profiled_kernels(prof) == {"k": (15.0, 3)}


def test_the_round_trip_says_which_package_its_model_needs(tmp_path, capsys):
    """torch (or torchvision, transformers) missing: a usage error naming it, no traceback."""
    import importlib.util

    from evo.model import roundtrip

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    for model in (["--transformers", "gpt2", "--train"], ["--torchvision", "resnet18"], []):
        with pytest.raises(SystemExit) as stop:
            roundtrip.main(model + ["--out", str(tmp_path)])
        assert stop.value.code == 2
        assert "the model needs torch, which is not installed here" in capsys.readouterr().err
    assert not (tmp_path / "capture").exists()


def test_the_round_trip_will_not_run_into_an_earlier_run(tmp_path, capsys):
    """An --out whose run folder holds a run: a usage error before the capture, no
    traceback after it (a second round trip into the same folder, as on a warm machine)."""
    from evo.model import roundtrip

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "meta.json").write_text("{}")
    with pytest.raises(SystemExit) as stop:
        roundtrip.main(["--out", str(tmp_path)])
    assert stop.value.code == 2
    assert "already holds a run; pass another --out" in capsys.readouterr().err
    assert not (tmp_path / "capture").exists()


def test_roundtrip_says_each_steps_seconds():
    """The round trip's job line: each step's own seconds, in order, their sum, and which
    GPUs searched."""
    from evo.model import roundtrip

    seconds = {"capture": 2.0, "evolve": 3.5, "verify": 0.2}
    assert roundtrip._job_line(seconds, "0,1") == (
        "the job: 5.7 s (capture 2.0 s, evolve 3.5 s, verify 0.2 s; searches on GPUs 0,1)")
    assert roundtrip._job_line(seconds, "").endswith("searches on the default GPUs)")
