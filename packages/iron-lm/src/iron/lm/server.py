"""An OpenAI-compatible HTTP server for one model: `/v1/models`,
`/v1/completions` and `/v1/chat/completions` (with `"stream": true` as
server-sent events), on starlette and uvicorn.

The model is loaded once. Requests are checked and tokenized as they come
(a bad one is answered 4xx at once, in OpenAI's error shape) and then run
one at a time, in arrival order, by a single worker thread that owns the
model: the device runs one sequence, and its caches hold one. While one
runs, up to `queue` more may wait; the next is answered 503 with
Retry-After. A streaming client that goes away cancels its request before
its next token.
"""

from __future__ import annotations

import asyncio
import json
import queue as queues
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from iron.lm.chat import ChatTemplateError
from iron.lm.generation import Completion, complete
from iron.lm.model import GraphModel
from iron.lm.sampling import Sampler

#: how long an interrupted server lets open answers finish (a cancelled
#: generation stops within a token)
SHUTDOWN_SECONDS = 5
#: stop strings a request may give (OpenAI's limit)
MAX_STOPS = 4
#: completion tokens when a /v1/completions request names none (OpenAI's default)
COMPLETIONS_DEFAULT_TOKENS = 16
#: parameters that would change the answer in ways this server does not
#: implement: refused unless absent or at the value that means "off"
_UNSUPPORTED = {
    "n": (None, 1),
    "best_of": (None, 1),
    "echo": (None, False),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "functions": (None, []),
    "suffix": (None, ""),
}


class ApiError(Exception):
    """A request answered with an error, in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status, headers=self.headers)


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param, code)


@dataclass(eq=False)  # one job is one request: hashed by identity
class Job:
    """One request as the worker runs it. `post(event)` hands an event to
    the request's handler from the worker thread: ("text", piece),
    ("done", Completion) or ("error", message)."""

    ids: list[int]
    max_tokens: int
    sampler: Sampler
    stop_strings: list[str]
    post: Callable[[tuple[str, Any]], None]
    cancelled: threading.Event = field(default_factory=threading.Event)


class Engine:
    """The model and the one thread that runs it. `submit` refuses (raising
    ApiError 503) a job when `queue` jobs already wait behind a running one."""

    def __init__(self, model: GraphModel, queue: int):
        if isinstance(queue, bool) or not isinstance(queue, int) or queue < 0:
            raise ValueError(f"serve: queue={queue!r} must be an integer >= 0")
        self.model, self.limit = model, queue
        self._jobs: queues.SimpleQueue[Job | None] = queues.SimpleQueue()
        self._lock = threading.Lock()
        self._admitted: set[Job] = set()  # waiting or running
        self._thread = threading.Thread(target=self._work, name="iron-lm-model", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._lock:
            if len(self._admitted) > self.limit:
                raise ApiError(
                    503,
                    f"the model is busy: one request runs and {self.limit} wait; retry shortly",
                    code="busy",
                    headers={"Retry-After": "1"},
                )
            self._admitted.add(job)
        self._jobs.put(job)

    def close(self) -> None:
        """Cancel what runs and waits (each stops before its next token), and
        end the worker."""
        with self._lock:
            for job in self._admitted:
                job.cancelled.set()
        self._jobs.put(None)
        self._thread.join()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                if not job.cancelled.is_set():
                    job.post(("done", self._run(job)))
            except Exception as error:  # the request fails; the server goes on
                job.post(("error", f"{type(error).__name__}: {error}"))
            finally:
                with self._lock:
                    self._admitted.discard(job)

    def _run(self, job: Job) -> Completion:
        model = self.model
        return complete(
            model,
            model.tokenizer,
            job.ids,
            job.max_tokens,
            job.sampler,
            stop_tokens=model.eos_token_ids,
            stop_strings=job.stop_strings,
            on_text=lambda piece: job.post(("text", piece)),
            cancelled=job.cancelled.is_set,
            source=model.source,
        )


# ---- reading a request ----


def _number(body: dict, name: str, default, low: float, high: float, low_open=False):
    value = body.get(name)
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (low < value if low_open else low <= value) or value > high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise _bad(f"{name}={value!r}: must be a number in {interval}", name)
    return float(value)


def _integer(body: dict, name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _bad(f"{name}={value!r}: must be an integer >= {low}", name)
    return value


@dataclass(frozen=True)
class RequestOptions:
    """What a request asks beyond its prompt."""

    max_tokens: int | None
    sampler: Sampler
    stop: list[str]
    stream: bool
    include_usage: bool


def _options(body: dict, engine: Engine, served: str) -> RequestOptions:
    model = body.get("model")
    if not isinstance(model, str):
        raise _bad("model: required, the name /v1/models lists", "model")
    if model != served:
        raise ApiError(
            404, f"the model {model!r} does not exist here; this server has {served!r}",
            "model", "model_not_found",
        )  # fmt: skip
    for name, allowed in _UNSUPPORTED.items():
        if name in body and body[name] not in allowed:
            raise _bad(f"{name}={body[name]!r}: not supported by this server", name)
    defaults = engine.model.generation_config  # the checkpoint's, else OpenAI's
    if defaults.do_sample is False:
        default_temperature = 0.0
    else:
        default_temperature = 1.0 if defaults.temperature is None else defaults.temperature
    temperature = _number(body, "temperature", default_temperature, 0, 2)
    top_p = _number(body, "top_p", defaults.top_p or 1.0, 0, 1, low_open=True)
    top_k = body.get("top_k", defaults.top_k)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
        raise _bad(f"top_k={top_k!r}: must be an integer (0 or less: no limit)", "top_k")
    seed = _integer(body, "seed", 0)
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOPS
        or not all(isinstance(s, str) and s for s in stop)
    ):
        raise _bad(
            f"stop={body.get('stop')!r}: a string or a list of up to {MAX_STOPS} non-empty strings",
            "stop",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad(f"stream={stream!r}: must be true or false", "stream")
    stream_options = body.get("stream_options") or {}
    usage = stream_options.get("include_usage", False) if isinstance(stream_options, dict) else None
    if not isinstance(usage, bool):
        raise _bad(
            f"stream_options={stream_options!r}: an object with include_usage true or false",
            "stream_options",
        )
    max_tokens = _integer(body, "max_completion_tokens", 1)
    max_tokens = _integer(body, "max_tokens", 1) if max_tokens is None else max_tokens
    return RequestOptions(
        max_tokens,
        Sampler(temperature, top_k if top_k and top_k > 0 else None, seed, top_p),
        stop,
        stream,
        usage,
    )


def _prompt_ids(body: dict, engine: Engine) -> list[int]:
    """/v1/completions' prompt: text, a list holding one text, or token ids."""
    prompt = body.get("prompt")
    tokenizer = engine.model.tokenizer
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.prompt(prompt)
    vocab = engine.model.config.vocab_size
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in prompt)
    ):
        return list(prompt)
    raise _bad(
        "prompt: required, a string (one prompt per request) or a list of token ids "
        f"in [0, {vocab})",
        "prompt",
    )


def _chat_ids(body: dict, engine: Engine) -> list[int]:
    try:
        return engine.model.tokenizer.chat_prompt(body.get("messages"))
    except ChatTemplateError as error:
        raise _bad(str(error), "messages") from None


def _budget(
    ids: list[int], options: RequestOptions, engine: Engine, default: int | None, prompt_param: str
) -> int:
    """The completion's token budget (`default` when the request names none;
    None: the rest of the context). A request that cannot fit is 400."""
    context = engine.model.max_seq_len
    room = context - len(ids)
    wanted = options.max_tokens if options.max_tokens is not None else default
    if room < 1 or (wanted is not None and wanted > room):
        asked = wanted or 1
        raise _bad(
            f"this model's context holds {context} tokens; the request needs "
            f"{len(ids) + asked} ({len(ids)} in the prompt, {asked} to generate)",
            prompt_param if room < 1 or options.max_tokens is None else "max_tokens",
            "context_length_exceeded",
        )
    return room if wanted is None else wanted


# ---- answering ----


class _Answer:
    """The shape of one endpoint's answers: a chat's messages and deltas, or
    a completion's text."""

    def __init__(self, chat: bool, model: str):
        self.chat, self.model = chat, model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _envelope(self, chunk: bool) -> dict:
        kind = "chat.completion" if self.chat else "text_completion"
        return {
            "id": self.id,
            "object": kind + (".chunk" if chunk and self.chat else ""),
            "created": self.created,
            "model": self.model,
        }

    def whole(self, done: Completion, prompt_tokens: int) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": done.text}}
        else:
            choice = {"index": 0, "text": done.text, "logprobs": None}
        choice["finish_reason"] = done.finish_reason
        return {**self._envelope(False), "choices": [choice], "usage": _usage(done, prompt_tokens)}

    def chunk(self, text: str | None = None, finish: str | None = None, role=False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None}
        choice["finish_reason"] = finish
        return {**self._envelope(True), "choices": [choice]}

    def usage_chunk(self, done: Completion, prompt_tokens: int) -> dict:
        return {**self._envelope(True), "choices": [], "usage": _usage(done, prompt_tokens)}


def _usage(done: Completion, prompt_tokens: int) -> dict:
    completion_tokens = len(done.tokens)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _event(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


async def _run(
    engine: Engine, answer: _Answer, ids: list[int], options: RequestOptions, budget: int
):
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    job = Job(
        ids, budget, options.sampler, options.stop,
        post=lambda event: loop.call_soon_threadsafe(events.put_nowait, event),
    )  # fmt: skip
    engine.submit(job)
    if not options.stream:
        try:
            while (event := await events.get())[0] == "text":
                pass
        finally:
            job.cancelled.set()  # a handler that ends early (its client left) stops the work
        kind, payload = event
        if kind == "error":
            raise ApiError(500, f"generation failed: {payload}", code="generation_failed")
        return JSONResponse(answer.whole(payload, len(ids)))

    async def stream() -> AsyncIterator[str]:
        try:
            if answer.chat:
                yield _event(answer.chunk(role=True))
            while True:
                kind, payload = await events.get()
                if kind == "text":
                    yield _event(answer.chunk(payload))
                elif kind == "error":
                    yield _event({"error": {"message": f"generation failed: {payload}",
                                            "type": "server_error", "param": None,
                                            "code": "generation_failed"}})  # fmt: skip
                    return
                else:
                    yield _event(answer.chunk(finish=payload.finish_reason))
                    if options.include_usage:
                        yield _event(answer.usage_chunk(payload, len(ids)))
                    yield _event("[DONE]")
                    return
        finally:
            job.cancelled.set()  # the client went away (or the answer is complete)

    return StreamingResponse(stream(), media_type="text/event-stream")


async def _body(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _bad(f"the request body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise _bad(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def build_app(engine: Engine, served: str) -> Starlette:
    """The ASGI application serving `engine`'s model under the name `served`."""

    async def models(request: Request) -> Response:
        card = {"id": served, "object": "model", "created": 0, "owned_by": "iron"}
        return JSONResponse({"object": "list", "data": [card]})

    async def completions(request: Request) -> Response:
        body = await _body(request)
        options = _options(body, engine, served)
        ids = _prompt_ids(body, engine)
        budget = _budget(ids, options, engine, COMPLETIONS_DEFAULT_TOKENS, "prompt")
        return await _run(engine, _Answer(False, served), ids, options, budget)

    async def chat_completions(request: Request) -> Response:
        body = await _body(request)
        options = _options(body, engine, served)
        ids = _chat_ids(body, engine)
        budget = _budget(ids, options, engine, None, "messages")
        return await _run(engine, _Answer(True, served), ids, options, budget)

    async def api_error(request: Request, error: ApiError) -> Response:
        return error.response()

    async def http_error(request: Request, error: HTTPException) -> Response:
        return ApiError(error.status_code, str(error.detail)).response()

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ],
        exception_handlers={ApiError: api_error, HTTPException: http_error},
    )


def serve(
    model: GraphModel,
    name: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    queue: int = 8,
    ready: Callable[[str], object] | None = None,
) -> None:
    """Serve `model` as `name` on host:port until interrupted; `ready(url)`
    is called once the socket listens (port 0 picks a free one)."""
    import uvicorn  # the server's own stack, imported only to serve

    engine = Engine(model, queue)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.create_server((host, port), family=family) as sock:
            bound = sock.getsockname()[1]
            config = uvicorn.Config(
                build_app(engine, name),
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=SHUTDOWN_SECONDS,
            )
            if ready is not None:
                ready(
                    f"http://{'[' + host + ']' if family == socket.AF_INET6 else host}:{bound}/v1"
                )
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        engine.close()
