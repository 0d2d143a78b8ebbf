"""OpenAI-format chat messages: media parts pulled out in order, the rest shaped for the
checkpoint's chat template."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vision.errors import InvalidMediaRequest
from vision.ingest import MediaRequest

MEDIA_PARTS = {"image_url": "image", "video_url": "video", "image": "image", "video": "video"}


@dataclass(frozen=True)
class ParsedConversation:
    """Template-ready messages and the media they reference, in prompt order."""

    messages: list[dict[str, Any]]
    media: list[MediaRequest]


def _media_ref(part: dict[str, Any], kind: str) -> Any:
    value = part.get(kind)
    if isinstance(value, dict):
        value = value.get("url")
    if value is None:
        raise InvalidMediaRequest(f"a '{kind}' content part needs a url", param=kind)
    return value


def parse_conversation(messages: list[dict[str, Any]]) -> ParsedConversation:
    """Split OpenAI-style messages into template messages and media requests.

    Content parts: ``{"type": "text", "text": ...}``, ``{"type": "image_url", "image_url":
    {"url": ...}}`` (or a plain string), ``{"type": "video_url", ...}``; ``image``/``video``
    parts may carry raw bytes or a path directly.
    """
    shaped, media = [], []
    for message in messages:
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise InvalidMediaRequest(f"unsupported message role {role!r}", param="messages")
        content = message.get("content")
        if isinstance(content, str) or content is None:
            shaped.append({"role": role, "content": content or ""})
            continue
        parts = []
        for part in content:
            kind = part.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": part.get("text", "")})
            elif kind in MEDIA_PARTS:
                modality = MEDIA_PARTS[kind]
                media.append(MediaRequest(modality, _media_ref(part, kind)))
                parts.append({"type": modality})
            else:
                raise InvalidMediaRequest(
                    f"unsupported content part type {kind!r}", param="messages"
                )
        shaped.append({"role": role, "content": parts})
    return ParsedConversation(shaped, media)
