"""The LLM's failure memory (evo.llm.history) and its determinism across a resume: every
patch outcome reaches the next mutate prompts in genome notation, and a run resumed from
its checkpoint prompts, draws and answers exactly as the interrupted one did."""

from __future__ import annotations

import json
import math
import re

import llm_server as fake
import pytest
from conftest import needs_ptxas
from llm_server import text
from test_llm_mutation import BREAKS_PTXAS, GOOD, KERNEL, NOT_APPLYING, SHIFTED, mutator

from evo.llm.history import PatchHistory, render
from evo.llm.mutation import LlmMutator, SearchView
from evo.report import llm_lines
from genomes.genome import parse_inline
from genomes.patch import changed_lines
from harness.record import Measurement
from harness.store import Store
from harness.kernels.suite import find_kernel

llm_server = fake.llm_server  # the fixture
PARENT = parse_inline("maxnreg(n=64)")
DICT_REPR = re.compile(r"\{'genes'|'transform'|\{\"genes\"|'params'")


@pytest.fixture
def no_sass(monkeypatch):
    """The prompts' SASS histogram off: cuobjdump takes most of a proposal's time and is
    not what these tests are about."""
    monkeypatch.setattr("harness.sass.disassemble", lambda cubin, *a, **k: None)


def measured(cycles: float | None, reason: str = "") -> Measurement:
    return Measurement(KERNEL, "test-gpu", cycles is not None, reason, cycles=cycles, n=50,
                       timer="clock64", backend="gpu")


def prompt(server, i: int) -> str:
    return server.requests[i].body["messages"][-1]["content"]


def test_history_orders_recent_and_instructive_first_within_budget():
    h = PatchHistory()
    h.add("k", "vec_ld(width=4),patch(a@11111111)", "gate", "outputs differ " * 5)
    for i in range(6):
        h.add("k", f"patch(s{i}@2222222{i})", "slower", f"{2700 + i} vs 2600 cycles")
    h.add("k", "patch(x@33333333)", "no_edit")
    h.add("k", "patch(x@33333333)", "no_edit")  # the same again: one line, counted
    h.add("k", "patch(f@44444444)", "faster", "2400 vs 2600 cycles (-7.7%)")
    lines, left_out = h.lines("k", 10_000)
    assert lines[0].startswith("`patch(f@44444444)`: correct and faster")
    # the old gate rejection outranks the newest "slower"s: it teaches more
    gate = next(i for i, l in enumerate(lines) if "REJECTED" in l)
    assert gate < next(i for i, l in enumerate(lines) if "patch(s0@" in l)
    assert sum("(2 times)" in l for l in lines) == 1 and left_out == 0
    assert all(not DICT_REPR.search(l) for l in lines)
    short, left = h.lines("k", 200)
    assert sum(len(l) + 1 for l in short) <= 200 and short == lines[:len(short)]
    assert left == 10 - sum(2 if "(2 times)" in l else 1 for l in short) and left > 0
    assert h.lines("k", 0) == ([], 0) and h.lines("other", 500) == ([], 0)
    again = PatchHistory()
    again.restore(json.loads(json.dumps(h.to_json())))
    assert again.lines("k", 10_000) == (lines, 0)  # deterministic, and survives JSON


def test_history_keeps_the_newest_and_skips_damaged_entries():
    h = PatchHistory()
    for i in range(250):
        h.add("k", f"patch(m@{i:08d})", "slower")
    rows = h.to_json()["k"]
    assert len(rows) == 200 and rows[-1]["seq"] == 250
    h.restore({"k": [{"seq": 1, "genome": "g", "outcome": "gate"}, {"seq": "x"}, 5],
               "j": "not a list"})
    assert list(h.entries) == ["k"] and len(h.entries["k"]) == 1
    assert render(h.entries["k"][0]) == "`g`: REJECTED by the correctness check"


@needs_ptxas
def test_every_outcome_reaches_the_next_prompt_in_genome_notation(llm_server, tmp_path,
                                                                  monkeypatch, no_sass):
    llm_server.script([text(NOT_APPLYING), text("Sorry, I cannot."),  # no match, no edit
                       text(BREAKS_PTXAS), text(GOOD),  # ptxas error, then repaired
                       text(SHIFTED)])
    m = mutator(llm_server, tmp_path, monkeypatch)
    spec = find_kernel(KERNEL)
    assert m.propose(spec, PARENT, SearchView()) is None
    child = m.propose(spec, PARENT, SearchView())
    assert "`maxnreg(n=64),patch(imaginary@" in prompt(llm_server, 2)  # the very next one
    assert str(child).startswith("maxnreg(n=64),patch(Vectorize loads!@")
    m.record(KERNEL, child.genes[-1], measured(None, "check failed: outputs differ "
                                                     "(max rel err 0.5)"), 2600.0, genome=child)
    # A failure the history quotes is not repeated among the search's recent failures.
    view = SearchView(recent_failures=[f"{child}: check failed", "vec_st(width=4): no-op"])
    m.propose(spec, PARENT, view)
    user = prompt(llm_server, 4)
    section = user.split("# Your earlier edits to this kernel")[1].split("\n# ")[0]
    assert f"- `{child}`: REJECTED by the correctness check: check failed: outputs differ" \
           in section
    assert re.search(r"- `maxnreg\(n=64\),patch\(broken@[0-9a-f]{8}\)`: ptxas rejected it: "
                     r".*line \d+", section)
    assert re.search(r"- `maxnreg\(n=64\),patch\(imaginary@[0-9a-f]{8}\)`: did not apply",
                     section)
    assert "- after `maxnreg(n=64)`: your answer held no edit" in section
    assert section.index("REJECTED") < section.index("your answer held no edit")
    assert "- vec_st(width=4): no-op" in user and f"- {child}: check failed" not in user
    assert not DICT_REPR.search(user)
    # Measured patches: slower and faster, with the cycles against the parent.
    m.record(KERNEL, child.genes[-1], measured(2700.0), 2600.0, genome=child)
    m.record(KERNEL, child.genes[-1], measured(2400.0), 2600.0, genome=child)
    lines, _ = m.history.lines(KERNEL, 10_000)
    # Each line ends with what the edit changed: its own -/+ lines, not only its label.
    edit = "; the edit: " + " ".join(f"`{ln}`" for ln in changed_lines(child.genes[-1].diff))
    assert edit.startswith("; the edit: `-") and "`+" in edit
    assert f"`{child}`: correct and faster than its parent: 2400 vs 2600 cycles (-7.7%)" \
           f"{edit}" in lines
    assert f"`{child}`: correct but not faster than its parent: 2700 vs 2600 cycles " \
           f"(+3.8%){edit}" in lines
    # A parent never measured (after crossover): no "faster", no gain for the method.
    before = (m.counts["faster"], dict(m.own_methods))
    m.record(KERNEL, child.genes[-1], measured(2300.0), math.inf, genome=child)
    assert (m.counts["faster"], dict(m.own_methods)) == before
    lines, _ = m.history.lines(KERNEL, 10_000)
    assert (f"`{child}`: correct (faster or not: unknown): 2300 cycles; its parent was not "
            f"measured{edit}") in lines


@needs_ptxas
def test_a_resumed_run_prompts_draws_and_answers_as_the_interrupted_one(llm_server, tmp_path,
                                                                       monkeypatch, no_sass):
    """Checkpoint after one proposal; two more (one measured: the store learns its method)
    and a kill; resume from the checkpoint with the same store: the same prompts, the same
    draws answered from the cache, the same children, and no request."""
    llm_server.script([text(NOT_APPLYING), text("Sorry, I cannot."), text(GOOD),
                       text(SHIFTED)])
    spec, store = find_kernel(KERNEL), Store(":memory:")

    def run(m: LlmMutator) -> list:
        first = m.propose(spec, PARENT, SearchView())
        m.record(KERNEL, first.genes[-1], measured(2400.0), 2600.0, genome=first)
        return [first, m.propose(spec, PARENT, SearchView())]

    a = mutator(llm_server, tmp_path, monkeypatch, cache=True)
    a.store = store
    assert a.propose(spec, PARENT, SearchView()) is None
    checkpoint = json.loads(json.dumps(a.stats()))
    children = run(a)
    asked = [r.body for r in llm_server.requests]
    assert len(asked) == 4 and all(children)

    b = mutator(llm_server, tmp_path, monkeypatch, cache=True)
    b.store = store  # it has counted a's method since: the prompts must not show that
    b.restore(checkpoint)
    assert run(b) == children
    assert len(llm_server.requests) == 4  # every answer replayed from the cache
    paid = ("calls", "cached", "prompt_tokens", "completion_tokens", "cost", "attempts")
    assert {k: v for k, v in b.stats().items() if k not in paid} == \
           {k: v for k, v in a.stats().items() if k not in paid}
    assert b.stats()["cached"] == 2 and b.stats()["state"]["history"][KERNEL]


def test_report_line_counts_distinct_and_replayed_answers():
    stats = {"calls": 30, "cached": 3, "failures": 2, "unique": 25, "prompt_tokens": 100,
             "completion_tokens": 50, "cost": None, "proposed": 1, "applied": 1,
             "assembled": 1, "correct": 1, "faster": 0, "repairs": 0}
    assert llm_lines(stats)[0] == ("LLM: 30 calls (2 failed), 31 answers (25 distinct, 3 "
                                   "replayed from the cache), 100 prompt + 50 completion "
                                   "tokens")
    old = {k: v for k, v in stats.items() if k != "unique"}  # a checkpoint from before
    assert "(3 replayed from the cache)" in llm_lines(old)[0]
