"""Turning a media reference into encoded bytes: raw bytes, data URLs, allowed files and URLs.

Nothing here decodes pixels; the bytes returned are exactly what gets hashed.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from vision.errors import InvalidMediaRequest, MediaAccessDenied, MediaTooLarge, UnsupportedMedia
from vision.limits import MediaAccessPolicy

MediaRef = bytes | bytearray | memoryview | str | os.PathLike
_WHITESPACE = re.compile(r"\s+")


def load_bytes(ref: MediaRef, policy: MediaAccessPolicy, max_bytes: int) -> bytes:
    """Return the encoded bytes a reference points to, enforcing the access policy and size cap.

    Accepted references: raw bytes; ``data:<mime>;base64,<payload>``; ``file://`` URLs and plain
    paths (only under ``policy.allowed_local_root``; relative paths are taken from that root);
    ``http(s)://`` URLs (only for ``policy.allowed_domains``, within ``policy.url_timeout_s`` in
    total).
    """
    if isinstance(ref, (bytes, bytearray, memoryview)):
        data = bytes(ref)
    elif isinstance(ref, os.PathLike):
        data = _read_local(Path(ref), policy, max_bytes)
    elif isinstance(ref, str):
        data = _load_str(ref, policy, max_bytes)
    else:
        raise InvalidMediaRequest(f"unsupported media reference of type {type(ref).__name__}")
    _check_size(len(data), max_bytes)
    return data


def _load_str(ref: str, policy: MediaAccessPolicy, max_bytes: int) -> bytes:
    scheme = ref.split(":", 1)[0].lower() if ":" in ref else ""
    if scheme == "data":
        return decode_data_url(ref, max_bytes)
    if scheme in ("http", "https"):
        return _fetch_url(ref, policy, max_bytes)
    if scheme == "file":
        parsed = urllib.parse.urlparse(ref)
        if parsed.netloc not in ("", "localhost"):
            raise MediaAccessDenied(f"file URL with a remote host is not allowed: {ref[:200]}")
        return _read_local(Path(urllib.parse.unquote(parsed.path)), policy, max_bytes)
    if len(scheme) > 1 and scheme.isalpha():
        raise UnsupportedMedia(
            f"unsupported URL scheme '{scheme}': use a data URL, an http(s) URL or a local path"
        )
    return _read_local(Path(ref), policy, max_bytes)


def decode_data_url(url: str, max_bytes: int) -> bytes:
    """Decode ``data:[<mime>][;base64],<payload>``; only base64 payloads are accepted."""
    header, sep, payload = url.partition(",")
    if not sep:
        raise InvalidMediaRequest("malformed data URL: missing ',' between header and payload")
    params = header[len("data:") :].split(";")
    if "base64" not in (p.strip().lower() for p in params[1:]):
        raise UnsupportedMedia(
            "unsupported data URL encoding: only base64 is accepted (data:<mime>;base64,<payload>)"
        )
    # base64 inflates by 4/3: refuse oversized payloads before decoding them.
    _check_size(len(payload) * 3 // 4 - 2, max_bytes)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        pass  # perhaps line-wrapped: retry without whitespace
    try:
        return base64.b64decode(_WHITESPACE.sub("", payload), validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidMediaRequest(f"malformed base64 payload in data URL: {e}") from None


def _read_local(path: Path, policy: MediaAccessPolicy, max_bytes: int) -> bytes:
    if policy.allowed_local_root is None:
        raise MediaAccessDenied(
            "local file paths are disabled: start the server with --allowed-local-media-path"
        )
    root = Path(policy.allowed_local_root).resolve()
    path = path.expanduser()
    if not path.is_absolute():
        path = root / path
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as e:
        raise InvalidMediaRequest(f"cannot resolve media path {path}: {e}") from None
    # Containment first, so nothing is revealed about files outside the root.
    if not resolved.is_relative_to(root):
        raise MediaAccessDenied(f"media path {path} resolves outside the allowed media root {root}")
    if not resolved.exists():
        raise InvalidMediaRequest(f"media file not found: {path}")
    if not resolved.is_file():
        raise InvalidMediaRequest(f"media path is not a regular file: {path}")
    size = resolved.stat().st_size
    _check_size(size, max_bytes)
    return resolved.read_bytes()


def _domain_allowed(host: str | None, policy: MediaAccessPolicy) -> bool:
    if not host:
        return False
    host = host.lower().rstrip(".")
    return any(
        host == d.lower().rstrip(".") or host.endswith("." + d.lower().rstrip("."))
        for d in policy.allowed_domains
    )


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to allow-listed domains."""

    def __init__(self, policy: MediaAccessPolicy) -> None:
        self.policy = policy

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401
        target = urllib.parse.urlparse(newurl)
        if target.scheme not in ("http", "https") or not _domain_allowed(
            target.hostname, self.policy
        ):
            raise MediaAccessDenied(
                f"media URL redirects to a domain that is not allowed: {newurl}"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _fetch_url(url: str, policy: MediaAccessPolicy, max_bytes: int) -> bytes:
    parsed = urllib.parse.urlparse(url)
    if not _domain_allowed(parsed.hostname, policy):
        raise MediaAccessDenied(
            f"fetching media from '{parsed.hostname}' is not allowed: "
            "add the domain to --allowed-media-domains or send the media inline"
        )
    opener = urllib.request.build_opener(_CheckedRedirects(policy))
    request = urllib.request.Request(url, headers={"User-Agent": "vlm-serve"})
    deadline = time.monotonic() + policy.url_timeout_s
    try:
        with opener.open(request, timeout=policy.url_timeout_s) as response:
            declared = response.headers.get("Content-Length")
            declared = int(declared) if declared is not None and declared.isdigit() else None
            if declared is not None:
                _check_size(declared, max_bytes)
            data = _read_until(response, max_bytes + 1, deadline)
    except urllib.error.HTTPError as e:
        raise InvalidMediaRequest(f"fetching media URL failed with HTTP {e.code}: {url}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        reason = getattr(e, "reason", None) or str(e) or type(e).__name__
        raise InvalidMediaRequest(f"fetching media URL failed ({reason}): {url}") from None
    _check_size(len(data), max_bytes)
    if declared is not None and len(data) != declared:
        raise InvalidMediaRequest(
            f"fetching media URL failed: got {len(data)} of {declared} bytes: {url}"
        )
    return data


def _read_until(response, limit: int, deadline: float) -> bytes:
    """Read at most ``limit`` bytes, failing once the overall deadline has passed."""
    parts: list[bytes] = []
    received = 0
    while received < limit:
        if time.monotonic() > deadline:
            raise TimeoutError("the download took longer than the URL timeout")
        part = response.read1(min(1 << 16, limit - received))
        if not part:
            break
        parts.append(part)
        received += len(part)
    return b"".join(parts)


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise MediaTooLarge(
            f"media is {size} bytes, above the limit of {max_bytes} bytes; send a smaller file"
        )
