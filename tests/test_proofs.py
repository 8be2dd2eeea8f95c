"""genomes.proofs: launch-wide proofs kept in the process and in a folder that other
processes (the apply pool's) and later runs read; on a kernel Triton wrote, a proof read
back gives the same PTX without evaluating the launch again."""

from __future__ import annotations

from pathlib import Path

import pytest

from genomes import lane_eval, proofs
from genomes.genome import Gene, Genome, apply_genome
from harness.kernels.suite import find_kernel

ROTARY = find_kernel(Path(__file__).parent / "data" / "captured" / "rotary_llama.toml")
X2 = find_kernel(Path(__file__).parent / "data" / "captured" / "rotary_llama_x2.toml")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(proofs, "_folder", lambda: tmp_path)
    monkeypatch.setattr(proofs, "_memory", proofs.OrderedDict())
    return tmp_path


def test_a_proof_kept_is_recalled_here_and_by_another_process(folder):
    key = ("slice", ("%rd5", 0, None), (64, 1, 1), (128, 1, 1))
    assert proofs.recall("k/1", key) is None
    proofs.keep("k/1", key, [[3, 1, 2048]])
    assert proofs.recall("k/1", key) == [[3, 1, 2048]]
    files = [p for p in folder.glob("*/*")]
    assert len(files) == 1 and files[0].parent.name == files[0].name[:2]
    proofs.forget()  # as a fresh process sees it: from the folder
    assert proofs.recall("k/1", key) == [[3, 1, 2048]]
    assert proofs.recall("k/2", key) is None  # another version of the proof: not it
    assert proofs.recall("k/1", key[:-1] + ((256, 1, 1),)) is None  # another launch


def test_a_proof_made_by_other_code_is_not_this_codes(folder, monkeypatch):
    proofs.keep("k/1", "key", [[3, 1, 2048]])
    proofs.forget()
    monkeypatch.setattr(proofs, "_source", lambda: "another evo's genomes")
    assert proofs.recall("k/1", "key") is None


def test_a_torn_file_is_a_miss_and_no_folder_keeps_proofs_in_memory(folder, monkeypatch):
    proofs.keep("k/1", "key", [1])
    (path,) = folder.glob("*/*")
    path.write_text("[1, 2")  # cut short
    proofs.forget()
    assert proofs.recall("k/1", "key") is None
    monkeypatch.setattr(proofs, "_folder", lambda: None)
    proofs.keep("k/1", "other", [2])
    assert proofs.recall("k/1", "other") == [2]
    monkeypatch.setattr(proofs, "MEMORY", 2)
    for n in range(3):
        proofs.keep("k/1", n, [n])
    assert proofs.recall("k/1", 0) is None and proofs.recall("k/1", 2) == [2]  # the oldest went


@pytest.mark.parametrize("spec, genes", [
    (ROTARY, ("fast_sincos", "addr_rebase")),  # addr_rebase's proof
    (X2, ("fast_sincos", "coarsen_tile")),  # its merges (lane_merge) and rebases
])
def test_a_recalled_proof_gives_the_same_ptx_without_evaluating_the_launch(folder, monkeypatch, spec, genes):
    genome = Genome(tuple(Gene.make(g) for g in genes))
    first = apply_genome(spec.ptx_text(), genome, spec.launch)
    assert all(o.status == "applied" for o in first.outcomes), first.outcomes
    assert len(list(folder.glob("*/*"))) >= 1
    proofs.forget()

    evaluate = lane_eval.evaluate
    launches = []

    def one_thread_only(fn, registers, grid, block, *args, **kwargs):
        launches.append((tuple(grid), tuple(block)))  # evaluable() tries one thread
        return evaluate(fn, registers, grid, block, *args, **kwargs)

    monkeypatch.setattr(lane_eval, "evaluate", one_thread_only)
    again = apply_genome(spec.ptx_text(), genome, spec.launch)
    assert again.ptx == first.ptx and again.launch == first.launch
    assert launches and set(launches) == {((1, 1, 1), (1, 1, 1))}  # never the launch's threads
