"""The chat-completions client: retries, a per-run call budget, a cache and a log.

``LlmClient.complete`` never raises for anything the endpoint does to one request: rate
limits, server errors, timeouts, dropped connections and malformed answers end, after the
configured retries, in an ``LlmReply`` whose ``error`` says what happened, so the evolution
run goes on without that child. Only bad *setup* is an ``LlmError``: a missing key, no
``openai``, an HTTP 400 that names a request field we sent (``temperature``,
``max_tokens``, an ``[llm] extra`` key...), which every later request would repeat: one
line naming the field and the setting to change; an endpoint that refuses the run itself
(HTTP 401 or 403: the key; 404: the model or the URL), and an endpoint that never
answered (``SETUP_FAILURES`` calls in a row failed before any succeeded: a dead URL).
Before, those made every call fail while the run went on and exited 0.

Each request is one *draw*: asking the same prompt again is a new, independent sample
(the temperature is not wasted). The run folder keeps what makes an LLM run reproducible
and auditable:

* ``<log_dir>/cache/<sha256>.json``: the answer to each (model, request fields, messages,
  draw index), the draw index counting earlier draws of that same request in the run.
  The counts are part of ``stats()`` (the checkpoint), so a resumed run draws the same
  indices again and replays the answers of the interrupted run, without a request;
* ``<log_dir>/NNNNN-<purpose>.json``: every exchange, with prompt, request fields,
  answer, usage, attempts and outcome.
(``evo.llm.transcript`` writes both.)

The API key is read from the environment variable named by ``[llm] api_key_env`` and is
held only by the ``openai`` client object: it is never written to a log, the cache, an
error message or ``repr``; any echo of it in text we write is masked as well.
``complete_many`` sends several requests at once (``[llm] concurrency`` in flight) while
keeping everything else in the asks' order, as ``complete`` one after another would:
draws, the call budget, counters, logs, and the errors that stop a run. Otherwise not
thread-safe: one client per run, called from the search loop.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from evo.config import LlmConfig
from evo.llm.request import (DIGEST_CHARS, OVERFLOW_HINT, cache_key, context_overflow,
                             error_message, rejected_field, rejection, request_digest,
                             request_fields)
from evo.llm.transcript import Transcript
from genomes.errors import EvoError

BACKOFF_BASE = 0.5  # seconds before the first retry; doubles per retry
BACKOFF_CAP = 30.0  # no single wait is longer, whatever Retry-After asks for
ERROR_CHARS = 300  # error bodies can be whole HTML pages; a reply keeps their start
COUNTERS = ("calls", "cached", "failures", "prompt_tokens", "completion_tokens", "attempts")
SETUP_STATUS = {401: "the API key was refused", 403: "the API key may not use this",
                404: "no such model or endpoint"}
SETUP_FAILURES = 3  # calls in a row, each after its retries, failed before any answered


class LlmError(EvoError):
    """The LLM cannot be used at all (no API key, no openai package)."""


@dataclass(frozen=True)
class LlmReply:
    """One answer. ``error`` is set (and ``text`` empty) when no usable answer came.

    ``attempts`` counts requests sent (0 for a cache hit or a refused call); the token
    counts of a cached reply are those of the exchange that filled the cache. ``draw``
    is how many times the same request was drawn before in this run.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    seconds: float = 0.0
    attempts: int = 0
    error: str | None = None
    draw: int = 0
    truncated: bool = False  # cut at the token cap (finish_reason "length")

    @property
    def ok(self) -> bool:
        return self.error is None


class _Failed(Exception):
    """One attempt that produced no answer; ``retry`` says whether another may help."""

    def __init__(self, message: str, retry: bool, wait: float | None = None,
                 rejected: str | None = None, setup: str | None = None):
        super().__init__(message)
        self.retry = retry
        self.wait = wait  # the server's Retry-After, if it sent one
        self.rejected = rejected  # the request field an HTTP 400 named, if one we sent
        self.setup = setup  # what an HTTP 401/403/404 says of the run's setup


@dataclass
class _Plan:
    """One ask of ``complete_many`` between its steps."""

    messages: list[dict]
    purpose: str
    start: float
    draw: int = 0
    key: str = ""
    reply: LlmReply | None = None  # from the cache or the budget, else the request's
    spent: bool = False  # the call budget answered it
    rejected: str | None = None
    setup: str | None = None


class LlmClient:
    """Chat completions for one run, per ``LlmConfig``; ``log_dir=None`` keeps no files."""

    def __init__(self, config: LlmConfig, log_dir: Path | None, *,
                 env: Mapping[str, str] = os.environ,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self._env = env
        self._sleep = sleep  # injectable so tests of backoff take no wall time
        self._clock = clock
        self._openai = None  # built on the first request that needs the network
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._draws: dict[str, int] = {}  # request digest -> draws so far (see cache_key)
        self._answers: set[str] = set()  # digests of the answer texts received
        self.transcript = Transcript(self.log_dir, config, env)
        self._unanswered = 0  # calls in a row that failed, while none has succeeded yet
        self._answered = False
        # Kernels searched at once ([run] jobs) share the client: its books (draws, counts,
        # cache, logs) change under one lock, and at most ``concurrency`` requests are in
        # flight for all of them together.
        self._books = threading.RLock()
        self._in_flight = threading.BoundedSemaphore(max(1, config.concurrency))

    def __repr__(self) -> str:
        return (f"LlmClient(model={self.config.model!r}, key from ${self.config.api_key_env}, "
                f"calls={self._counts['calls']}/{self.config.max_calls})")

    # -- the one public call -------------------------------------------------------------

    def complete(self, messages: list[dict], purpose: str) -> LlmReply:
        """Draw an answer to ``messages``: from the cache where a resumed run drew it
        already, else from the endpoint; see the module docstring."""
        return self.complete_many([(messages, purpose)])[0]

    def complete_many(self, asks: list[tuple[list[dict], str]]) -> list[LlmReply]:
        """An answer to each (messages, purpose), as ``complete`` one after another would
        give them: draws, the call budget, counters, logs and errors go in order; only the
        requests themselves run at once, up to ``[llm] concurrency`` in flight (a server
        that answers in seconds, or batches, is not fed one stream)."""
        with self._books:
            plans = [self._plan(messages, purpose) for messages, purpose in asks]
        todo = [plan for plan in plans if plan.reply is None]
        if todo:
            client = self.check()
            with concurrent.futures.ThreadPoolExecutor(
                    min(len(todo), max(1, self.config.concurrency))) as pool:
                answers = pool.map(lambda pl: self._request(client, pl.messages, pl.key,
                                                             pl.start, pl.draw), todo)
                for plan, (reply, rejected, setup) in zip(todo, answers):
                    plan.reply, plan.rejected, plan.setup = reply, rejected, setup
        with self._books:
            return [self._account(plan) for plan in plans]

    def _plan(self, messages: list[dict], purpose: str) -> _Plan:
        """The ask's draw, and its reply where the cache or the call budget gives it now."""
        plan = _Plan(messages, purpose, self._clock())
        request = request_digest(self.config, messages)
        plan.draw = self._draws.get(request, 0)
        plan.key = cache_key(self.config, messages, plan.draw)
        hit = self.transcript.answer(plan.key) if self.config.cache else None
        if hit is not None:
            self._draws[request] = plan.draw + 1
            plan.reply = LlmReply(hit["text"], hit.get("prompt_tokens", 0),
                                  hit.get("completion_tokens", 0), cached=True,
                                  seconds=self._clock() - plan.start, draw=plan.draw,
                                  truncated=bool(hit.get("truncated", False)))
        elif self._counts["calls"] >= self.config.max_calls or self._over_cost():
            spent = ("LLM call budget spent" if self._counts["calls"] >= self.config.max_calls
                     else f"LLM spend cap reached ([llm] max_cost {self.config.max_cost:g})")
            plan.reply = LlmReply("", seconds=self._clock() - plan.start, error=spent,
                                  draw=plan.draw)
            plan.spent = True
        else:
            self.check()
            self._draws[request] = plan.draw + 1
            self._counts["calls"] += 1
        return plan

    def _account(self, plan: _Plan) -> LlmReply:
        """Counters, cache, log and the errors that stop a run, for one ask, in order."""
        reply = plan.reply
        if reply.cached:
            self._counts["cached"] += 1
            self._answers.add(_digest(reply.text))
            self.transcript.log(plan.purpose, plan.messages, reply, plan.key)
            return reply
        if plan.spent:
            # Not logged: nothing was exchanged, and a loop hitting the cap would flood it.
            return reply
        self._counts["attempts"] += reply.attempts
        if reply.ok:
            self._answered = True
            self._counts["prompt_tokens"] += reply.prompt_tokens
            self._counts["completion_tokens"] += reply.completion_tokens
            self._answers.add(_digest(reply.text))
            if self.config.cache:
                self.transcript.keep(plan.key, plan.messages, reply)
        else:
            self._counts["failures"] += 1
            self._unanswered = 0 if self._answered else self._unanswered + 1
        self.transcript.log(plan.purpose, plan.messages, reply, plan.key)
        if plan.rejected is not None:
            raise LlmError(rejection(plan.rejected, reply.error))
        if plan.setup is not None:
            raise LlmError(f"the LLM endpoint refuses the run: {plan.setup} ({reply.error}; "
                           f"{self._where()}, model {self.config.model!r}): "
                           f"check [llm] base_url, model and ${self.config.api_key_env}, "
                           "or set [llm] rate = 0")
        if self._unanswered >= SETUP_FAILURES:
            raise LlmError(f"the LLM endpoint never answered: {SETUP_FAILURES} calls failed "
                           f"in a row ({reply.error}; {self._where()}, model "
                           f"{self.config.model!r}): check [llm] base_url and "
                           "that the server is up, or set [llm] rate = 0")
        return reply

    def check(self):
        """The ``openai`` client, built on first use; ``LlmError`` if it cannot be."""
        if self._openai is None:
            var = self.config.api_key_env
            secret = self._env.get(var, "")
            if not secret:
                raise LlmError(f"no API key for the LLM: set the environment variable {var} "
                               f"(named by [llm] api_key_env), or set [llm] rate = 0")
            try:
                import openai
            except ImportError:
                raise LlmError("[llm] needs the openai package: pip install openai") from None
            # max_retries=0: retries are ours, so they are counted, logged and backed off
            # reproducibly rather than hidden inside the openai client.
            self._openai = openai.OpenAI(base_url=self.config.base_url or None,
                                         api_key=secret, timeout=self.config.timeout,
                                         max_retries=0)
        return self._openai

    def _where(self) -> str:
        """The endpoint, as an error names it."""
        return self.config.base_url or "the openai default endpoint"

    def preflight(self) -> None:
        """Ask the endpoint which models it serves (``GET /models``: no tokens spent) before
        the run does any work; ``LlmError`` when it refuses the key, cannot be reached, or
        lists models without ours. An endpoint without a model list (404, 405, 501) is not
        judged here: the first call will be (``SETUP_STATUS``)."""
        import openai

        client = self.check()
        where = self._where()
        hint = "check [llm] base_url, model and the key, or set [llm] rate = 0"
        try:
            served = [m.id for m in client.models.list().data]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
            raise LlmError(f"the LLM endpoint refuses the run: HTTP {err.status_code}: "
                           f"{self.transcript.mask(_short(error_message(err)))} ({where}): {hint}") from None
        except openai.APIConnectionError as err:  # a timeout is one too
            raise LlmError(f"the LLM endpoint cannot be reached ({where}: "
                           f"{self.transcript.mask(_short(str(err.__cause__ or err)))}): {hint}") from None
        except (openai.APIStatusError, openai.APIResponseValidationError, AttributeError,
                TypeError, ValueError):
            return  # no model list here: nothing to judge before the first call
        if served and self.config.model not in served:
            listed = ", ".join(sorted(served)[:8]) + (", ..." if len(served) > 8 else "")
            raise LlmError(f"the LLM endpoint {where} does not serve model "
                           f"{self.config.model!r} (it lists {listed}): set [llm] model")

    # -- counters ------------------------------------------------------------------------

    def _cost(self) -> float:
        """The run's spend so far in the prices' unit (answered tokens; 0 without prices)."""
        c = self.config
        return (self._counts["prompt_tokens"] * c.price_in
                + self._counts["completion_tokens"] * c.price_out) / 1e6

    def _over_cost(self) -> bool:
        return self.config.max_cost > 0 and self._cost() >= self.config.max_cost

    def stats(self) -> dict:
        """Counters for the run (plain JSON); ``cost`` is None unless a price is set.

        ``unique`` counts distinct answer texts (fresh or replayed). ``state`` is what a
        resumed run needs, not a figure to show: ``draws`` (request digest -> draws so
        far), to draw the same indices again, and ``answer_digests``.
        """
        with self._books:
            out = dict(self._counts)
            c = self.config
            out["cost"] = round(self._cost(), 6) if c.price_in > 0 or c.price_out > 0 else None
            out["unique"] = len(self._answers)
            out["state"] = {"draws": dict(sorted(self._draws.items())),
                            "answer_digests": sorted(self._answers)}
            return out

    def restore_stats(self, data: Mapping) -> None:
        """Continue the counters of a resumed run (so ``max_calls`` stays per run) and its
        draw counts (so the resumed run replays the interrupted one's answers)."""
        for name in COUNTERS:
            value = data.get(name, 0)
            if _count(value):
                self._counts[name] = value
        state = data.get("state")
        state = state if isinstance(state, Mapping) else {}
        draws = state.get("draws")
        if isinstance(draws, Mapping):
            self._draws = {k: v for k, v in draws.items() if isinstance(k, str) and _count(v)}
        digests = state.get("answer_digests")
        if isinstance(digests, list):
            self._answers = {d for d in digests if isinstance(d, str)}

    # -- requests ------------------------------------------------------------------------

    def _request(self, client, messages: list[dict], key: str, start: float,
                 draw: int) -> tuple[LlmReply, str | None, str | None]:
        """Up to ``retries + 1`` attempts with jittered exponential backoff between them;
        the reply, the request field that an HTTP 400 rejected (or None), and what an
        HTTP 401/403/404 says of the setup (or None)."""
        # Seeded from the prompt so a rerun waits the same, whatever else happened.
        rng = random.Random(int(key[:16], 16))
        attempts, error, rejected, setup = 0, "", None, None
        for attempt in range(self.config.retries + 1):
            attempts += 1
            try:
                with self._in_flight:
                    text, prompt_tokens, completion_tokens, cut = self._attempt(client, messages)
            except _Failed as failed:
                error, rejected, setup = str(failed), failed.rejected, failed.setup
                if not failed.retry or attempt == self.config.retries:
                    break
                self._sleep(backoff(attempt, rng, failed.wait))
                continue
            return LlmReply(text, prompt_tokens, completion_tokens, seconds=self._clock() - start,
                            attempts=attempts, draw=draw, truncated=cut), None, None
        if attempts > 1:
            error = f"{error} (after {attempts} attempts)"
        return LlmReply("", seconds=self._clock() - start, attempts=attempts,
                        error=self.transcript.mask(error), draw=draw), rejected, setup

    def _attempt(self, client, messages: list[dict]) -> tuple[str, int, int, bool]:
        """One request: (text, prompt tokens, completion tokens, cut at the token cap), or
        ``_Failed``."""
        import openai

        c = self.config
        fields = request_fields(c)
        try:
            # Every optional field goes in the body as it is (extra_body), so that
            # fields this openai version does not know reach the endpoint too.
            response = client.chat.completions.create(model=c.model, messages=messages,
                                                      extra_body=fields or None)
        except openai.APITimeoutError:  # before APIConnectionError: it is a subclass
            raise _Failed(f"timed out after {c.timeout:g} s", retry=True) from None
        except openai.APIConnectionError as err:
            raise _Failed(f"connection error: {err.__cause__ or err}", retry=True) from None
        except openai.APIStatusError as err:
            code = err.status_code
            # 408 is the server's own timeout: as transient as ours.
            retry = code in (408, 429) or code >= 500
            message = error_message(err)
            if code == 400 and context_overflow(message):  # a long prompt: the next may fit
                raise _Failed(f"HTTP 400: {_short(message)}; {OVERFLOW_HINT}",
                              retry=False) from None
            raise _Failed(f"HTTP {code}: {_short(message)}", retry=retry,
                          wait=_retry_after(err.response),
                          rejected=rejected_field(err, message, fields) if code == 400
                          else None, setup=SETUP_STATUS.get(code)) from None
        except (ValueError, openai.APIResponseValidationError) as err:
            raise _Failed(f"malformed response: {_short(str(err))}", retry=False) from None
        except openai.OpenAIError as err:
            raise _Failed(f"{type(err).__name__}: {_short(str(err))}", retry=False) from None
        return _extract(response)


def backoff(attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (0-based): 0.5 s doubling, capped,
    times a jitter in [0.5, 1) so that clients that failed together retry apart; never
    less than the server's Retry-After (itself capped)."""
    wait = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** attempt) * (0.5 + 0.5 * rng.random())
    if retry_after is not None:
        wait = max(wait, min(BACKOFF_CAP, retry_after))
    return wait


def _extract(response) -> tuple[str, int, int, bool]:
    """Text, token counts and whether the answer was cut at the token cap (finish_reason
    "length"), from a completion; ``_Failed`` if it has no usable answer."""
    # A non-JSON content type makes the openai client hand back a plain str, and an
    # unexpected JSON shape gives an unvalidated object: check everything we touch.
    try:
        choices = getattr(response, "choices", None)
        if not choices:
            raise _Failed("malformed response: no choices", retry=False)
        text = choices[0].message.content
        cut = getattr(choices[0], "finish_reason", None) == "length"
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    except (AttributeError, IndexError, TypeError, ValueError) as err:
        raise _Failed(f"malformed response: {_short(str(err))}", retry=False) from None
    if not isinstance(text, str):
        raise _Failed("malformed response: the answer has no text content", retry=False)
    return text, prompt_tokens, completion_tokens, cut


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _retry_after(response) -> float | None:
    """The Retry-After header in seconds, if present and numeric (HTTP dates are ignored)."""
    try:
        value = float(response.headers.get("retry-after", ""))
    except (AttributeError, TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "..."
