"""harness.timer_reads: a variant reading a clock its baseline never reads is rejected before
ptxas, by itself and through the evaluator (the time-keyed memo of tests/data/reuse/heavy_clock.cu)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from harness import record
from harness.hidden_state import hidden_state
from harness.kernels.spec import load_spec
from harness.timer_reads import added_timer_read, timers

REUSE = Path(__file__).parent / "data" / "reuse"
HEAVY = load_spec(REUSE / "heavy.toml")
CHEAT = (REUSE / "heavy_clock_cheat.ptx").read_text()


def _with(ptx: str, line: str) -> str:
    """``line`` added before the entry's first ``ret``, a scratch register declared."""
    ptx = ptx.replace("\t.reg .b64 \t%rd<", "\t.reg .b64 \t%tmr<2>;\n\t.reg .b64 \t%rd<", 1)
    return ptx.replace("\tret;", f"\t{line}\n\tret;", 1)


def test_the_time_keyed_memo_is_rejected_naming_its_read():
    reason = added_timer_read(CHEAT, HEAVY.ptx_text())
    assert reason is not None and reason.startswith(record.TIMER_READ + ": line 49 reads %globaltimer"), reason
    assert hidden_state(CHEAT, HEAVY.ptx_text()) == reason  # the static gate's one entry point


@pytest.mark.parametrize("register", ["%clock", "%clock_hi", "%clock64", "%globaltimer_lo",
                                      "%globaltimer_hi", "%pm3", "%pm0_64"])
def test_every_timer_register_is_seen(register):
    base = HEAVY.ptx_text()
    kind = "u64" if register.endswith(("64", "_64")) else "u32"
    ptx = _with(base, f"mov.{kind} \t%tmr0, {register};")
    reason = added_timer_read(ptx, base)
    assert reason is not None and f"reads {register}," in reason, reason


def test_honest_kernels_and_comments_pass():
    base = HEAVY.ptx_text()
    assert added_timer_read(base, base) is None
    assert timers(base) == {}
    commented = base.replace("\tret;", "\t// mov.u64 %rd1, %globaltimer;\n\t/* %clock64 */\n\tret;", 1)
    assert added_timer_read(commented, base) is None
    assert hidden_state(commented, base) is None


def test_a_baseline_that_reads_a_timer_keeps_it_but_no_other():
    base = _with(HEAVY.ptx_text(), "mov.u64 \t%tmr0, %clock64;")
    twice = _with(base, "mov.u64 \t%tmr1, %clock64;")  # a transform that copied code
    assert added_timer_read(twice, base) is None
    other = _with(base, "mov.u64 \t%tmr1, %globaltimer;")
    assert "reads %globaltimer" in added_timer_read(other, base)


def test_the_evaluator_rejects_it_before_ptxas(tmp_path):
    from genomes.genome import Genome, PatchGene
    from harness.backends import make_backend
    from harness.evaluate import Evaluator
    from harness.store import Store

    base = HEAVY.ptx_text()
    diff = "".join(difflib.unified_diff(base.splitlines(True), CHEAT.splitlines(True), "a.ptx", "b.ptx"))
    with make_backend("static") as backend, Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(backend, store)
        [m] = ev.evaluate(HEAVY, [Genome((PatchGene(diff),))])
    assert not m.valid and m.reason.startswith(record.TIMER_READ), m.reason
    assert ev.stats.static_rejects == 1 and ev.stats.compiled <= 1  # the baseline's alone
