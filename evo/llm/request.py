"""What one chat-completions request carries besides the messages, what names it (for the
draw counts and the answer cache), and how an endpoint's refusal of one of its fields reads.

``[llm]`` decides the fields (``LlmConfig``): ``temperature`` unless negative, the token
cap under the name ``max_tokens_field`` unless ``max_tokens = 0``, and ``extra`` as it is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from evo.config import LlmConfig

DIGEST_CHARS = 16  # of the sha256 that names a request (draw counts) or an answer text
#: What to set when the endpoint rejects one of the request fields [llm] controls.
FIELD_HINTS = {
    "temperature": "set [llm] temperature = -1 to send none (reasoning models accept only "
                   "their default)",
    "max_tokens": 'set [llm] max_tokens_field = "max_completion_tokens" (OpenAI reasoning '
                  "models), or max_tokens = 0 to send no limit",
    "max_completion_tokens": 'set [llm] max_tokens_field = "max_tokens", or max_tokens = 0 '
                             "to send no limit",
}


def request_fields(config: LlmConfig) -> dict:
    """The request's fields besides model and messages, as sent: temperature unless
    negative, the token cap under its configured name unless 0, and ``[llm] extra``."""
    fields: dict = {}
    if config.temperature >= 0:
        fields["temperature"] = config.temperature
    if config.max_tokens > 0:
        fields[config.max_tokens_field] = config.max_tokens
    fields.update(json.loads(json.dumps(config.extra)))  # plain dicts, not config tables
    return fields


def request_digest(config: LlmConfig, messages: list[dict]) -> str:
    """What names one request for the draw counts: model, request fields and messages."""
    return cache_key(config, messages, None)[:DIGEST_CHARS]


def cache_key(config: LlmConfig, messages: list[dict], draw: int | None = 0) -> str:
    """sha256 of what determines an answer: model, request fields, the messages and the
    draw index (the how-manieth draw of this request in the run; None: the request)."""
    what = {"model": config.model, "fields": request_fields(config), "messages": messages}
    if draw is not None:
        what["draw"] = draw
    blob = json.dumps(what, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def error_message(err) -> str:
    """The server's own message (an OpenAI-style error's ``message``), else the client's."""
    body = err.body
    if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
        return body["message"]
    return str(err.message)


_OVERFLOW = re.compile(r"context (length|window)|maximum context|too many tokens|prompt is too long",
                       re.IGNORECASE)
OVERFLOW_HINT = ("the prompt and the answer's token cap exceed the model's context: lower "
                 "[llm] max_tokens (or [llm] history_chars), or use a model with a longer context")


def context_overflow(message: str) -> bool:
    """Whether an HTTP 400 says the prompt plus the answer's cap do not fit the context
    (vLLM: "'max_tokens' is too large: 4096. This model's maximum context length is 8192
    tokens ..."): this prompt's problem, not a field the endpoint refuses."""
    return bool(_OVERFLOW.search(message))


def rejected_field(err, message: str, fields: Mapping) -> str | None:
    """The request field that an HTTP 400 names, if it is one that [llm] makes us send:
    the error's ``param`` (OpenAI), else the first such name the message mentions (vLLM,
    llama.cpp and proxies word it their own way). None for anything else, e.g. a prompt
    too long for the context (``param: messages``, or vLLM naming max_tokens in its
    context-length message: ``context_overflow``): that is this prompt's problem."""
    if context_overflow(message):
        return None
    param = getattr(err, "param", None)
    if isinstance(param, str) and param in fields:
        return param
    where = {name: m.start() for name in fields
             if (m := re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", message))}
    return min(where, key=lambda name: (where[name], name)) if where else None


def rejection(field: str, error: str) -> str:
    """The one line that says which field the endpoint rejected and what to set."""
    hint = FIELD_HINTS.get(field, f"remove {field!r} from [llm] extra")
    return f"the LLM endpoint rejected the request field {field!r} ({error}); {hint}"
