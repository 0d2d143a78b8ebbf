"""Multipart front doors: chat completions with attached files, ``/v1/generate`` and
``/v1/ocr``. Uploaded parts stay bytes; messages refer to them as ``attachment://<part name>``."""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import UploadFile

ATTACHMENT = "attachment://"
OCR_TASKS = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
}


class MultipartError(ValueError):
    """A malformed multipart request; the message says what to fix."""


async def read_files(form: Any) -> dict[str, list[bytes]]:
    """Every file part's bytes, by part name (a name may repeat)."""
    files: dict[str, list[bytes]] = {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            files.setdefault(name, []).append(await value.read())
    return files


def resolve_attachments(messages: list[dict[str, Any]], files: dict[str, list[bytes]]) -> None:
    """Replace ``attachment://name`` media URLs in ``messages`` by the uploaded bytes."""
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            for key in ("image_url", "video_url"):
                value = part.get(key)
                url = value.get("url") if isinstance(value, dict) else value
                if isinstance(url, str) and url.startswith(ATTACHMENT):
                    name = url[len(ATTACHMENT) :]
                    if name not in files:
                        raise MultipartError(f"no file part named {name!r} for {url}")
                    part[key] = {"url": files[name][0]}


def chat_body_from_form(form: Any, files: dict[str, list[bytes]]) -> dict[str, Any]:
    """The JSON body of a multipart chat completion (its ``request`` part)."""
    raw = form.get("request")
    if raw is None:
        raise MultipartError(
            "a multipart chat completion needs a 'request' part with the JSON body"
        )
    if isinstance(raw, UploadFile):
        raise MultipartError("the 'request' part must be a text field holding JSON")
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as e:
        raise MultipartError(f"the 'request' part is not valid JSON: {e}") from None
    resolve_attachments(body.get("messages") or [], files)
    return body


def generate_body_from_form(form: Any, files: dict[str, list[bytes]]) -> dict[str, Any]:
    """``/v1/generate``: ``prompt`` text, repeated ``image``/``video`` files, sampling fields."""
    prompt = form.get("prompt")
    if not isinstance(prompt, str):
        raise MultipartError("'/v1/generate' needs a 'prompt' text field")
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": data}} for data in files.get("image", [])
    ]
    content += [{"type": "video_url", "video_url": {"url": d}} for d in files.get("video", [])]
    content.append({"type": "text", "text": prompt})
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}]}
    for key, value in form.multi_items():
        if key in ("prompt", "image", "video") or isinstance(value, UploadFile):
            continue
        body[key] = _scalar(value)
    return body


def _scalar(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)
