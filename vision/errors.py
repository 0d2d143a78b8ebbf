"""Typed errors for user-caused media problems.

Every error carries the HTTP status the API should answer with and a stable machine-readable
``code``; the message always says what the client should change.
"""

from __future__ import annotations


class MediaError(Exception):
    """Base class: a media item or its reference is unusable because of the client's input."""

    status_code: int = 400
    code: str = "invalid_media"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidMediaRequest(MediaError):
    """The reference or its parameters are malformed (bad data URL, bad aspect ratio...)."""

    status_code = 400
    code = "invalid_media_request"


class MediaAccessDenied(MediaError):
    """A local path outside the allowed root or a URL whose domain is not allow-listed."""

    status_code = 400
    code = "media_access_denied"


class MediaTooLarge(MediaError):
    """Encoded bytes, decoded pixels or frame counts exceed the configured limits."""

    status_code = 413
    code = "media_too_large"


class UnsupportedMedia(MediaError):
    """The bytes are not in a format we accept (unknown image format, data-URL encoding...)."""

    status_code = 415
    code = "unsupported_media"


class UndecodableMedia(MediaError):
    """A recognised format whose content cannot be decoded (truncated, corrupt, no frames)."""

    status_code = 422
    code = "undecodable_media"
