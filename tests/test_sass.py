"""Tests for harness.sass: SASS hashes, normalisation, opcode counts (real ptxas, cuobjdump)."""

from __future__ import annotations

import pytest

from harness import toolchain
from harness.compile import compile_ptx, ptx_hash
from harness.sass import (
    cubin_text_hash, disassemble, normalize_sass, opcode_histogram, sass_hash, sass_stats,
)

from test_compile import HEADER, SUM4  # the same one-thread kernel: four loads, a sum

# The same program as SUM4 with other register names and a comment.
SUM4_RENAMED = SUM4.replace("%f", "%x").replace(".reg .f32 %x<8>;", ".reg .f32 %x<8>; // renamed")

# A different program: the product instead of the sum.
PROD4 = SUM4.replace("add.f32", "mul.f32")

# Four floats in one aligned vector load: LDG.E.128.
VEC4 = HEADER + """
.visible .entry vec4(.param .u64 vec4_in, .param .u64 vec4_out)
{
    .reg .f32 %f<8>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [vec4_in];
    ld.param.u64 %rd2, [vec4_out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
    add.f32 %f5, %f1, %f2;
    add.f32 %f6, %f3, %f4;
    add.f32 %f7, %f5, %f6;
    st.global.f32 [%rd2], %f7;
    ret;
}
"""


@pytest.fixture(autouse=True)
def _fresh_lookups():
    toolchain.clear_cache()
    yield
    toolchain.clear_cache()


def _cubin(ptx: str) -> bytes:
    result = compile_ptx(ptx)
    assert result.ok, result.log
    return result.cubin


@pytest.fixture(scope="module")
def sum4_cubin() -> bytes:
    return _cubin(SUM4)


@pytest.fixture(scope="module")
def sum4_sass(sum4_cubin) -> str | None:
    """SUM4's disassembly, done once: each cuobjdump run costs ~0.4 s of CPU."""
    toolchain.clear_cache()
    return disassemble(sum4_cubin)


@pytest.fixture(scope="module")
def sum4_hash(sum4_sass, sum4_cubin) -> tuple[str, str] | None:
    return sass_hash(sum4_cubin) if sum4_sass is not None else None


@pytest.fixture
def needs_cuobjdump(sum4_sass):
    """Skip where cuobjdump (or the nvdisasm it needs) cannot disassemble."""
    if sum4_sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")


def test_same_ptx_twice_same_sass_hash(needs_cuobjdump, sum4_hash):
    first = sum4_hash
    assert first == sass_hash(_cubin(SUM4))
    assert first[1] == "sass" and len(first[0]) == 64


def test_renamed_registers_and_comment_same_sass_hash(needs_cuobjdump, sum4_hash):
    assert ptx_hash(SUM4_RENAMED) != ptx_hash(SUM4)
    assert sass_hash(_cubin(SUM4_RENAMED)) == sum4_hash


def test_different_program_different_sass_hash(needs_cuobjdump, sum4_hash):
    assert sass_hash(_cubin(PROD4)) != sum4_hash


def test_normalized_listing_has_only_code(needs_cuobjdump, sum4_sass):
    text = normalize_sass(sum4_sass)
    assert "/*" not in text and "headerflags" not in text
    assert "Function : sum4" in text
    assert "FADD" in text


def test_histogram_has_loads_stores_and_adds(needs_cuobjdump, sum4_sass):
    text = sum4_sass
    coarse = opcode_histogram(text)
    assert coarse["LDG"] == 4 and coarse["STG"] == 1 and coarse["FADD"] == 3
    assert "NOP" not in coarse  # alignment padding after EXIT is not code
    assert opcode_histogram(normalize_sass(text)) == coarse
    assert opcode_histogram(text, fine=True)["LDG.E"] == 4


def test_stats_count_global_accesses_by_width(needs_cuobjdump, sum4_cubin):
    scalar = sass_stats(sum4_cubin)
    assert scalar["available"]
    assert scalar["global_loads"] == {"32": 4} and scalar["global_stores"] == {"32": 1}
    assert scalar["instructions"] == sum(scalar["opcodes"].values())
    assert scalar["local_loads"] == scalar["local_stores"] == 0
    vector = sass_stats(_cubin(VEC4))
    assert vector["global_loads"] == {"128": 1}


def test_cubin_fallback_hash_is_stable(sum4_cubin):
    # Needs no cuobjdump: only the ELF .text sections are hashed.
    assert cubin_text_hash(sum4_cubin) == cubin_text_hash(_cubin(SUM4))
    assert cubin_text_hash(_cubin(SUM4_RENAMED)) == cubin_text_hash(sum4_cubin)
    assert cubin_text_hash(_cubin(PROD4)) != cubin_text_hash(sum4_cubin)


def test_without_cuobjdump_falls_back_to_cubin(monkeypatch, tmp_path, sum4_cubin):
    monkeypatch.setenv("EVO_CUOBJDUMP", str(tmp_path / "missing"))
    assert disassemble(sum4_cubin) is None
    assert sass_hash(sum4_cubin) == (cubin_text_hash(sum4_cubin), "cubin")
    assert sass_stats(sum4_cubin)["available"] is False


def test_cubin_hash_rejects_non_elf():
    with pytest.raises(ValueError, match="ELF"):
        cubin_text_hash(b"not a cubin")


def test_normalize_sass_drops_addresses_encodings_and_headers():
    listing = """
Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit
identifier = /tmp/build-1234/kernel.cu

	code for sm_90
	.target	sm_90

		Function : k
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;      /* 0x00000a00ff017b82 */
                                                                /* 0x000ff00000000800 */
        /*0010*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;   /* 0x0000000402047981 */
        /*0020*/                   EXIT ;                      /* 0x000000000000794d */
        /*0030*/                   BRA 0x30;                   /* 0xfffffffc00fc7947 */
        /*0040*/                   NOP;                        /* 0x0000000000007918 */
		..........
"""
    moved = listing.replace("/tmp/build-1234", "/home/x").replace("/*00", "/*10")
    assert normalize_sass(listing) == normalize_sass(moved)
    assert normalize_sass(listing).splitlines() == [
        "code for sm_90", "Function : k", "LDC R1, c[0x0][0x28] ;",
        "@!P0 LDG.E.128 R4, desc[UR4][R2.64] ;", "EXIT ;", "BRA 0x30;", "NOP;",
    ]
    assert opcode_histogram(listing) == {"LDC": 1, "LDG": 1, "EXIT": 1}


SASS_WITH_LOOP = """
        Function : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;             /* 0x0000 */
        /*0010*/               @P0 EXIT ;                              /* 0x0000 */
        /*0020*/                   MOV R4, R6 ;                        /* 0x0000 */
        /*0030*/                   LDG.E R5, desc[UR6][R4.64] ;        /* 0x0000 */
        /*0040*/                   FADD R0, R5, R0 ;                   /* 0x0000 */
        /*0050*/              @!P0 BRA 0x20 ;                          /* 0x0000 */
        /*0060*/                   BRA.DIV UR10, 0x90 ;                /* 0x0000 */
        /*0070*/                   STG.E desc[UR6][R2.64], R0 ;        /* 0x0000 */
        /*0080*/                   EXIT ;                              /* 0x0000 */
        /*0090*/                   BRA 0x90 ;                          /* 0x0000 */
        /*00a0*/                   NOP ;                               /* 0x0000 */
"""


def test_hot_region_is_the_innermost_loop_else_the_kernel_without_padding():
    from harness.sass import hot_region

    loop = hot_region(SASS_WITH_LOOP)
    assert loop["region"] == "the innermost loop (0x0020-0x0050, 4 instructions)"
    assert loop["text"].splitlines() == ["/*0020*/ MOV R4, R6",
                                         "/*0030*/ LDG.E R5, desc[UR6][R4.64]",
                                         "/*0040*/ FADD R0, R5, R0", "/*0050*/ @!P0 BRA 0x20"]
    straight = hot_region(SASS_WITH_LOOP.replace("@!P0 BRA 0x20", "@!P0 BRA 0x70"))
    assert straight["region"] == "the whole kernel (9 instructions, no loop)"
    assert straight["text"].splitlines()[-1] == "/*0080*/ EXIT"  # no padding after it
    cut = hot_region(SASS_WITH_LOOP.replace("@!P0 BRA 0x20", "@!P0 BRA 0x70"), limit=3)
    assert cut["region"].endswith("its first 3 shown") and len(cut["text"].splitlines()) == 3
