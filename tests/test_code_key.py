"""One store key per distinct code: a variant is keyed by every function its launch can
reach and by what its code addresses, not by its entry's machine code alone.

The kernel (tests/data/code_key/helper_axpy.cu, nvcc 13.0 -O3) does its arithmetic in a
recursive helper, which ptxas keeps as a function of its own, and reads an initialized
``.global`` table. Measured with ptxas 13.0: a called function's code is placed inside
each caller's ``.text`` section (the entry and its clock64 twin each get a copy), so a
patch to the helper did change the entry's key; what the entry's text did not show is
what its addresses point at. Keyed by the text alone, a patch to a table's values or to
which table is read left the key unchanged, and the store answered the patched variant
with the first one's verdict, validity included.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from pathlib import Path

import pytest

from harness.compile import compile_ptx
from harness.evaluate import compiled_key
from harness.gpu.instrument import clock_entry_name, with_clock_twin
from harness.sass import _elf_text_sections, cubin_text_hash
from harness.kernels.spec import KernelSpec
from harness.kernels.suite import find_kernel

ENTRY = "helper_axpy"
PTX = (Path(__file__).parent / "data" / "code_key" / "helper_axpy.ptx").read_text()


class _Spec:
    """What compiled_key reads of a spec: the launch suffix (the spec's own launch here)."""

    @staticmethod
    def launch_suffix(launch) -> str:
        return KernelSpec.launch_suffix(_Spec, launch) if launch is not None else ""


def _edit(old: str, new: str) -> str:
    assert PTX.count(old) == 1, f"helper_axpy.ptx no longer holds {old!r}"
    return PTX.replace(old, new)


VARIANTS = {
    "baseline": PTX,
    # the helper computes 3x + y instead of 2x + y: only the .func's code changes
    "helper patched": _edit("fma.rn.f32 \t%f9, %f4, 0f40000000, %f5;",
                            "fma.rn.f32 \t%f9, %f4, 0f40400000, %f5;"),
    # one value of the table changed: no instruction changes
    "table value": _edit("0, 0, 64, 64, 0, 0, 128, 64};\n.global .align 4 .b8 evo_table_b",
                         "0, 0, 64, 64, 0, 0, 160, 64};\n.global .align 4 .b8 evo_table_b"),
    # the other table read: only the relocation says which
    "other table": _edit("mov.u64 \t%rd9, evo_table_a;", "mov.u64 \t%rd9, evo_table_b;"),
}


@functools.cache
def _twin_cubin(name: str) -> bytes:
    """The variant assembled beside its clock64 twin, as the GPU pipeline does."""
    result = compile_ptx(with_clock_twin(VARIANTS[name], ENTRY))
    assert result.ok, f"{name}: {result.error}"
    return result.cubin


@functools.cache
def _alone(name: str):
    result = compile_ptx(VARIANTS[name])
    assert result.ok, f"{name}: {result.error}"
    return result


@pytest.mark.parametrize("name", [n for n in VARIANTS if n != "baseline"])
def test_a_patch_outside_the_entry_code_gets_its_own_key(name):
    twin = (clock_entry_name(ENTRY),)
    assert (cubin_text_hash(_twin_cubin(name), exclude=twin)
            != cubin_text_hash(_twin_cubin("baseline"), exclude=twin)), name
    # and so for the key a search compares genomes by (assembled alone, no twin)
    assert compiled_key(_Spec, _alone(name)) != compiled_key(_Spec, _alone("baseline")), name


def _text_only(cubin: bytes) -> str:
    """The old key: the entry's text section alone."""
    digest = hashlib.sha256()
    for name, data in _elf_text_sections(cubin):
        if name == f".text.{ENTRY}":
            digest.update(name.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
    return digest.hexdigest()


def test_the_entry_text_alone_was_blind_to_a_tables_values():
    """The old key collides here: the defect this file guards against."""
    assert _text_only(_twin_cubin("table value")) == _text_only(_twin_cubin("baseline"))


def test_the_helper_lives_in_each_callers_text():
    """Why a helper patch changed even the old key (ptxas 13.0 whole-program mode)."""
    assert _text_only(_twin_cubin("helper patched")) != _text_only(_twin_cubin("baseline"))


def test_the_twin_is_left_out_and_the_key_matches_the_variant_assembled_alone():
    twin = (clock_entry_name(ENTRY),)
    for name in VARIANTS:
        assert (cubin_text_hash(_twin_cubin(name), exclude=twin)
                == cubin_text_hash(_alone(name).cubin)), name


def test_self_contained_code_keeps_its_text_only_key():
    """A kernel without tables or module variables hashes as before (its text sections
    alone), so the store's existing keys for such kernels stay valid."""
    cubin = compile_ptx(find_kernel("gemm_tile_4x4x4").ptx_text()).cubin
    digest = hashlib.sha256()
    for name, data in _elf_text_sections(cubin):
        digest.update(name.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
    assert cubin_text_hash(cubin) == digest.hexdigest()
