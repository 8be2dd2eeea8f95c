"""harness.kernels.peers on the CPU: a peer named as a spec writes it, before and after the
harness moved into rooms (``harness.peers:softmax`` in specs written before session 19)."""

from __future__ import annotations

import pytest

from genomes.errors import EvoError
from harness.kernels import peers


def test_a_peer_loads_by_its_name_and_by_the_name_older_specs_wrote():
    assert peers.load_peer("harness.kernels.peers:softmax") is peers.softmax
    assert peers.load_peer("harness.peers:softmax") is peers.softmax
    with pytest.raises(EvoError, match="cannot be loaded"):
        peers.load_peer("harness.kernels.peers:no_such_peer")


def test_without_torch_a_peer_says_why_before_any_gpu_is_held(monkeypatch):
    import sys

    from harness.kernels.suite import find_kernel

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    spec = find_kernel("relu")
    said = peers.prepare_peer(spec)
    assert said == {"peer": spec.peer, "reason": "torch is not installed here"}
    assert peers.peer_or_reason(spec, 0, said) == said  # nothing timed, the reason kept
    assert peers.prepare_peer(find_kernel("gemm_tile_4x4x4")) is None  # no peer named


def test_a_peers_host_half_is_its_inputs_and_the_reference_on_them():
    from harness.kernels.suite import find_kernel

    prepared = peers.peer_inputs(find_kernel("relu@64K"))
    x, y = prepared.inputs["x"], prepared.want["y"]
    assert x.shape == y.shape == (64 << 10,) and (y == x.clip(min=0)).all()


def _fake_peer(body: str) -> list[str]:
    import sys

    return [sys.executable, "-c", "from harness.gpu.ready_runs import wait_for_turn, done_with_gpu\n"
            "from harness.kernels.peer_process import RESULT\n" + body]


def test_a_peer_is_timed_in_a_process_of_its_own_on_the_turns_gpu(monkeypatch, tmp_path):
    """The run's side of ``harness.kernels.peer_process``: the process's last RESULT line is
    what the report quotes; the turn is taken once it is ready, its GPU given on stdin;
    the spec reaches it as a file (a resized kernel written out)."""
    import contextlib
    import json

    from harness.kernels import peer_process
    from harness.kernels.spec import load_spec
    from harness.kernels.suite import find_kernel

    seen = {}

    def command(path, devices):
        seen["spec"], seen["devices"] = load_spec(path), devices
        return _fake_peer("gpu = wait_for_turn(); done_with_gpu()\n"
                          "print(RESULT + '{\"peer\": \"p\", \"peer_us\": 2.5, \"gpu\": %d}' % gpu)")

    taken = []

    @contextlib.contextmanager
    def turn():
        taken.append(True)
        yield 1

    monkeypatch.setattr(peer_process, "torch_installed", lambda: True)
    monkeypatch.setattr(peer_process, "command", command)
    spec = find_kernel("relu@64K")
    got, held = peer_process.time_in_process(spec, turn, (0, 1))
    assert got == {"peer": "p", "peer_us": 2.5, "gpu": 1} and taken == [True] and held >= 0
    assert seen["spec"].params == spec.params and seen["spec"].peer == spec.peer
    assert seen["devices"] == (0, 1)
    monkeypatch.setattr(peer_process, "command", lambda path, devices: _fake_peer(
        "wait_for_turn(); print('CUDA error: out of memory'); raise SystemExit(1)"))
    failed, _ = peer_process.time_in_process(spec, turn, (0,))
    assert failed["peer"] == spec.peer
    assert failed["reason"] == "its timing process exited with status 1: CUDA error: out of memory"
    assert json.loads(json.dumps(failed)) == failed  # kept in the checkpoint as it is


def test_without_torch_no_peer_process_is_started(monkeypatch):
    from harness.kernels import peer_process
    from harness.kernels.suite import find_kernel

    monkeypatch.setattr(peer_process, "torch_installed", lambda: False)
    monkeypatch.setattr(peer_process, "command", lambda *a: pytest.fail("a process was started"))
    spec = find_kernel("relu")
    assert peer_process.time_in_process(spec, None) == (
        {"peer": spec.peer, "reason": "torch is not installed here"}, 0.0)
    assert peer_process.time_in_process(find_kernel("gemm_tile_4x4x4"), None) == (None, 0.0)


def test_the_peer_process_says_why_without_torch(tmp_path):
    """The process's side, where torch cannot be imported: one RESULT line with the reason,
    before it would ever ask for a turn."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from harness.kernels import peer_process
    from harness.kernels.suite import find_kernel

    (tmp_path / "torch.py").write_text("raise ImportError('no torch in this test')\n")
    root = Path(peer_process.__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "harness.kernels.peer_process",
                          str(find_kernel("relu").spec_path)], capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"},
                         stdin=subprocess.DEVNULL, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == peer_process.RESULT + '{"peer": "%s", "reason": "torch is not installed here"}\n' % (
        find_kernel("relu").peer)
