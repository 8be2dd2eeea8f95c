"""A PTX module with several kernels: the spec's entry alone is evolved and measured.

nvcc writes every kernel of a .cu file into one PTX module. Genes must not edit the
other kernels (a fast_div "applied" to a kernel that is never launched is a lie in the
outcome list), and ptxas figures and SASS must be the launched kernel's.
"""

from pathlib import Path

from genomes.genome import apply_genome, parse_inline
from genomes.ptx import only_entry, parse
from harness.compile import compile_ptx
from harness.apply_pool import apply_from_file
from harness.kernels.spec import load_spec
from harness.kernels.suite import find_kernel

UNSEEN = Path(__file__).parent / "data" / "unseen"
ALL_ENTRIES = {"silu", "axpby_inplace", "clamp_i32", "add_one_unguarded", "scale_size_t",
               "sqrt_or_zero", "grid_stride_copy"}


def test_the_file_really_holds_several_kernels():
    assert {f.name for f in parse((UNSEEN / "kernels.ptx").read_text()).entries} == ALL_ENTRIES


def test_spec_baseline_holds_only_its_entry():
    for name in ("silu", "clamp_i32"):
        spec = load_spec(UNSEEN / f"{name}.toml")
        module = parse(spec.ptx_text())
        assert [f.name for f in module.entries] == [name]
        # the kept kernel is the file's own, byte for byte
        whole = parse((UNSEEN / "kernels.ptx").read_text())
        assert module.entry(name).render() == whole.entry(name).render()


def test_single_entry_text_is_unchanged():
    spec = find_kernel("relu")
    assert spec.ptx_text() == spec.ptx_path.read_text()
    assert only_entry(spec.ptx_path.read_text(), "no_such_entry") == spec.ptx_path.read_text()


def test_genes_touch_only_the_launched_kernel():
    spec = load_spec(UNSEEN / "silu.toml")
    applied = apply_genome(spec.ptx_text(), parse_inline("ftz"), spec.launch)
    assert applied.changed
    assert [f.name for f in parse(applied.ptx).entries] == ["silu"]


def test_ptxas_figures_are_the_launched_kernels():
    for name in ("silu", "sqrt_or_zero"):
        spec = load_spec(UNSEEN / f"{name}.toml") if (UNSEEN / f"{name}.toml").exists() else None
        text = spec.ptx_text() if spec else only_entry((UNSEEN / "kernels.ptx").read_text(), name)
        result = compile_ptx(text)
        assert result.ok, result.error
        assert set(result.functions) == {name}
        assert result.registers == result.functions[name].registers


def test_pool_apply_keys_baselines_by_entry():
    path = str(UNSEEN / "kernels.ptx")
    silu, _ = apply_from_file(path, "silu", parse_inline("").to_json(), None)
    clamp, _ = apply_from_file(path, "clamp_i32", parse_inline("").to_json(), None)
    assert [f.name for f in parse(silu.ptx).entries] == ["silu"]
    assert [f.name for f in parse(clamp.ptx).entries] == ["clamp_i32"]
