"""harness.gpu.finalist on the CPU: compute-sanitizer's output parsed (logs as memcheck and
racecheck write them), the not-found and cannot-check paths (never a silent pass), the
static .nc check first, the determinism comparison, and the driver's own failure modes.
The GPU half (memcheck catching an out-of-bounds read, a clean relu passing) is in
tests/test_cheats_gpu.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import cheats
from harness.gpu import finalist
from harness.gpu.finalist import (DRIVER_OK, MEMCHECK, NOT_RUN, RACECHECK, UNSAFE_NC, check_finalist,
                                  parse_sanitizer, uses_shared_memory)
from harness.gpu.finalist_driver import STEPS
from harness.kernels.suite import find_kernel

from conftest import needs_ptxas

MEMCHECK_OOB = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at relu+0xc0
=========     by thread (192,0,0) in block (4095,0,0)
=========     Address 0x7f3a1e400000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a1e000000 of size 4,194,304 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f0b4f] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========
evo-finalist-driver: launch error: cudaErrorLaunchFailure: unspecified launch failure
========= ERROR SUMMARY: 65 errors
========= ERROR SUMMARY: 55 errors were not printed. Use --print-limit option to adjust the number of printed errors
"""

MEMCHECK_CLEAN = f"""\
========= COMPUTE-SANITIZER
{DRIVER_OK}
========= ERROR SUMMARY: 0 errors
"""

RACECHECK_RACE = f"""\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at transpose+0x1d0
=========     and Read access at transpose+0x290 [4096 hazards]
=========
{DRIVER_OK}
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

RACECHECK_CLEAN = f"""\
========= COMPUTE-SANITIZER
{DRIVER_OK}
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

GVISOR = """\
========= COMPUTE-SANITIZER
========= Error: Device not supported. Please refer to the "Supported Devices" section of the sanitizer documentation
evo-finalist-driver: setup error: CUDARuntimeError: cudaErrorUnknown: unknown error
========= Target application returned an error
========= ERROR SUMMARY: 1 error
"""


# ---------------------------------------------------------------------- parsing


def test_memcheck_errors_are_counted_and_the_first_one_named():
    verdict, facts = parse_sanitizer(MEMCHECK, MEMCHECK_OOB, 2)
    assert verdict == "failed" and facts["errors"] == 64 and facts["api_errors"] == 1
    assert facts["first"].startswith("Invalid __global__ read of size 4 bytes at relu+0xc0")
    assert "block (4095,0,0)" in facts["first"] and "out of bounds" in facts["first"]
    assert "Host Frame" not in facts["first"]


def test_clean_memcheck_passes():
    assert parse_sanitizer(MEMCHECK, MEMCHECK_CLEAN, 0) == ("passed", {"returncode": 0, "errors": 0})


def test_failed_api_calls_of_a_clean_run_are_not_the_kernels_errors():
    """CuPy may probe the runtime at import; compute-sanitizer counts such calls."""
    text = ("========= COMPUTE-SANITIZER\n========= Program hit cudaErrorInvalidValue (error 1) due "
            "to \"invalid argument\" on CUDA API call to cudaDeviceGetAttribute.\n=========     "
            f"Saved host backtrace up to driver entry point at error\n{DRIVER_OK}\n"
            "========= ERROR SUMMARY: 1 error\n")
    verdict, facts = parse_sanitizer(MEMCHECK, text, 0)
    assert verdict == "passed" and facts["errors"] == 0 and facts["api_errors"] == 1


def test_racecheck_hazards_fail_and_a_clean_run_passes():
    verdict, facts = parse_sanitizer(RACECHECK, RACECHECK_RACE, 0)
    assert verdict == "failed" and facts["errors"] == 1 and facts["hazards"] == 1
    assert facts["first"].startswith("Error: Race reported between Write access at transpose+0x1d0")
    assert "Read access" in facts["first"]
    assert parse_sanitizer(RACECHECK, RACECHECK_CLEAN, 0)[0] == "passed"


def test_an_unsupported_device_or_no_gpu_is_not_run_not_a_failure():
    verdict, facts = parse_sanitizer(MEMCHECK, GVISOR, 1)
    assert verdict == NOT_RUN and facts["why"] == "Device not supported"
    no_cupy = ("========= COMPUTE-SANITIZER\nevo-finalist-driver: setup error: ModuleNotFoundError: "
               "No module named 'cupy'\n========= ERROR SUMMARY: 0 errors\n")
    verdict, facts = parse_sanitizer(MEMCHECK, no_cupy, 3)
    assert verdict == NOT_RUN and "cupy" in facts["why"]


def test_no_summary_is_never_a_pass():
    """The tool died (a bad option, a timeout): even with the driver's ok line, not passed."""
    verdict, facts = parse_sanitizer(MEMCHECK, f"{DRIVER_OK}\n", 0)
    assert verdict == NOT_RUN
    verdict, facts = parse_sanitizer(MEMCHECK, "compute-sanitizer: unrecognised option '--x'\n", 1)
    assert verdict == NOT_RUN and "unrecognised" in facts["why"]


def test_a_launch_error_without_sanitizer_errors_still_fails():
    text = ("========= COMPUTE-SANITIZER\nevo-finalist-driver: launch error: cudaErrorLaunchFailure\n"
            "========= ERROR SUMMARY: 0 errors\n")
    verdict, facts = parse_sanitizer(MEMCHECK, text, 2)
    assert verdict == "failed" and facts["first"] == "launch error: cudaErrorLaunchFailure"


# ---------------------------------------------------------------------- check_finalist


def test_not_found_is_said_never_a_silent_pass(monkeypatch):
    monkeypatch.setattr(finalist, "find_sanitizer", lambda: None)
    spec = find_kernel("relu")
    result = check_finalist(spec, spec.ptx_text())
    assert not result.ok and not result.ran
    assert result.reason.startswith(f"{NOT_RUN}: compute-sanitizer not found"), result.reason


def test_env_override_must_name_an_executable(monkeypatch, tmp_path):
    monkeypatch.setenv("EVO_COMPUTE_SANITIZER", str(tmp_path / "nope"))
    assert finalist.find_sanitizer() is None
    exe = tmp_path / "compute-sanitizer"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EVO_COMPUTE_SANITIZER", str(exe))
    assert finalist.find_sanitizer() == str(exe)


def test_static_check_runs_first_and_needs_no_gpu(monkeypatch):
    monkeypatch.setattr(finalist, "find_sanitizer", lambda: None)
    spec = find_kernel("saxpy")
    result = check_finalist(spec, cheats.nc_on_written(spec.ptx_text()))
    assert not result.ok and result.ran
    assert result.reason.startswith(UNSAFE_NC) and "saxpy_param_1" in result.reason


def _fake_sanitizer(tmp_path: Path, log: str, code: int = 0) -> str:
    """A stand-in compute-sanitizer that prints ``log`` whatever it is asked to run."""
    (tmp_path / "log.txt").write_text(log)
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(f"#!/bin/sh\ncat '{tmp_path / 'log.txt'}'\nexit {code}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


@needs_ptxas
def test_memcheck_failure_reaches_the_result(tmp_path):
    spec = find_kernel("relu")
    result = check_finalist(spec, cheats.oob_read(spec.ptx_text()),
                            sanitizer=_fake_sanitizer(tmp_path, MEMCHECK_OOB, 2))
    assert not result.ok and result.ran
    assert result.reason.startswith(f"{MEMCHECK}: 64 errors; first: Invalid __global__ read")
    assert result.details[RACECHECK].startswith("skipped")  # relu has no shared memory
    assert result.details[MEMCHECK]["command"].split()[1:3] == ["--tool", "memcheck"]


@needs_ptxas
def test_an_unsupported_device_gives_not_run(tmp_path):
    spec = find_kernel("transpose")
    result = check_finalist(spec, spec.ptx_text(), sanitizer=_fake_sanitizer(tmp_path, GVISOR, 1))
    assert not result.ok and not result.ran and "Device not supported" in result.reason


@needs_ptxas
def test_racecheck_runs_on_shared_memory_kernels(tmp_path):
    spec = find_kernel("transpose")
    log = MEMCHECK_CLEAN + RACECHECK_RACE  # the fake answers both runs with both summaries
    result = check_finalist(spec, spec.ptx_text(), sanitizer=_fake_sanitizer(tmp_path, log))
    assert not result.ok and result.reason.startswith(f"{RACECHECK}: 1 errors; first: Error: Race")
    assert result.details[MEMCHECK]["verdict"] == "passed"


def test_shared_memory_is_seen_in_the_ptx_or_the_spec():
    assert uses_shared_memory(find_kernel("transpose"), find_kernel("transpose").ptx_text())
    assert uses_shared_memory(find_kernel("scan_inclusive"), "")  # dynamic shared_mem
    assert not uses_shared_memory(find_kernel("relu"), find_kernel("relu").ptx_text())


def test_determinism_compares_bits(tmp_path):
    spec = find_kernel("relu")
    y = np.arange(8, dtype=np.float32)
    np.savez(tmp_path / "a.npz", y=y)
    np.savez(tmp_path / "b.npz", y=y)
    assert finalist._compare_runs(spec, tmp_path / "a.npz", tmp_path / "b.npz", 1) == ""
    z = y.copy()
    z[5] = -0.0 if y[5] == 0 else np.nextafter(y[5], np.float32(9))
    np.savez(tmp_path / "b.npz", y=z)
    why = finalist._compare_runs(spec, tmp_path / "a.npz", tmp_path / "b.npz", 1)
    assert why.startswith("not deterministic: 1 of 8 elements of y differ bitwise") and "y[5]" in why


def test_runs_with_equal_digests_are_equal_without_loading_their_outputs(tmp_path):
    from harness.gpu.finalist_driver import digest_path, outputs_digest

    spec = find_kernel("relu")
    y = np.arange(8, dtype=np.float32)
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    for path in (a, b):  # digests only: were the outputs loaded, np.load would raise
        Path(digest_path(path)).write_text(json.dumps(outputs_digest(spec, {"y": y})))
    assert finalist._compare_runs(spec, a, b, 1) == ""
    z = y.copy()
    z[3] += 1
    Path(digest_path(b)).write_text(json.dumps(outputs_digest(spec, {"y": z})))
    why = finalist._compare_runs(spec, a, b, 1)  # no outputs saved: the digests say which
    assert why == ("not deterministic: y differ bitwise between two runs on the same inputs "
                   "(seed 1; compared by sha256)")
    np.savez(a, y=y)
    np.savez(b, y=z)
    why = finalist._compare_runs(spec, a, b, 1)  # digests differ: the outputs say where
    assert why.startswith("not deterministic: 1 of 8 elements of y differ bitwise") and "y[3]" in why


def test_a_kernel_whose_baseline_adds_floats_atomically_is_judged_within_tolerance(tmp_path):
    """The order of atomic float adds changes from run to run, in the baseline too: its
    runs may differ in the last bits, not beyond the tolerance."""
    assert finalist.adds_floats_atomically("\tred.global.add.f32 [%rd1], %f2;")
    assert finalist.adds_floats_atomically("\tatom.global.gpu.acq_rel.add.bf16x2 %r1, [%rd1], %r2;")
    assert not finalist.adds_floats_atomically("\tatom.global.add.u32 %r1, [%rd1], 1;")
    embedding_backward = Path(__file__).parent / "data" / "captured" / "embedding_backward.ptx"
    assert finalist.adds_floats_atomically(embedding_backward.read_text())  # add.v4.f32
    assert not finalist.adds_floats_atomically(find_kernel("relu").ptx_text())
    spec = find_kernel("reduce_sum")  # rtol 1e-5: a sum's last bits may move
    y = np.linspace(1, 2, 2048, dtype=np.float32)
    np.savez(tmp_path / "a.npz", partial=y)
    np.savez(tmp_path / "b.npz", partial=np.nextafter(y, np.float32(9)))
    files = (tmp_path / "a.npz", tmp_path / "b.npz", 1)
    assert "differ bitwise" in finalist._compare_runs(spec, *files)
    assert finalist._compare_runs(spec, *files, ordered=False) == ""
    np.savez(tmp_path / "b.npz", partial=y * 1.5)
    why = finalist._compare_runs(spec, *files, ordered=False)
    assert why.startswith("not deterministic: two runs") and "beyond the tolerance" in why


# ---------------------------------------------------------------------- the driver


def test_driver_reports_a_setup_error_and_exits_3(tmp_path):
    spec = find_kernel("relu")
    done = subprocess.run([sys.executable, "-m", "harness.gpu.finalist_driver", str(tmp_path / "no.cubin"),
                           str(spec.spec_path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1],
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("evo-finalist-driver: setup error: ")


# ---------------------------------------------------------------------- the whole flow, faked

_FAKE_CUPY = '''
"""Just enough of CuPy for harness.gpu.finalist_driver: buffers are NumPy arrays and the only
kernel is relu ($FAKE_KERNEL=noisy changes one element at random, =fault raises)."""
import os
import numpy as np
from numpy import ascontiguousarray, full, uint8, zeros  # arrays "on the device" are NumPy's
_mem = {}
class _Err(Exception):
    pass
class _NS:
    pass
cuda = _NS(); cuda.runtime = _NS(); cuda.driver = _NS(); cuda.function = _NS()
cuda.runtime.CUDARuntimeError = cuda.driver.CUDADriverError = _Err
cuda.curand = _NS(); cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10 = 0
class _RandomState(np.random.RandomState):  # CuPy's draws take a dtype
    def __init__(self, seed, method=None):
        super().__init__(seed % 2**32)
    def seed(self, seed):
        super().seed(seed % 2**32)
    def normal(self, loc, scale, size, dtype=float):
        return super().normal(loc, scale, size).astype(dtype)
    def uniform(self, low, high, size, dtype=float):
        return super().uniform(low, high, size).astype(dtype)
    def random_sample(self, size, dtype=float):
        return super().random_sample(size).astype(dtype)
random = _NS(); random.RandomState = _RandomState
def _malloc(n):
    _mem[len(_mem) + 1] = np.zeros(n, np.uint8)
    return len(_mem)
cuda.runtime.malloc, cuda.runtime.free = _malloc, lambda ptr: None
cuda.runtime.deviceSynchronize = lambda: None
cuda.runtime.getDevice = lambda: 0
cuda.runtime.getDeviceCount = lambda: 2
class Device:
    def __init__(self, ordinal):
        self.ordinal = ordinal
    def use(self):
        print("fake cupy: device", self.ordinal, "in use", flush=True)
cuda.Device = Device
class UnownedMemory:
    def __init__(self, ptr, size, owner):
        self.ptr = ptr
class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem = mem
cuda.UnownedMemory, cuda.MemoryPointer = UnownedMemory, MemoryPointer
class ndarray:
    def __init__(self, shape, dtype, memptr):
        self.buf = _mem[memptr.mem.ptr]
    def set(self, host):
        self.buf[:] = host
    def __setitem__(self, where, value):
        self.buf[where] = value
    def get(self):
        return self.buf.copy()
class Module:
    def load(self, data):
        self.kind = os.environ.get("FAKE_KERNEL", "relu")
    def get_function(self, name):
        def relu(grid, block, args, shared_mem=0):
            if self.kind == "fault":
                raise _Err("cudaErrorIllegalAddress: an illegal memory access was encountered")
            x, y = args[0].buf.view(np.float32), args[1].buf.view(np.float32)
            y[:] = np.maximum(x, 0)
            if self.kind == "noisy":
                y[int.from_bytes(os.urandom(3), "little") % y.size] += 1
        return relu
cuda.function.Module = Module
'''

_PASSTHROUGH = """#!/bin/sh
# drops compute-sanitizer's options, runs the program, reports no kernel errors
while [ "${1#--}" != "$1" ]; do shift 2; done
"$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
"""


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A passthrough compute-sanitizer and a fake CuPy for the driver's subprocesses."""
    (tmp_path / "fake" / "cupy").mkdir(parents=True)
    (tmp_path / "fake" / "cupy" / "__init__.py").write_text(_FAKE_CUPY)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(_PASSTHROUGH)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


@needs_ptxas
def test_the_whole_check_passes_a_deterministic_kernel(fake_gpu):
    spec = find_kernel("relu")
    result = check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu)
    assert result.ok and result.reason == "ok", (result.reason, result.details)
    assert result.details[MEMCHECK]["verdict"] == "passed"
    assert result.details["determinism"] == "two runs bitwise identical (seed 1)"


@needs_ptxas
def test_the_whole_check_fails_a_nondeterministic_kernel(fake_gpu, monkeypatch):
    monkeypatch.setenv("FAKE_KERNEL", "noisy")
    spec = find_kernel("relu")
    result = check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu)
    assert not result.ok and result.ran
    assert re.match(r"not deterministic: [12] of 1048576 elements of y differ bitwise", result.reason), \
        result.reason  # each run bumped one element


@needs_ptxas
def test_a_launch_error_under_the_sanitizer_fails_the_check(fake_gpu, monkeypatch):
    monkeypatch.setenv("FAKE_KERNEL", "fault")
    spec = find_kernel("relu")
    result = check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu)
    assert not result.ok and result.ran
    assert result.reason == ("memcheck: launch error: cudaErrorIllegalAddress: an illegal memory "
                             "access was encountered"), result.reason


@needs_ptxas
def test_the_gpu_is_held_only_once_every_process_is_ready(fake_gpu, monkeypatch):
    """The check's processes start without the GPU; the turn is taken once all of them
    said they were ready, and each uses the device the turn gave."""
    from harness.gpu import ready_runs

    seen = {}
    real = ready_runs._Started

    class Watched(real):
        def go(self, gpu):
            seen.setdefault("ready_at_go", []).append(self.ready.is_set() and self.proc.poll() is None)
            super().go(gpu)

    @contextlib.contextmanager
    def turn():
        seen["turns"] = seen.get("turns", 0) + 1
        yield 1

    monkeypatch.setattr(ready_runs, "_Started", Watched)
    spec = find_kernel("relu")
    result = check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu, turn=turn)
    assert result.ok, (result.reason, result.details)
    assert seen == {"turns": 1, "ready_at_go": [True, True]}  # memcheck and a plain run
    assert result.details["gpu_held_s"] >= 0
    for name in (MEMCHECK, "run"):  # when each driver's steps ended, from the check's start
        steps = result.details["steps"][name]
        assert 0 < steps["imported"] <= steps["ready"] <= steps["turn"] <= steps["read"] <= steps["saved"]


@needs_ptxas
def test_large_outputs_are_compared_by_digest_alone(fake_gpu, monkeypatch, tmp_path):
    """Outputs of SAVED_OUTPUTS_BYTES and up are not written, only their sha256: the
    verdict is the same, the reason names the output instead of an element."""
    monkeypatch.setattr(finalist, "SAVED_OUTPUTS_BYTES", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the check's files go
    saved = []
    real = finalist._compare_runs

    def watched(spec, first, second, *args):
        saved.extend(p.name for p in tmp_path.rglob("*.npz"))
        return real(spec, first, second, *args)

    monkeypatch.setattr(finalist, "_compare_runs", watched)
    spec = find_kernel("relu")
    assert check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu).ok
    monkeypatch.setenv("FAKE_KERNEL", "noisy")
    result = check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu)
    assert not result.ok and result.reason == (
        "not deterministic: y differ bitwise between two runs on the same inputs (seed 1; "
        "compared by sha256)"), result.reason
    assert saved == []


def test_a_process_that_ends_before_its_turn_is_reported_not_waited_for(tmp_path):
    """A process that fails at its start (no CuPy, a bad file) never says it is ready:
    the turn is taken anyway and its output says why; a ready one runs on the turn's GPU."""
    from harness.gpu import ready_runs

    ready = [sys.executable, "-c", "from harness.gpu.ready_runs import wait_for_turn; "
             "print('on', wait_for_turn())"]
    failing = [sys.executable, "-c", "import sys; print('setup error: no CuPy'); sys.exit(3)"]
    slow_exit = [sys.executable, "-c", "import time; from harness.gpu.ready_runs import "
                 "wait_for_turn, done_with_gpu; wait_for_turn(); done_with_gpu(); "
                 "time.sleep(3); print('saved')"]
    shared_line = [sys.executable, "-c", "import sys; from harness.gpu.ready_runs import "
                   "wait_for_turn; sys.stdout.write('== a sanitizer line, unfinished '); "
                   "print(wait_for_turn())"]  # the marker amid another writer's line
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    runs, held = ready_runs.run_when_ready(
        {"a": ready, "b": failing, "c": slow_exit, "d": shared_line}, 60, tmp_path, env,
        lambda: contextlib.nullcontext(3))
    assert runs["d"][:2] == (0, "== a sanitizer line, unfinished \n3\n")
    assert runs["a"][:2] == (0, "on 3\n") and runs["b"][:2] == (3, "setup error: no CuPy\n")
    # the turn ends when every process is done with the GPU, not when the last one exits
    assert runs["c"][:2] == (0, "saved\n") and runs["c"][2] >= 3 and held < 2


def test_no_turn_is_taken_where_every_process_ended_before_it_was_ready(tmp_path):
    """Nothing would run on the GPU (torch sees none, a setup error): a turn would hold it
    for nothing, and a run's other work on that GPU would wait meanwhile."""
    from harness.gpu import ready_runs

    taken = []

    @contextlib.contextmanager
    def turn():
        taken.append(True)
        yield 0

    failing = [sys.executable, "-c", "import sys; print('no GPU here'); sys.exit(0)"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    runs, held = ready_runs.run_when_ready({"a": failing, "b": failing}, 60, tmp_path, env, turn)
    assert runs["a"][:2] == (0, "no GPU here\n") and held == 0.0 and taken == []
    ready = [sys.executable, "-c", "from harness.gpu.ready_runs import wait_for_turn; print(wait_for_turn())"]
    runs, _ = ready_runs.run_when_ready({"a": failing, "b": ready}, 60, tmp_path, env, turn)
    assert taken == [True] and runs["b"][:2] == (0, "0\n")  # one ready: the turn is taken


def _fake_driver(tmp_path, *args: str, turn: str):
    """The driver under the fake CuPy, ``turn`` written to its stdin."""
    spec = find_kernel("relu")
    cubin = tmp_path / "x.cubin"
    cubin.write_bytes(b"")
    (tmp_path / "fake" / "cupy").mkdir(parents=True, exist_ok=True)
    (tmp_path / "fake" / "cupy" / "__init__.py").write_text(_FAKE_CUPY)
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "harness.gpu.finalist_driver", str(cubin),
                           str(spec.spec_path), "--wait-turn", *args], input=turn,
                          capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{root}"})


def test_the_driver_makes_its_contexts_before_it_is_ready_and_runs_on_the_turns_gpu(tmp_path):
    from harness.gpu.ready_runs import GPU_DONE, READY

    done = _fake_driver(tmp_path, "--devices", "0,1", "--out", str(tmp_path / "o.npz"), turn="1\n")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:5] + lines[6:] == ["fake cupy: device 0 in use", "fake cupy: device 1 in use",
                                     READY, "fake cupy: device 1 in use", GPU_DONE, DRIVER_OK]
    assert lines[5].startswith(STEPS)  # when each step ended, in order
    steps = json.loads(lines[5].removeprefix(STEPS))
    assert list(steps) == ["started", "imported", "ready", "turn", "filled", "launched", "read", "saved"]
    assert list(steps.values()) == sorted(steps.values())
    assert (tmp_path / "o.npz").is_file() and json.loads(Path(f"{tmp_path / 'o.npz'}.sha256").read_text())
    _fake_driver(tmp_path, "--out", str(tmp_path / "d.npz"), "--digest-only", turn="\n")
    assert not (tmp_path / "d.npz").exists() and Path(f"{tmp_path / 'd.npz'}.sha256").is_file()
    done = _fake_driver(tmp_path, "--devices", "1", turn="\n")  # None: the default device
    assert done.stdout.splitlines()[2] == "fake cupy: device 0 in use"


def test_a_driver_whose_caller_gives_no_turn_ends_with_a_setup_error(tmp_path):
    """The caller was interrupted before the turn: stdin closes, the driver says so."""
    done = _fake_driver(tmp_path, turn="")
    assert done.returncode == 3, done.stdout + done.stderr
    from harness.gpu.ready_runs import READY

    assert done.stdout.splitlines() == [READY, "evo-finalist-driver: setup error: EOFError: the "
                                        "caller ended without giving a GPU turn"]


@needs_ptxas
def test_the_bench_of_checks_at_once_times_each_drivers_steps(fake_gpu, monkeypatch, tmp_path, capsys):
    from harness.tools import bench_finalist

    monkeypatch.setenv("EVO_COMPUTE_SANITIZER", fake_gpu)
    spec = find_kernel("relu").spec_path
    assert bench_finalist.main([str(spec), str(spec), "--gpus", "0,1", "--out", str(tmp_path / "b.json")]) == 0
    checks = json.loads((tmp_path / "b.json").read_text())["checks"]
    assert [c["gpu"] for c in checks] == [0, 1] and {c["reason"] for c in checks} == {"ok"}
    rows = bench_finalist.step_table(checks)
    assert [(name, step) for name, step, *_ in rows][:3] == [
        (MEMCHECK, "started"), (MEMCHECK, "imported"), (MEMCHECK, "ready")]
    assert all(low <= mid <= high for *_, low, mid, high in rows) and len(rows) == 16
    assert "2 checks at once on GPUs 0,1" in capsys.readouterr().out


def test_a_started_process_is_shown_one_gpu_by_this_processes_name_for_it(monkeypatch):
    from harness.gpu.ready_runs import visible_as

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_as(3) == "3" and visible_as(-1) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 7")  # this process's 1 is the machine's 7
    assert visible_as(1) == "7" and visible_as(0) == "5" and visible_as(2) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa,GPU-bb")
    assert visible_as(1) == "GPU-bb"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU at all: nothing to name
    assert visible_as(0) is None


@needs_ptxas
def test_the_checks_processes_see_its_gpu_alone(fake_gpu, monkeypatch):
    """A check booked on one GPU starts its processes with that GPU alone visible (CUDA
    starts on it and no other), as their device 0; a turn on another GPU is refused."""
    seen = {}
    real = finalist.run_when_ready

    def watched(commands, timeout_s, cwd, env, turn):
        seen["visible"] = env.get("CUDA_VISIBLE_DEVICES")
        seen["devices"] = [cmd[cmd.index("--devices") + 1] for cmd in commands.values()]
        runs, held = real(commands, timeout_s, cwd, env, turn)
        seen["used"] = sorted({line for _, text, _ in runs.values() for line in text.splitlines()
                               if line.startswith("fake cupy")})
        return runs, held

    monkeypatch.setattr(finalist, "run_when_ready", watched)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    spec = find_kernel("relu")
    result = check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu, devices=(1,),
                            turn=lambda: contextlib.nullcontext(1))
    assert result.ok, (result.reason, result.details)
    assert seen == {"visible": "6", "devices": ["0", "0"], "used": ["fake cupy: device 0 in use"]}
    with pytest.raises(RuntimeError, match="turn gave GPU 0; its processes see GPU 1 alone"):
        check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu, devices=(1,),
                       turn=lambda: contextlib.nullcontext(0))
    seen.clear()
    assert check_finalist(spec, spec.ptx_text(), sanitizer=fake_gpu, devices=(0, 1),
                          turn=lambda: contextlib.nullcontext(1)).ok  # two GPUs: both seen
    assert seen["visible"] == "4,6" and seen["devices"] == ["0,1", "0,1"]
