"""The peers of the kernels outside the suite (harness/kernels/peers.py) compute what the kernels
compute: the unmodified kernel is the reference (these specs have no NumPy one), on the
inputs the gate and ``time_peer`` draw. A peer that computed something else would make
every "vs torch" figure of these kernels meaningless.

Run with ``python3 -m pytest -m gpu -x -q`` on a machine with an NVIDIA GPU, CuPy and torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.gpu.input_sets import make_inputs
from harness.kernels.check_gpu import run_once
from harness.kernels.peers import load_peer
from harness.kernels.spec import load_spec

pytestmark = pytest.mark.gpu

UNSEEN = Path(__file__).parent / "data" / "unseen"
SPECS = [p for p in sorted(UNSEEN.rglob("*.toml")) if load_spec(p).peer]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_the_peer_computes_what_the_kernel_computes(path):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    spec = load_spec(path)
    inputs = make_inputs(spec, 3)
    function = cp.RawModule(path=str(spec.ptx_path)).get_function(spec.entry)
    got = run_once(spec, function, inputs)[spec.outputs()[0].name]
    tensors = {p.name: (torch.from_numpy(np.ascontiguousarray(inputs[p.name])).cuda()
                        if p.kind == "buffer" else inputs[p.name].item()) for p in spec.params}
    peer = load_peer(spec.peer)(tensors).cpu().numpy().ravel()
    assert peer.shape == got.shape, (peer.shape, got.shape)
    if np.issubdtype(got.dtype, np.integer):
        assert np.array_equal(peer, got)
        return
    g, p = got.astype(np.float64), peer.astype(np.float64)
    # torch's math library is not libdevice: a few ulps apart (f16: a few f16 ulps)
    rtol, atol = (2e-3, 2e-3) if got.dtype == np.float16 else (1e-4, 1e-5)
    bad = ~np.isclose(p, g, rtol=rtol, atol=atol, equal_nan=True)
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ; first at {np.argmax(bad)}: "
                           f"peer {p[np.argmax(bad)]} kernel {g[np.argmax(bad)]}")


def test_a_runs_peer_is_timed_in_a_process_of_its_own():
    """What ``evo run`` does for a kernel with a peer (``harness.kernels.peer_process``):
    torch, its context and the inputs in the peer's own process before the turn, then
    the peer timed on the turn's GPU and its figures back as the report quotes them."""
    import contextlib

    pytest.importorskip("torch")
    from harness.kernels.peer_process import time_in_process
    from harness.kernels.suite import find_kernel

    got, held = time_in_process(find_kernel("relu@1M"), lambda: contextlib.nullcontext(0), (0,))
    assert got["peer_us"] > 0 and got["peer_agrees"] is True, got
    assert got["peer_caches"].startswith("warm") and 0 <= held < 60
