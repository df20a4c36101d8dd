"""The HTTP side of ggpy-server (FastAPI): OpenAI's /v1/completions, /v1/chat/completions (whole or streamed as
server-sent events ending with `data: [DONE]`) and /v1/models, llama-server's /health, /tokenize, /detokenize and
/metrics, in front of an Engine (engine.py).

Every answer but 200 is an OpenAI error body {"error": {"message", "type", "code"}}; with an API key, every path but
/health needs `Authorization: Bearer KEY` (401); every path but /health answers 503 while the model loads. The
engine's events come from its thread into the request's asyncio queue; a client that goes away mid-request (stream
or not) cancels its request, which frees its slot within a step."""
from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException

from ggpy.models.llama.chat import ChatTemplateError

from .engine import Engine, QueueFull
from .metrics import Metrics
from .openai_api import APIError, Job, Reply, bad, parse

MAX_BODY = 16 << 20         # bytes of a request body
POLL_S = 0.25               # how often a request not streamed looks for its client having gone


def error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


class Guard:
    """ASGI middleware: the API key, 503 while loading, and each answer's status counted in Metrics."""

    def __init__(self, app, engine: Engine, api_key: str | None, metrics: Metrics):
        self.app, self.engine, self.metrics = app, engine, metrics
        self.key = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counted(message):
            if message["type"] == "http.response.start":
                self.metrics.answered(message["status"])
            await send(message)

        if scope["path"] != "/health":
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if self.key and not hmac.compare_digest(auth, self.key):
                return await error(APIError(401, "a valid API key is needed: Authorization: Bearer KEY",
                                            "authentication_error"))(scope, receive, counted)
            if not self.engine.ready:
                return await error(APIError(503, "the model is loading", "unavailable_error"))(scope, receive, counted)
        await self.app(scope, receive, counted)


async def json_body(request: Request):
    """The request's JSON body (at most MAX_BODY bytes); APIError 400 / 413 when it is not that."""
    data = bytearray()
    async for block in request.stream():
        data += block
        if len(data) > MAX_BODY:
            raise APIError(413, f"the request body is over {MAX_BODY} bytes")
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad(f"the request body is not valid JSON: {e}") from None


class Pipe:
    """on_event for the engine: its events, as (index, event), into an asyncio queue of the server's loop
    (thread-safe); the pipes of one request's choices share one queue, each with its choice's index."""

    def __init__(self, queue: asyncio.Queue, index: int = 0):
        self.loop, self.queue, self.index = asyncio.get_running_loop(), queue, index

    def __call__(self, event):
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (self.index, event))
        except RuntimeError:        # the loop has closed: the server is stopping
            pass


class Handles(list):
    """The engine handles of one request's choices."""

    def cancel(self):
        for h in self:
            h.cancel()          # a no-op once finished


def sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class EventStream(StreamingResponse):
    """A streamed answer that cancels its request when it ends, however it ends (the client gone included)."""

    def __init__(self, chunks, handle):
        super().__init__(chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.handle = handle

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.handle.cancel()        # a no-op once finished


class Server:
    """The routes' work, on one Engine."""

    def __init__(self, engine: Engine, model_name: str):
        self.engine, self.model_name = engine, model_name

    def tokens(self, job: Job) -> list:
        tok = self.engine.tokenizer
        if not job.chat:
            return tok.encode(job.prompt) if isinstance(job.prompt, str) else job.prompt
        try:
            text = self.engine.chat(job.messages)
        except ChatTemplateError as e:
            raise bad(str(e)) from None
        bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
        return tok.encode(text, add_special=not (bos and text.startswith(bos)))   # no second BOS

    def submit(self, job: Job):
        """(handles, queue) of the job's n choices queued in the engine (the i-th seeded seed + i when seeded), their
        events as (i, event) in one queue; APIError 400 (its prompt) or 503 (the queue is full: none queued)."""
        tokens, queue, handles = self.tokens(job), asyncio.Queue(), Handles()
        seed = job.params.seed
        try:
            for i in range(job.n):
                params = job.params if seed is None else dataclasses.replace(job.params, seed=(seed + i) % 2**64)
                handles.append(self.engine.submit(tokens, params, Pipe(queue, i)))
        except QueueFull as e:
            handles.cancel()
            raise APIError(503, f"the server is busy: {e}", "unavailable_error") from None
        except ValueError as e:
            handles.cancel()
            raise bad(str(e)) from None
        return handles, queue

    async def complete(self, request: Request, chat: bool):
        job = parse(await json_body(request), chat)
        handles, queue = self.submit(job)
        reply = Reply(chat, self.model_name, job.include_usage)
        if job.stream:
            return EventStream(self.stream(queue, job.n, reply), handles)
        texts, ends = [[] for _ in range(job.n)], [None] * job.n
        try:
            while None in ends:
                try:
                    i, event = await asyncio.wait_for(queue.get(), POLL_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return PlainTextResponse("", status_code=499)   # nobody reads it
                    continue
                texts[i].append(event.text)
                if event.finish_reason is not None:
                    ends[i] = event
        finally:
            handles.cancel()
        failed = next((e for e in ends if e.finish_reason == "error"), None)
        if failed is not None:
            raise APIError(500, f"generation failed: {failed.message}", "server_error")
        return JSONResponse(reply.whole([("".join(t), e.finish_reason) for t, e in zip(texts, ends)],
                                        [e.usage for e in ends]))

    @staticmethod
    async def stream(queue: asyncio.Queue, n: int, reply: Reply):
        """The SSE chunks of a streamed request of n choices (their chunks interleaved as they come)."""
        if reply.chat:
            for i in range(n):
                yield sse(reply.chunk(first=True, index=i))
        ends = [None] * n
        while None in ends:
            i, event = await queue.get()
            if event.finish_reason is None:
                if event.text:
                    yield sse(reply.chunk(event.text, index=i))
                continue
            ends[i] = event
            if event.finish_reason == "error":
                yield sse(APIError(500, f"generation failed: {event.message}", "server_error").body())
                break
            yield sse(reply.chunk(finish_reason=event.finish_reason, index=i))
        else:
            if reply.include_usage:
                yield sse(reply.usage_chunk([e.usage for e in ends]))
        yield "data: [DONE]\n\n"

    def tokenize(self, body) -> dict:
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise bad("/tokenize needs {\"content\": string}")
        add_special = body.get("add_special", False)
        if not isinstance(add_special, bool):
            raise bad("'add_special' must be true or false")
        return {"tokens": self.engine.tokenizer.encode(body["content"], add_special=add_special)}

    def detokenize(self, body) -> dict:
        tokens = body.get("tokens") if isinstance(body, dict) else None
        n = self.engine.tokenizer.n_vocab
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n
                                                   for t in tokens):
            raise bad(f"/detokenize needs {{\"tokens\": [token ids in [0, {n})]}}")
        return {"content": self.engine.tokenizer.decode(tokens)}

    def models(self) -> dict:
        e = self.engine
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "ggpy",
                                            "meta": {"n_ctx": e.n_ctx, "n_ctx_slot": e.n_ctx_slot,
                                                     "n_parallel": e.n_parallel, "n_vocab": e.tokenizer.n_vocab}}]}


def create_app(engine: Engine, api_key: str | None = None, model_name: str | None = None, on_load_error=None):
    """The ASGI app serving `engine`. Started, it loads the engine in a thread unless it is ready (a failure goes to
    `on_load_error(exception)`, else re-raised there); stopped, it stops the engine."""
    server, metrics = Server(engine, model_name or engine.model_name), Metrics()

    async def lifespan(app):
        if not engine.ready:
            threading.Thread(target=_load, args=(engine, on_load_error), name="ggpy-load", daemon=True).start()
        yield
        if engine.ready:
            await asyncio.to_thread(engine.stop)

    app = FastAPI(title="ggpy-server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(APIError, lambda request, e: error(e))
    app.add_exception_handler(HTTPException, lambda request, e: error(APIError(
        e.status_code, f"{request.method} {request.url.path}: {e.detail}",
        "not_found_error" if e.status_code == 404 else "invalid_request_error")))
    app.add_exception_handler(Exception, lambda request, e: error(APIError(
        500, f"internal error: {type(e).__name__}", "server_error")))

    @app.get("/health")
    async def health():
        if not engine.ready:
            return error(APIError(503, "the model is loading", "unavailable_error"))
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return server.models()

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        entry = server.models()["data"][0]
        if model_id != entry["id"]:
            raise APIError(404, f"the model '{model_id}' does not exist; this server serves '{entry['id']}'",
                           "not_found_error", "model")
        return entry

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await server.complete(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await server.complete(request, chat=True)

    @app.post("/tokenize")
    async def tokenize(request: Request):
        return server.tokenize(await json_body(request))

    @app.post("/detokenize")
    async def detokenize(request: Request):
        return server.detokenize(await json_body(request))

    @app.get("/metrics")
    async def prometheus():
        return PlainTextResponse(metrics.text(engine.stats(), engine.n_parallel),
                                 media_type="text/plain; version=0.0.4")

    return Guard(app, engine, api_key, metrics)


def _load(engine: Engine, on_load_error):
    try:
        engine.start()
    except Exception as e:  # noqa: BLE001 - any failure to load is the server's end, told by on_load_error
        if on_load_error is None:
            raise
        on_load_error(e)
