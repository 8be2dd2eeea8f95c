"""LlmClient against a real chat-completions server on loopback, through the real openai client.

Backoff sleeps are injected (recorded, not slept); only the hang test waits for real,
on a 0.5 s client timeout.
"""

from __future__ import annotations

import json
import random

import llm_server as fake
import pytest
from llm_server import hang, malformed, status, text

from evo.config import LlmConfig
from evo.llm.client import (BACKOFF_CAP, LlmClient, LlmError, backoff, cache_key,
                            request_digest)

KEY = "sk-test-9f8e7d6c5b4a-never-write-me"
ENV = {"EVO_TEST_KEY": KEY}
llm_server = fake.llm_server  # the fixture, used by name below

MESSAGES = [{"role": "system", "content": "You edit PTX."},
            {"role": "user", "content": "Unroll the loop."}]


def make(server, tmp_path, *, env=ENV, **over):
    """A client on ``server`` with tiny timeouts; returns (client, recorded sleeps)."""
    values = {"base_url": server.base_url, "model": "test-model", "api_key_env": "EVO_TEST_KEY",
              "timeout": 5.0, "retries": 2, "max_calls": 50}
    values.update(over)
    sleeps: list[float] = []
    client = LlmClient(LlmConfig(**values), tmp_path / "llm", env=env, sleep=sleeps.append)
    return client, sleeps


def _dead_url() -> str:
    """A loopback endpoint nobody listens on: a port the system just handed out, closed."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def logs(tmp_path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "llm").glob("*.json"))]


def test_good_answer_counts_tokens_and_logs(llm_server, tmp_path):
    llm_server.script([text("mov.u32 %r1, 0;", usage={"prompt_tokens": 120,
                                                      "completion_tokens": 30,
                                                      "total_tokens": 150})])
    client, sleeps = make(llm_server, tmp_path, price_in=2.0, price_out=8.0)
    reply = client.complete(MESSAGES, "mutate")
    assert reply.ok and reply.text == "mov.u32 %r1, 0;"
    assert (reply.prompt_tokens, reply.completion_tokens) == (120, 30)
    assert reply.attempts == 1 and not reply.cached and sleeps == []
    body = llm_server.requests[0].body
    assert body["model"] == "test-model" and body["messages"] == MESSAGES
    assert body["temperature"] == 0.7 and body["max_tokens"] == 4096
    stats = client.stats()
    assert stats == {"calls": 1, "cached": 0, "failures": 0, "prompt_tokens": 120,
                     "completion_tokens": 30, "attempts": 1, "cost": round((120 * 2 + 30 * 8) / 1e6, 6),
                     "unique": 1, "state": {
                         "draws": {request_digest(client.config, MESSAGES): 1},
                         "answer_digests": stats["state"]["answer_digests"]}}
    assert len(stats["state"]["answer_digests"]) == 1
    json.dumps(stats)
    (record,) = logs(tmp_path)
    assert record["seq"] == 1 and record["outcome"] == "ok" and record["purpose"] == "mutate"
    assert record["messages"] == MESSAGES and record["text"] == reply.text
    assert (tmp_path / "llm" / "00001-mutate.json").exists()


def test_cost_is_none_without_prices(llm_server, tmp_path):
    client, _ = make(llm_server, tmp_path)
    client.complete(MESSAGES, "mutate")
    assert client.stats()["cost"] is None


def test_429_then_success_is_retried(llm_server, tmp_path):
    llm_server.script([status(429, {"error": {"message": "slow down"}}, {"Retry-After": "2"}),
                       text("ok")])
    client, sleeps = make(llm_server, tmp_path)
    reply = client.complete(MESSAGES, "mutate")
    assert reply.ok and reply.text == "ok" and reply.attempts == 2
    assert len(llm_server.requests) == 2
    assert sleeps == [pytest.approx(2.0)]  # Retry-After outweighs the 0.5 s first backoff
    assert client.stats()["failures"] == 0 and client.stats()["calls"] == 1


def test_500_every_time_is_an_error_result_and_the_run_goes_on(llm_server, tmp_path):
    llm_server.script([status(500, "boom")] * 3 + [text("after the outage")])
    client, sleeps = make(llm_server, tmp_path, retries=2)
    reply = client.complete(MESSAGES, "mutate")
    assert not reply.ok and reply.text == "" and reply.attempts == 3
    assert "HTTP 500" in reply.error and "3 attempts" in reply.error
    assert len(sleeps) == 2 and sleeps[0] < sleeps[1]  # exponential
    assert len(llm_server.requests) == 3
    assert logs(tmp_path)[-1]["outcome"] == "error"
    assert not (tmp_path / "llm" / "cache").exists()  # failures are never cached
    again = client.complete(MESSAGES, "mutate")
    assert again.ok and again.text == "after the outage"
    assert client.stats()["failures"] == 1 and client.stats()["calls"] == 2


def test_other_4xx_is_not_retried(llm_server, tmp_path):
    llm_server.script([status(400, {"error": {"message": "bad model"}})])
    client, sleeps = make(llm_server, tmp_path)
    reply = client.complete(MESSAGES, "mutate")
    assert reply.error.startswith("HTTP 400") and reply.attempts == 1 and sleeps == []


@pytest.mark.parametrize("answer", [malformed(), status(200, {"id": "x", "choices": []})])
def test_malformed_response_is_an_error_result(llm_server, tmp_path, answer):
    llm_server.script([answer])
    client, _ = make(llm_server, tmp_path)
    reply = client.complete(MESSAGES, "mutate")
    assert not reply.ok and "malformed response" in reply.error and reply.attempts == 1
    assert client.stats()["failures"] == 1


def test_hang_past_timeout_is_retried_then_an_error(llm_server, tmp_path):
    llm_server.script([hang(3.0), hang(3.0)])
    client, sleeps = make(llm_server, tmp_path, timeout=0.5, retries=1)
    reply = client.complete(MESSAGES, "mutate")
    assert not reply.ok and "timed out" in reply.error and reply.attempts == 2
    assert len(llm_server.requests) == 2 and len(sleeps) == 1
    assert 0.9 < reply.seconds < 2.5


def test_each_draw_of_one_prompt_reaches_the_endpoint(llm_server, tmp_path):
    llm_server.script([text("first"), text("second"), text("first")])
    client, _ = make(llm_server, tmp_path)
    replies = [client.complete(MESSAGES, "mutate") for _ in range(3)]
    assert [r.text for r in replies] == ["first", "second", "first"]
    assert [r.draw for r in replies] == [0, 1, 2] and not any(r.cached for r in replies)
    assert len(llm_server.requests) == 3
    assert len(list((tmp_path / "llm" / "cache").glob("*.json"))) == 3  # one per draw
    stats = client.stats()
    assert (stats["calls"], stats["cached"], stats["unique"]) == (3, 0, 2)
    assert stats["state"]["draws"] == {request_digest(client.config, MESSAGES): 3}
    assert [r["draw"] for r in logs(tmp_path)] == [0, 1, 2]


def test_resume_replays_the_interrupted_draws(llm_server, tmp_path):
    """Checkpoint after one draw, draw more, 'crash', resume from the checkpoint: the
    resumed run draws the same indices and gets the same answers, from the cache."""
    other = [{"role": "user", "content": "Another prompt."}]
    llm_server.script([text("a1"), text("a2"), text("b1"), text("a3")])
    client, _ = make(llm_server, tmp_path)
    assert client.complete(MESSAGES, "mutate").text == "a1"
    checkpoint = json.loads(json.dumps(client.stats()))  # what the checkpoint keeps
    lost = [client.complete(m, "mutate").text for m in (MESSAGES, other)]  # then a kill
    assert lost == ["a2", "b1"] and len(llm_server.requests) == 3

    resumed, _ = make(llm_server, tmp_path, env={})  # replaying needs no key
    resumed.restore_stats(checkpoint)
    again = [resumed.complete(m, "mutate") for m in (MESSAGES, other)]
    assert [r.text for r in again] == lost and all(r.cached for r in again)
    assert len(llm_server.requests) == 3
    same = ("state", "unique")  # calls and tokens: only those paid for
    assert {k: resumed.stats()[k] for k in same} == {k: client.stats()[k] for k in same}
    assert (resumed.stats()["calls"], resumed.stats()["cached"]) == (1, 2)
    # The next draw is a new one: it goes to the endpoint (and so needs the key).
    with pytest.raises(LlmError, match="EVO_TEST_KEY"):
        resumed.complete(MESSAGES, "mutate")
    fresh, _ = make(llm_server, tmp_path)
    fresh.restore_stats(resumed.stats())
    assert fresh.complete(MESSAGES, "mutate").text == "a3"


def test_request_fields_reach_the_server(llm_server, tmp_path):
    client, _ = make(llm_server, tmp_path, max_tokens_field="max_completion_tokens",
                     max_tokens=2048, temperature=-1.0,
                     extra={"reasoning_effort": "low", "metadata": {"run": "t"}})
    assert client.complete(MESSAGES, "mutate").ok
    body = llm_server.requests[0].body
    assert body["max_completion_tokens"] == 2048 and "max_tokens" not in body
    assert "temperature" not in body
    assert body["reasoning_effort"] == "low" and body["metadata"] == {"run": "t"}
    assert logs(tmp_path)[0]["fields"] == {"max_completion_tokens": 2048,
                                           "reasoning_effort": "low", "metadata": {"run": "t"}}
    # max_tokens = 0 sends no limit under either name; a temperature of 0 is sent.
    bare, _ = make(llm_server, tmp_path, max_tokens=0, temperature=0.0)
    assert bare.complete(MESSAGES, "mutate").ok
    body = llm_server.requests[1].body
    assert body["temperature"] == 0.0
    assert "max_tokens" not in body and "max_completion_tokens" not in body
    # Other request fields are another request: not answered from the first one's cache.
    assert cache_key(client.config, MESSAGES) != cache_key(bare.config, MESSAGES)


@pytest.mark.parametrize("field,over,hint", [
    ("max_tokens", {}, 'max_tokens_field = "max_completion_tokens"'),
    ("temperature", {}, "temperature = -1"),
    ("reasoning_effort", {"extra": {"reasoning_effort": "low"}},
     "remove 'reasoning_effort' from [llm] extra"),
])
def test_400_rejecting_a_field_is_one_line_naming_it(llm_server, tmp_path, field, over, hint):
    llm_server.reject = {field: f"Unsupported parameter: '{field}' is not supported with "
                                f"this model."}
    client, sleeps = make(llm_server, tmp_path, **over)
    with pytest.raises(LlmError) as err:
        client.complete(MESSAGES, "mutate")
    line = str(err.value)
    assert "\n" not in line and f"rejected the request field '{field}'" in line
    assert "HTTP 400: Unsupported parameter" in line and hint in line
    assert len(llm_server.requests) == 1 and sleeps == []  # no retry
    assert logs(tmp_path)[0]["outcome"] == "error"
    assert client.stats()["failures"] == 1


def test_400_without_param_names_the_field_from_its_message(llm_server, tmp_path):
    # vLLM-style: no "param", the field only in the text.
    llm_server.script([status(400, {"object": "error", "type": "BadRequestError",
                                    "message": "temperature must be 1 for this model"})])
    client, _ = make(llm_server, tmp_path)
    with pytest.raises(LlmError, match="request field 'temperature'"):
        client.complete(MESSAGES, "mutate")


def test_a_vllm_context_overflow_is_this_prompts_error_with_the_right_advice(llm_server, tmp_path):
    """vLLM names max_tokens when prompt + cap exceed the context: that is no field to
    rename (the advice it got before), and the next, shorter prompt may fit."""
    overflow = ("'max_tokens' is too large: 4096. This model's maximum context length is 8192 "
                "tokens and your request has 6000 input tokens (4096 > 8192 - 6000).")
    llm_server.script([status(400, {"error": {"message": overflow, "type": "BadRequestError"}}),
                       text("fits")])
    client, _ = make(llm_server, tmp_path, max_tokens=4096)
    reply = client.complete(MESSAGES, "mutate")
    assert not reply.ok and reply.attempts == 1
    assert "lower [llm] max_tokens" in reply.error and "max_tokens_field" not in reply.error
    assert client.complete([{"role": "user", "content": "short"}], "m").text == "fits"


def test_400_about_the_prompt_is_an_error_reply_not_fatal(llm_server, tmp_path):
    llm_server.script([status(400, {"error": {"message": "maximum context length exceeded",
                                              "param": "messages"}}), text("ok")])
    client, _ = make(llm_server, tmp_path)
    reply = client.complete(MESSAGES, "mutate")
    assert reply.error.startswith("HTTP 400: maximum context length exceeded; ")
    assert "lower [llm] max_tokens" in reply.error
    assert client.complete(MESSAGES, "mutate").ok


def test_cache_off_asks_every_time(llm_server, tmp_path):
    llm_server.script([text("first"), text("second")])
    client, _ = make(llm_server, tmp_path, cache=False)
    assert [client.complete(MESSAGES, "m").text for _ in range(2)] == ["first", "second"]
    assert len(llm_server.requests) == 2 and not (tmp_path / "llm" / "cache").exists()


def test_call_budget(llm_server, tmp_path):
    client, _ = make(llm_server, tmp_path, max_calls=2, cache=False)
    replies = [client.complete(MESSAGES, "m") for _ in range(3)]
    assert [r.ok for r in replies] == [True, True, False]
    assert replies[2].error == "LLM call budget spent" and replies[2].attempts == 0
    assert len(llm_server.requests) == 2
    # The budget is per run: a resumed run restores the counters and stays refused.
    resumed, _ = make(llm_server, tmp_path, max_calls=2, cache=False)
    resumed.restore_stats(json.loads(json.dumps(client.stats())))
    assert resumed.complete(MESSAGES, "m").error == "LLM call budget spent"
    assert resumed.stats() == client.stats()


def test_missing_key_names_the_variable(llm_server, tmp_path):
    client, _ = make(llm_server, tmp_path, env={})
    with pytest.raises(LlmError, match="EVO_TEST_KEY"):
        client.complete(MESSAGES, "m")
    assert llm_server.requests == []
    empty, _ = make(llm_server, tmp_path, env={"EVO_TEST_KEY": ""})
    with pytest.raises(LlmError, match="EVO_TEST_KEY"):
        empty.check()


def test_key_is_sent_only_in_the_authorization_header(llm_server, tmp_path):
    # The server echoes the key in an error and in an answer: it must still never land
    # in a file, an error message or the repr.
    llm_server.script([status(401, {"error": {"message": f"bad key {KEY}"}}),
                       text(f"your key is {KEY}"), status(500, KEY), status(500, KEY),
                       status(500, KEY)])
    client, _ = make(llm_server, tmp_path, retries=2, price_in=1.0)
    with pytest.raises(LlmError, match="refuses the run: the API key was refused") as refused:
        client.complete([{"role": "user", "content": "q0"}], "m")  # 401: setup, the run stops
    assert KEY not in str(refused.value)
    replies = [client.complete([{"role": "user", "content": f"q{i}"}], "m") for i in (1, 2)]
    client.complete([{"role": "user", "content": "q1"}], "m")  # a second draw
    assert all(r.error is None or KEY not in r.error for r in replies)
    assert {r.headers.get("authorization") for r in llm_server.requests} == {f"Bearer {KEY}"}
    assert KEY not in repr(client) and "EVO_TEST_KEY" in repr(client)
    assert KEY not in json.dumps(client.stats())
    written = [p for p in (tmp_path / "llm").rglob("*") if p.is_file()]
    assert len(written) >= 5  # 4 logs + 1 cache entry
    for path in written:
        assert KEY not in path.read_text(), path


@pytest.mark.parametrize("code, says", [(401, "the API key was refused"),
                                        (403, "may not use this"),
                                        (404, "no such model or endpoint")])
def test_an_endpoint_refusing_the_setup_stops_the_run_at_once(llm_server, tmp_path, code, says):
    llm_server.script([status(code, {"error": {"message": "The model `nope` does not exist"}})])
    client, sleeps = make(llm_server, tmp_path, model="nope")
    with pytest.raises(LlmError) as err:
        client.complete(MESSAGES, "mutate")
    message = str(err.value)
    assert says in message and f"HTTP {code}" in message and "'nope'" in message
    assert "[llm] rate = 0" in message and sleeps == []  # one request, no retries
    assert len(llm_server.requests) == 1 and client.stats()["failures"] == 1


def test_an_endpoint_that_never_answers_stops_after_a_few_calls(tmp_path):
    values = {"base_url": _dead_url(), "model": "m",
              "api_key_env": "EVO_TEST_KEY", "timeout": 2.0, "retries": 1, "max_calls": 50}
    client = LlmClient(LlmConfig(**values), tmp_path / "llm", env=ENV, sleep=lambda s: None)
    replies = [client.complete([{"role": "user", "content": f"q{i}"}], "m") for i in range(2)]
    assert all("connection error" in r.error for r in replies)  # the run goes on, so far
    with pytest.raises(LlmError, match="never answered: 3 calls failed in a row"):
        client.complete([{"role": "user", "content": "q2"}], "m")


def test_failures_after_an_answer_are_outages_not_setup(llm_server, tmp_path):
    llm_server.script([text("fine")] + [status(500, "down")] * 12)
    client, _ = make(llm_server, tmp_path, retries=2)
    assert client.complete(MESSAGES, "mutate").ok
    for i in range(4):  # the endpoint answered once: its later outages are the run's weather
        assert not client.complete([{"role": "user", "content": f"q{i}"}], "m").ok


def test_backoff_is_reproducible_capped_and_jittered():
    waits = [backoff(k, random.Random(7)) for k in range(12)]
    assert waits == [backoff(k, random.Random(7)) for k in range(12)]
    assert all(0.25 <= w < 0.5 * 2 ** k for k, w in enumerate(waits[:6]))
    assert max(waits) <= BACKOFF_CAP
    assert backoff(0, random.Random(1), retry_after=1000) == BACKOFF_CAP


def test_no_log_dir_keeps_no_files(llm_server, tmp_path):
    client = LlmClient(LlmConfig(base_url=llm_server.base_url, api_key_env="EVO_TEST_KEY"),
                       None, env=ENV)
    assert client.complete(MESSAGES, "m").ok and client.complete(MESSAGES, "m").ok
    assert len(llm_server.requests) == 2 and list(tmp_path.iterdir()) == []


def test_preflight_judges_the_endpoint_before_any_work(llm_server, tmp_path):
    client, _ = make(llm_server, tmp_path, model="test-model")
    client.preflight()  # no model list (501): nothing judged, no error
    llm_server.models = ["test-model", "other"]
    client.preflight()  # served
    llm_server.models = ["qwen3-8b", "llama-3-70b"]
    with pytest.raises(LlmError, match="does not serve model 'test-model' .*qwen3-8b"):
        client.preflight()
    llm_server.models = status(401, {"error": {"message": f"bad key {KEY}"}})
    with pytest.raises(LlmError, match="refuses the run: HTTP 401") as err:
        client.preflight()
    assert KEY not in str(err.value)
    assert llm_server.requests == []  # no completion asked, no tokens spent
    assert client.stats()["calls"] == 0


def test_preflight_names_an_endpoint_nobody_listens_on(tmp_path):
    config = LlmConfig(base_url=_dead_url(), model="m",
                       api_key_env="EVO_TEST_KEY", timeout=2.0)
    with pytest.raises(LlmError, match="cannot be reached"):
        LlmClient(config, None, env=ENV).preflight()


def test_many_asks_go_out_at_once_and_come_back_in_order(llm_server, tmp_path):
    """20 answers of 1 s each, 4 in flight ([llm] concurrency): about 5 s, not 20; every
    answer comes back once (the server hands its script out by arrival), and logs, draws
    and counters are what one ask after another gives."""
    import time

    llm_server.script([hang(1.0, content=f"answer {i}") for i in range(20)])
    client, _ = make(llm_server, tmp_path, concurrency=4, timeout=10.0)
    asks = [([*MESSAGES[:1], {"role": "user", "content": f"ask {i}"}], "mutate")
            for i in range(20)]
    start = time.perf_counter()
    replies = client.complete_many(asks)
    wall = time.perf_counter() - start
    assert wall < 7.0, wall  # serial: 20 s
    assert all(r.ok for r in replies) and client.stats()["calls"] == 20
    # The answers came back in arrival order, one per request: every text once.
    assert sorted(r.text for r in replies) == sorted(f"answer {i}" for i in range(20))
    # Logs in the asks' order, whatever order the answers arrived in.
    logged = [entry["messages"][-1]["content"] for entry in logs(tmp_path)]
    assert logged == [f"ask {i}" for i in range(20)]
    assert [r.draw for r in replies] == [0] * 20  # twenty distinct prompts: each one's first


def test_asks_in_one_batch_draw_one_after_another(llm_server, tmp_path):
    """The same prompt asked three times in one batch: draws 0, 1, 2 (as three calls in a
    row), so a resumed run replays them from the cache in the same order."""
    llm_server.script([text("a"), text("b"), text("c")])
    client, _ = make(llm_server, tmp_path, concurrency=3)
    first = client.complete_many([(MESSAGES, "mutate")] * 3)
    assert [r.draw for r in first] == [0, 1, 2]
    again, _ = make(llm_server, tmp_path, concurrency=3)  # a resumed run: the same cache
    replayed = again.complete_many([(MESSAGES, "mutate")] * 3)
    assert [r.text for r in replayed] == [r.text for r in first] and all(r.cached for r in replayed)
    assert len(llm_server.requests) == 3  # nothing asked twice


def test_a_spend_cap_stops_calls_and_every_attempt_is_counted(llm_server, tmp_path):
    """[llm] max_cost: 18 tokens an answer at 1000 per 1M tokens is 0.018; with a cap of
    0.03 the third ask is refused without a request. Retried attempts count too."""
    llm_server.script([status(500), text("a"), text("b"), text("c")])
    client, _ = make(llm_server, tmp_path, price_in=1000.0, price_out=1000.0, max_cost=0.03)
    first, second, third = (client.complete(MESSAGES + [{"role": "user", "content": str(i)}],
                                            "mutate") for i in range(3))
    assert first.ok and first.attempts == 2 and second.ok
    assert not third.ok and "spend cap" in third.error
    assert len(llm_server.requests) == 3  # 500, a, b: nothing for the third
    stats = client.stats()
    assert stats["calls"] == 2 and stats["attempts"] == 3 and stats["cost"] == pytest.approx(0.036)


def test_a_spend_cap_without_prices_is_refused():
    from evo.config import ConfigError

    with pytest.raises(ConfigError, match="max_cost needs the prices"):
        LlmConfig(max_cost=1.0)
