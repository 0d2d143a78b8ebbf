"""The HTTP API: OpenAI-compatible chat completions (JSON and SSE streaming), models, health.

Bad input is a 4xx in OpenAI's error shape; the server keeps serving everyone else.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from scheduler.contracts import SamplingParams
from vision.errors import MediaError
from vision.pdf import is_pdf, render_pdf
from vlm_server import __version__
from vlm_server.async_engine import AsyncEngine, TokenEvent
from vlm_server.metrics import ServerMetrics
from vlm_server.multipart import (
    OCR_TASKS,
    MultipartError,
    chat_body_from_form,
    generate_body_from_form,
    read_files,
)


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def error_response(status: int, message: str, kind: str, param: str | None = None):
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


def sampling_from_body(body: dict[str, Any]) -> SamplingParams:
    """OpenAI sampling fields plus ``top_k``, ``min_p``, ``repetition_penalty``, ``seed``."""
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
    try:
        return SamplingParams(
            max_tokens=int(max_tokens),
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            top_k=int(body.get("top_k") or 0),
            min_p=float(body.get("min_p") or 0.0),
            presence_penalty=float(body.get("presence_penalty") or 0.0),
            frequency_penalty=float(body.get("frequency_penalty") or 0.0),
            repetition_penalty=float(body.get("repetition_penalty") or 1.0),
            seed=body.get("seed"),
            stop=tuple(stop),
            logprobs=body.get("top_logprobs") if body.get("logprobs") else None,
        )
    except (TypeError, ValueError) as e:
        raise APIError(400, f"invalid sampling parameters: {e}", "invalid_request_error") from None


@dataclass(frozen=True)
class ServerConfig:
    """HTTP-side limits.

    Attributes:
        api_key: required ``Authorization: Bearer`` key (None: no authentication).
        max_queued_requests: requests in flight before new ones get 429.
        max_request_bytes: largest request body (413 above).
    """

    api_key: str | None = None
    max_queued_requests: int = 256
    max_request_bytes: int = 64 * 1024 * 1024


def create_app(engine: AsyncEngine, model_name: str, config: ServerConfig | None = None) -> FastAPI:
    config = config or ServerConfig()
    app = FastAPI(title="vlm-serve", version=__version__)
    metrics = ServerMetrics()
    in_flight = {"count": 0}
    public = {"/health", "/version", "/metrics"}

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        if config.api_key and request.url.path not in public:
            expected = f"Bearer {config.api_key}"
            if request.headers.get("authorization") != expected:
                return error_response(
                    401,
                    "missing or wrong API key (Authorization: Bearer ...)",
                    "authentication_error",
                )
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > config.max_request_bytes:
            return error_response(
                413,
                f"request body of {length} bytes is above --max-request-bytes "
                f"{config.max_request_bytes}",
                "request_too_large",
            )
        return await call_next(request)

    @app.get("/metrics")
    async def prometheus():
        return PlainTextResponse(
            metrics.render(engine.engine), media_type="text/plain; version=0.0.4"
        )

    @app.exception_handler(APIError)
    async def _api_error(_: Request, error: APIError):
        return error_response(error.status, error.message, error.kind, error.param)

    @app.exception_handler(MediaError)
    async def _media_error(_: Request, error: MediaError):
        return error_response(error.status_code, error.message, error.code, error.param)

    @app.get("/health")
    async def health():
        if not engine.alive:
            return error_response(503, f"engine loop stopped: {engine.error}", "server_error")
        return {"status": "ok"}

    @app.get("/version")
    async def version():
        return {"version": __version__}

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "owned_by": "vlm-serve"}],
        }

    async def parse_body(request: Request) -> dict[str, Any]:
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            form = await request.form()
            try:
                return chat_body_from_form(form, await read_files(form))
            except MultipartError as e:
                raise APIError(400, str(e), "invalid_request_error") from None
        try:
            return await request.json()
        except json.JSONDecodeError:
            raise APIError(
                400, "the request body is not valid JSON", "invalid_request_error"
            ) from None

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await complete(await parse_body(request))

    @app.post("/v1/generate")
    async def generate(request: Request):
        """Multipart: ``prompt``, repeated ``image``/``video`` files, sampling fields."""
        form = await request.form()
        try:
            body = generate_body_from_form(form, await read_files(form))
        except MultipartError as e:
            raise APIError(400, str(e), "invalid_request_error") from None
        return await complete(body)

    @app.post("/v1/ocr")
    async def ocr(request: Request):
        """One result per page image (``page`` file parts); ``task`` ocr/table/formula/chart."""
        form = await request.form()
        files = await read_files(form)
        task = str(form.get("task") or "ocr")
        if task not in OCR_TASKS:
            raise APIError(
                400, f"task must be one of {', '.join(OCR_TASKS)}", "invalid_request_error", "task"
            )
        uploads = files.get("page") or files.get("image") or []
        pages = []
        for upload in uploads:  # a PDF contributes one image per page
            pages.extend(render_pdf(upload) if is_pdf(upload) else [upload])
        if not pages:
            raise APIError(400, "send pages as 'page' file parts", "invalid_request_error", "page")
        max_tokens = int(form.get("max_tokens") or 512)
        results = []
        for index, page in enumerate(pages):
            content = [
                {"type": "image_url", "image_url": {"url": page}},
                {"type": "text", "text": OCR_TASKS[task]},
            ]
            body = {
                "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens,
                "temperature": 0.0,
            }
            reply = await complete(body)
            results.append({"page": index, "text": reply["choices"][0]["message"]["content"]})
        return {"task": task, "pages": results}

    async def complete(body: dict[str, Any]):
        if body.get("model") not in (None, model_name):
            raise APIError(
                404, f"model {body.get('model')!r} not found", "not_found_error", "model"
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise APIError(
                400, "messages must be a non-empty list", "invalid_request_error", "messages"
            )
        params = sampling_from_body(body)
        if in_flight["count"] >= config.max_queued_requests:
            raise APIError(429, "too many requests in flight: retry later", "rate_limit_error")
        started = time.monotonic()
        token_ids, mm = await engine.prepare(messages)
        with metrics.lock:
            metrics.preprocess.observe(time.monotonic() - started)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

            async def tracked_stream():
                in_flight["count"] += 1
                try:
                    async for piece in _stream(
                        engine,
                        token_ids,
                        mm,
                        params,
                        rid,
                        created,
                        model_name,
                        include_usage,
                        metrics,
                        started,
                    ):
                        yield piece
                finally:
                    in_flight["count"] -= 1

            return StreamingResponse(tracked_stream(), media_type="text/event-stream")
        final = None
        in_flight["count"] += 1
        try:
            async for event in engine.generate(token_ids, mm, params, rid, started):
                if not isinstance(event, TokenEvent):
                    final = event
        finally:
            in_flight["count"] -= 1
        metrics.observe_request(final)
        output = final.outputs[0]
        return {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": output.text},
                    "finish_reason": output.finish_reason,
                }
            ],
            "usage": _usage(len(token_ids), len(output.token_ids)),
        }

    return app


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def _stream(
    engine, token_ids, mm, params, rid, created, model_name, include_usage, metrics, started
):
    def chunk(delta: dict[str, Any], finish: str | None = None, usage=None) -> str:
        body = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model_name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
            if usage is None
            else [],
        }
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"

    tokenizer = engine.engine.tokenizer
    tokens: list[int] = []
    sent = ""
    yield chunk({"role": "assistant", "content": ""})
    async for event in engine.generate(token_ids, mm, params, rid, started):
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
            text = tokenizer.decode(tokens, skip_special_tokens=True)
            if text.endswith("\ufffd"):
                continue  # an incomplete multi-byte character: wait for the next token
            if params.stop:
                continue  # the final output carries the text cut at the stop string
            if len(text) > len(sent):
                yield chunk({"content": text[len(sent) :]})
                sent = text
        else:
            metrics.observe_request(event)
            output = event.outputs[0]
            if len(output.text) > len(sent):
                yield chunk({"content": output.text[len(sent) :]})
            yield chunk({}, output.finish_reason)
            if include_usage:
                yield chunk({}, usage=_usage(len(token_ids), len(output.token_ids)))
    yield "data: [DONE]\n\n"
