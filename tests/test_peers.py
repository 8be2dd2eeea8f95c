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
