"""The transformers models of ``evo.model.examples`` (built from a config in code, random
weights): each step compiles, computes what the same model computes eagerly, and is
captured with kernels from forward, backward and the optimizer. GPU machine with
transformers installed; ``python3 -m evo.model.roundtrip --transformers NAME`` runs the
whole round trip on them (BENCHMARKS.md, session 24)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_transformers_inference_step_matches_its_eager_model(name):
    import torch

    from evo.model import examples

    step, (ids,) = examples.transformers_inference(name, batch=2, tokens=64)
    got, want = step(ids).float(), step.eager(ids).float()
    assert got.shape == (2, 64, examples.TRANSFORMERS[name][2]["vocab_size"])
    assert torch.isfinite(got).all()
    assert (got - want).abs().max().item() < 0.1 * want.abs().max().item()  # bf16, fused or not


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_transformers_training_step_is_captured_and_repeats_after_a_reset(name, tmp_path):
    import torch

    import evo
    from evo.model import examples

    step, inputs = examples.transformers_training(name, batch=2, tokens=64)
    m = evo.capture(step, *inputs, out=tmp_path)
    names = [k["source"]["kernel"] for k in m["kernels"]]
    assert len(names) >= 5 and any("backward" in n for n in names), (names, m["skipped"])
    step.reset()
    first = step(*inputs)
    step.reset()
    again = step(*inputs)
    assert torch.isfinite(first) and first.item() == again.item()  # no dropout: a step repeats
