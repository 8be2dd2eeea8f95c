"""A real OpenAI-compatible chat-completions server on 127.0.0.1, answering from a script.

Tests drive the real ``openai`` client against it, so retries, timeouts and parsing are
exercised over actual HTTP rather than through mocks. The server answers
``POST /v1/chat/completions`` with one scripted response per request, in order:

* ``text(content)``: a well-formed ``chat.completion`` with ``usage``;
* ``status(code, body, headers)``: any status and body (429 with ``Retry-After``, 500...);
* ``malformed()``: HTTP 200 whose body is not JSON;
* ``hang(seconds)``: sleep (past the client's timeout), then answer like ``text``;

and with ``default`` (a ``text`` answer) once the script runs out. Every request is
recorded (parsed JSON body and headers) in ``server.requests``.

``server.answer`` (a function of the request's JSON body -> a response), where set, answers
in place of the script: an answer that depends on the prompt alone, whatever the order in
which requests arrive.

``server.reject`` (field name -> message) makes it behave like a reasoning-model
endpoint: a request whose body carries one of those fields gets HTTP 400 with an
OpenAI-style error naming it (``param``), before and without using the script.

Use the ``llm_server`` fixture (``from llm_server import llm_server``) or ``LlmServer``
as a context manager. Handler threads are daemons, and a hang ends early at shutdown, so
a test never waits on the server.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

import pytest

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


@dataclass(frozen=True)
class Response:
    """One scripted answer; build it with the helpers below."""

    kind: str  # "text", "status", "malformed" or "hang"
    content: str = ""
    code: int = 200
    body: str = ""
    headers: dict = field(default_factory=dict)
    seconds: float = 0.0
    usage: dict = field(default_factory=lambda: dict(USAGE))
    finish_reason: str = "stop"  # "length": the answer was cut at the token cap


def text(content: str, usage: dict | None = None) -> Response:
    return Response("text", content=content, usage=dict(usage or USAGE))


def status(code: int, body: str | dict = "", headers: dict | None = None) -> Response:
    if isinstance(body, dict):
        body = json.dumps(body)
    return Response("status", code=code, body=body, headers=dict(headers or {}))


def malformed() -> Response:
    return Response("malformed", body='{"id": "broken", "choices": [')


def hang(seconds: float, content: str = "late") -> Response:
    return Response("hang", seconds=seconds, content=content)


@dataclass
class Request:
    """What the server received: the parsed JSON body (None if unparsable) and headers."""

    path: str
    body: dict | None
    headers: dict  # lower-cased names


class LlmServer:
    """The scripted server; ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, default: Response | None = None):
        self.default = default or text("default answer")
        self.reject: dict[str, str] = {}  # field -> error message: answered with HTTP 400
        self.answer = None  # body -> Response: answers by the prompt instead of the script
        # GET /v1/models: None answers 501 (a server without a model list), a Response
        # is sent as it is, a list of ids is the list served
        self.models: list[str] | Response | None = None
        self.requests: list[Request] = []
        self._script: list[Response] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def script(self, responses: list[Response]) -> None:
        """Replace the queue of answers; the next requests get them in order."""
        with self._lock:
            self._script = list(responses)

    def _next(self, request: Request) -> Response:
        with self._lock:
            self.requests.append(request)
            for name, message in self.reject.items():
                if name in (request.body or {}):
                    return status(400, {"error": {
                        "message": message, "type": "invalid_request_error", "param": name,
                        "code": "unsupported_parameter"}})
            if self.answer is not None:
                return self.answer(request.body or {})
            return self._script.pop(0) if self._script else self.default

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes any hang() so its thread ends now
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True  # a hung handler never holds up interpreter exit

    def handle_error(self, request, client_address):
        pass  # a client that timed out and hung up is part of the tests, not an error


def completion(content: str, model: str, usage: dict, finish_reason: str = "stop") -> dict:
    """A chat.completion object as the OpenAI API returns it."""
    return {
        "id": f"chatcmpl-test{int(time.time() * 1000)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage,
    }


def _handler_for(server: LlmServer):
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 because the openai client keeps connections alive; every answer
        # therefore carries a Content-Length.
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # the model list, where the test gives one
            models = server.models
            if self.path.rstrip("/") != "/v1/models" or models is None:
                return self._send(501, json.dumps({"error": {"message": "unsupported"}}))
            if isinstance(models, Response):
                return self._send(models.code, json.dumps(models.body)
                                  if isinstance(models.body, dict) else models.body)
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in models]}))

        def do_POST(self):  # the name http.server dispatches POST to
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            request = Request(self.path, body, {k.lower(): v for k, v in self.headers.items()})
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, json.dumps({"error": {"message": "not found"}}))
            reply = server._next(request)
            model = (body or {}).get("model", "test-model")
            if reply.kind == "hang" and server._stopping.wait(reply.seconds):
                self.close_connection = True
                return
            if reply.kind in ("text", "hang"):
                self._send(200, json.dumps(completion(reply.content, model, reply.usage,
                                                          reply.finish_reason)))
            elif reply.kind == "malformed":
                self._send(200, reply.body)
            else:
                self._send(reply.code, reply.body, reply.headers)

        def _send(self, code: int, body: str, headers: dict | None = None):
            data = body.encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, str(value))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (timeout) and closed the socket: expected

        def log_message(self, *args):
            pass  # keep pytest output clean

    return Handler


@pytest.fixture
def llm_server():
    """A started ``LlmServer``, stopped at teardown."""
    with LlmServer() as server:
        yield server
