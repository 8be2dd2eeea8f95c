"""evo.capture on a real torch.compile'd model (GPU, torch, Triton): the example decoder's
Inductor kernels become specs that measure and evolve, with their share of the step; the
training step's too.

Run with ``python3 -m pytest -m gpu -x -q tests/test_capture_gpu.py``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def decoder_capture(tmp_path_factory):
    import evo
    from evo.model import examples
    from evo.model.capture import read

    out = tmp_path_factory.mktemp("capture")
    step, inputs = examples.decoder_inference(layers=1, dim=256, batch=2, tokens=128)
    evo.capture(step, *inputs, out=out)
    return read(out)


def test_the_decoders_triton_kernels_are_captured_with_their_share_of_the_step(decoder_capture):
    from evo.model.step_time import waits_on_host

    m = decoder_capture
    assert m["kernels"], m["skipped"]
    assert m["step_gpu_us"] > m["triton_gpu_us"] > 0  # cuBLAS and attention take the rest
    # the step's own time, unprofiled: a tiny decoder's step waits on the host
    assert m["step_wall_us"] > 0.5 * m["step_gpu_us"] and "waits on the host" in waits_on_host(m)
    shares = [k["share"] for k in m["kernels"]]
    assert all(s is not None and 0 < s < 1 for s in shares) and sum(shares) <= 1.0 + 1e-9
    assert shares == sorted(shares, reverse=True)
    dtypes = {p.dtype for k in m["kernels"] for p in k["kernel_spec"].buffers()}
    assert "bf16" in dtypes, dtypes
    for k in m["kernels"]:
        spec = k["kernel_spec"]
        assert k["launches"] >= 1 and spec.grid == tuple(k["grid"])
        assert any(p.role in ("out", "inout") for p in spec.buffers()), k["name"]


def test_every_captured_kernel_passes_the_gate_as_its_own_baseline(decoder_capture):
    from evo import api

    for k in decoder_capture["kernels"]:
        m = api.measure(k["kernel_spec"], backend="gpu", store=":memory:")
        assert m.valid and m.cycles > 0, (k["name"], m.reason)


def test_the_largest_captured_kernel_evolves_one_generation(decoder_capture, tmp_path):
    from evo import api

    spec = decoder_capture["kernels"][0]["kernel_spec"]
    results = api.run([spec], generations=1, pop=4, backend="gpu", out=str(tmp_path / "run"),
                      store=str(tmp_path / "store.sqlite"))
    assert results[0].best_cycles is not None and results[0].best_cycles > 0


def test_a_training_step_is_captured_forward_backward_and_optimizer(tmp_path):
    import evo
    from evo.model import examples

    step, inputs = examples.decoder_training(layers=1, dim=128, batch=2, tokens=64)
    m = evo.capture(step, *inputs, out=tmp_path)
    names = [k["source"]["kernel"] for k in m["kernels"]]
    assert len(names) >= 5, (names, m["skipped"])
    assert m["step_gpu_us"] > 0
