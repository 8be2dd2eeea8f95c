"""evo.learn.features: kernel features from the baseline alone, and the distance."""

from __future__ import annotations

import math

from conftest import needs_ptxas
from evo.learn import features as F
from harness.kernels.suite import find_kernel


def test_ptx_features_count_what_nvcc_emits():
    # gemm_tile_4x6x8: C[4x6] = A[4x8] B[8x6], one thread, fully unrolled, scalar f32.
    f = F.ptx_features(find_kernel("gemm_tile_4x6x8").ptx_text())
    assert f["ld_global"] == 4 * 8 + 8 * 6
    assert f["st_global"] == 4 * 6
    assert f["ld_global_bytes"] == 4 * f["ld_global"] and f["ld_global_vec"] == 0
    assert f["loops"] == 0 and f["ld_shared"] == 0
    assert f["frac_fma"] > 0.3 and 0 <= f["frac_float"] <= 1


def test_loops_and_shared_memory_in_a_many_thread_kernel():
    f = F.ptx_features(find_kernel("softmax").ptx_text())
    assert f["loops"] >= 1 and f["ld_shared"] >= 1 and f["frac_shfl"] > 0
    s = F.spec_features(find_kernel("softmax"))
    assert s["threads_per_block"] > 1 and s["is_clock64"] == 0 and s["bytes_read"] > 0


@needs_ptxas
def test_kernel_features_are_floats_and_cached(monkeypatch):
    specs = [find_kernel("gemm_tile_2x2x2"), find_kernel("gemm_tile_2x2x4")]
    cache: dict = {}
    table = F.features_many(specs, cache)
    feats = table["gemm_tile_2x2x2"]
    assert all(isinstance(v, float) and math.isfinite(v) for v in feats.values())
    assert feats["registers"] > 0 and feats["is_clock64"] == 1.0 and "ptx_instructions" in feats
    assert len(cache) == 2
    monkeypatch.setattr(F, "kernel_features", lambda spec: 1 / 0)  # a second call: all cached
    assert F.features_many(specs, cache) == table
    # a fresh cache (a policy's ask, a prior without a store file): this process's memo
    assert F.features_many(specs) == table and F.features_many(specs[:1], {}) == {
        "gemm_tile_2x2x2": feats}


def test_distance_is_a_scaled_rms_and_ranks_gemm_tiles_together():
    table = {n: {**F.ptx_features(find_kernel(n).ptx_text()), **F.spec_features(find_kernel(n))}
             for n in ("gemm_tile_4x4x4", "gemm_tile_4x4x6", "softmax")}
    scales = F.feature_scales(list(table.values()))
    a, b, c = table["gemm_tile_4x4x4"], table["gemm_tile_4x4x6"], table["softmax"]
    assert F.distance(a, a, scales) == 0.0
    assert F.distance(a, b, scales) == F.distance(b, a, scales)
    assert F.distance(a, b, scales) < F.distance(a, c, scales)
    assert F.distance({"x": 3.0}, {"x": 3.0}) == 0.0
    assert F.distance({"frac_x": 0.0}, {"frac_x": 1.0}) == 1.0  # fractions: no log scale
    assert F.distance({"x": 0.0}, {"x": 1.0}) == 1.0  # counts: log2(1 + x)


def test_a_callers_cache_does_not_leak_into_the_process_memo(monkeypatch):
    spec = find_kernel("gemm_tile_2x2x2")
    monkeypatch.setattr(F, "_SEEN", {})
    made_up = {F.feature_key(spec): {"made_up": 1.0}}  # a store's file, or a test's
    assert F.features_many([spec], made_up) == {spec.name: {"made_up": 1.0}}
    computed = []
    monkeypatch.setattr(F, "kernel_features", lambda s: computed.append(s.name) or {"real": 2.0})
    assert F.features_many([spec]) == {spec.name: {"real": 2.0}} and computed == [spec.name]
    assert F.features_many([spec], {}) == {spec.name: {"real": 2.0}} and len(computed) == 1


@needs_ptxas
def test_two_kernels_of_one_name_each_keep_their_own_features(tmp_path):
    """features_many keys what it computes per spec: two users' specs named alike (one
    launched with 64 threads a block) are two kernels, and each store name (name#digest)
    gets its own kernel's features, not the other's."""
    from test_hardening import copy_kernel

    one = find_kernel(str(copy_kernel(tmp_path / "a", "my_tile")))
    wide = find_kernel(str(copy_kernel(tmp_path / "b", "my_tile",
                                       lambda t: t.replace("block = [1, 1, 1]", "block = [64, 1, 1]"))))
    assert one.name == wide.name and one.store_name != wide.store_name
    cache: dict = {}
    F.features_many([one, wide], cache)
    alone = F.features_many([one], {})["my_tile"]
    assert cache[F.named_key(one.store_name)] == alone
    assert cache[F.named_key(wide.store_name)] == F.features_many([wide], {})["my_tile"] != alone
