"""The OpenAI request and response formats: a JSON body checked into a `Job` (what to generate, Params), and the
objects a completion or a stream's chunks answer with. A body that cannot be served raises APIError (status, type),
which app.py answers as OpenAI does: {"error": {"message", "type", "param", "code"}} (code: the HTTP status, as
llama-server's). Fields OpenAI defines that change the answer but are not served (logprobs, echo, best_of, suffix)
are refused when set, never ignored; the penalties are checked and take no effect."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from .slots import Params

DEFAULTS = {"temperature": 0.8, "top_p": 0.95, "top_k": 40}     # llama-server's sampling defaults


class APIError(Exception):
    """An answer other than 200: `status`, OpenAI's error `type` and the message."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status, self.type, self.param = status, type, param

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.status}}


def bad(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


@dataclass
class Job:
    """A checked request: `chat` (messages) or not (prompt: str or token ids), its Params, stream flags."""

    chat: bool
    prompt: str | list | None
    messages: list | None
    params: Params
    stream: bool
    include_usage: bool
    n: int = 1                          # choices: n requests of the same prompt (seed + i for the i-th, if seeded)


def _number(body: dict, key: str, kind, default, lo=None, hi=None):
    """body[key] as `kind` (int or float; a JSON bool or string is refused), `default` when absent or null."""
    value = body.get(key)
    if value is None:
        return default
    ok = isinstance(value, int) if kind is int else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise bad(f"'{key}' must be {'an integer' if kind is int else 'a number'}, got {value!r}", key)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise bad(f"'{key}' must lie in [{lo}, {'inf' if hi is None else hi}], got {value!r}", key)
    return kind(value)


def _unserved(body: dict, chat: bool):
    """400 for a field that asks for what is not served: logprobs (chat: logprobs true or top_logprobs above 0;
    completions: any logprobs), echo, best_of above 1, a suffix."""
    asked = {"logprobs": body.get("logprobs") is True if chat else body.get("logprobs") is not None,
             "top_logprobs": bool(body.get("top_logprobs")), "echo": body.get("echo") is True,
             "best_of": body.get("best_of") not in (None, 1), "suffix": bool(body.get("suffix"))}
    key = next((k for k, v in asked.items() if v), None)
    if key is not None:
        raise bad(f"'{key}' is not served by this server (got {body[key]!r})", key)


def _stop(body: dict) -> list:
    stop = body.get("stop")
    if stop is None:
        return []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad("'stop' must be a string or a list of strings", "stop")
    return [s for s in stop if s]


def _flag(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool) and value is not None:
        raise bad(f"'{key}' must be true or false, got {value!r}", key)
    return bool(value)


MAX_CHOICES = 128                   # n at most (OpenAI's limit)
ROLES = ("system", "developer", "user", "assistant", "tool", "function")     # OpenAI's message roles


def _messages(messages) -> list:
    """Chat messages as {"role": str, "content": str}; content given as parts keeps the text parts, joined."""
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list of {\"role\", \"content\"} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}] must be an object with a string 'role'")
        if m["role"] not in ROLES:
            raise bad(f"messages[{i}].role must be one of {', '.join(ROLES)}; got {m['role']!r}", "messages")
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise bad(f"messages[{i}].content: only text parts ({{\"type\": \"text\", \"text\": ...}}) are served")
            content = "".join(p["text"] for p in content)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise bad(f"messages[{i}].content must be a string or a list of text parts")
        out.append({"role": m["role"], "content": content})
    return out


def _prompt(prompt):
    """A completion's prompt: a string, token ids, or a list of one of those (one prompt per request)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    if prompt is None:
        raise bad("'prompt' is required", "prompt")
    raise bad("'prompt' must be a string or a non-empty list of token ids (one prompt per request)", "prompt")


def parse(body, chat: bool) -> Job:
    """The Job of a /v1/completions (chat False) or /v1/chat/completions body; APIError 400 for what is wrong."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    if chat and "messages" not in body:
        raise bad("'messages' is required", "messages")
    n = _number(body, "n", int, 1, 1, MAX_CHOICES)
    _unserved(body, chat)
    for key in ("presence_penalty", "frequency_penalty"):
        _number(body, key, float, 0.0, -2, 2)
    seed = _number(body, "seed", int, None)
    key = "max_completion_tokens" if chat and body.get("max_tokens") is None else "max_tokens"
    max_tokens = _number(body, key, int, None if chat else 16, lo=0)
    params = Params(max_tokens=max_tokens, temperature=_number(body, "temperature", float, DEFAULTS["temperature"], 0, 2),
                    top_p=_number(body, "top_p", float, DEFAULTS["top_p"], 0, 1),
                    top_k=_number(body, "top_k", int, DEFAULTS["top_k"], 0),
                    seed=None if seed is None else seed % 2**64,        # any integer, as OpenAI's
                    stop=_stop(body), ignore_eos=_flag(body, "ignore_eos"))
    if params.top_p == 0:
        raise bad("'top_p' must be above 0", "top_p")
    options, stream = body.get("stream_options"), _flag(body, "stream")
    if options is not None and not isinstance(options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    if options is not None and not stream:
        raise bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
    return Job(chat, None if chat else _prompt(body.get("prompt")), _messages(body["messages"]) if chat else None,
               params, stream, bool((options or {}).get("include_usage")), n)


class Reply:
    """The response objects of one request: the whole completion, or a stream's chunks (same id and time)."""

    def __init__(self, chat: bool, model: str, include_usage: bool = False):
        self.chat, self.model, self.created, self.include_usage = chat, model, int(time.time()), include_usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.object = "chat.completion" if chat else "text_completion"
        self.chunk_object = "chat.completion.chunk" if chat else "text_completion"     # a stream's chunks'

    def _wrap(self, obj: str, choices: list, usage: dict | None = None) -> dict:
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    @staticmethod
    def usage(usages: list) -> dict:
        """The usage of a request's choices (the engine's usage of each): the prompt once, every choice's tokens."""
        prompt, completion = usages[0]["prompt_tokens"], sum(u["completion_tokens"] for u in usages)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def whole(self, choices: list, usages: list) -> dict:
        """The completion of choices [(text, finish_reason)] (index i the i-th), their usages summed."""
        out = []
        for i, (text, finish_reason) in enumerate(choices):
            choice = {"index": i, "logprobs": None, "finish_reason": finish_reason}
            choice.update({"message": {"role": "assistant", "content": text}} if self.chat else {"text": text})
            out.append(choice)
        return self._wrap(self.object, out, self.usage(usages))

    def chunk(self, text: str | None = None, finish_reason: str | None = None, first: bool = False,
              index: int = 0) -> dict:
        """A stream's chunk of choice `index`: a text delta, or its last one (finish_reason); a chat stream's first
        names the role."""
        choice = {"index": index, "logprobs": None, "finish_reason": finish_reason}
        if self.chat:
            delta = {"role": "assistant", "content": ""} if first else {} if text is None else {"content": text}
            choice["delta"] = delta
        else:
            choice["text"] = text or ""
        out = self._wrap(self.chunk_object, [choice])
        return {**out, "usage": None} if self.include_usage else out     # a usage chunk comes last

    def usage_chunk(self, usages: list) -> dict:
        """stream_options.include_usage: a last chunk with no choices and the usage of the choices (`usages`)."""
        return self._wrap(self.chunk_object, [], self.usage(usages))
