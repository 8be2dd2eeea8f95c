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
