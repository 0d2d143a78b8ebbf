"""Media references to bytes: data URLs, local files under the allowed root, and http URLs
fetched from a real ``ThreadingHTTPServer`` on 127.0.0.1 (the allow-list entry "127.0.0.1";
"localhost" is another host name and is not allowed)."""

from __future__ import annotations

import base64
import http.server
import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from vision.errors import (
    InvalidMediaRequest,
    MediaAccessDenied,
    MediaError,
    MediaTooLarge,
)
from vision.limits import MediaAccessPolicy
from vision.sources import _domain_allowed, decode_data_url, load_bytes

MB = 1 << 20


def _encode(pixels: np.ndarray, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **params)
    return buf.getvalue()


@pytest.fixture(scope="module")
def png_bytes() -> bytes:
    return _encode(skdata.chelsea(), "PNG")


@pytest.fixture(scope="module")
def jpeg_bytes() -> bytes:
    return _encode(skdata.astronaut(), "JPEG", quality=85)


# -- data URLs -----------------------------------------------------------------------------------
def test_data_url_round_trips_real_png_bytes(png_bytes: bytes) -> None:
    url = "data:image/png;base64," + base64.b64encode(png_bytes).decode("ascii")
    assert load_bytes(url, MediaAccessPolicy(), 10 * MB) == png_bytes


def test_data_url_round_trips_real_jpeg_bytes(jpeg_bytes: bytes) -> None:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg_bytes).decode("ascii")
    out = load_bytes(url, MediaAccessPolicy(), 10 * MB)
    assert out == jpeg_bytes
    assert Image.open(io.BytesIO(out)).size == (512, 512)


@pytest.mark.parametrize(
    "header",
    ["data:;base64", "DATA:image/png;BASE64", "data:image/png;name=cat.png;base64"],
)
def test_data_url_header_variants_are_accepted(png_bytes: bytes, header: str) -> None:
    url = header + "," + base64.b64encode(png_bytes).decode("ascii")
    assert load_bytes(url, MediaAccessPolicy(), 10 * MB) == png_bytes


def test_data_url_needs_no_access_policy(png_bytes: bytes) -> None:
    # inline media is always allowed, even with local files and URLs disabled
    url = "data:image/png;base64," + base64.b64encode(png_bytes).decode("ascii")
    policy = MediaAccessPolicy(allowed_local_root=None, allowed_domains=())
    assert load_bytes(url, policy, 10 * MB) == png_bytes


def test_data_url_size_cap_is_exact(png_bytes: bytes) -> None:
    url = "data:image/png;base64," + base64.b64encode(png_bytes).decode("ascii")
    assert decode_data_url(url, len(png_bytes)) == png_bytes
    assert load_bytes(url, MediaAccessPolicy(), len(png_bytes)) == png_bytes
    with pytest.raises(MediaTooLarge):
        load_bytes(url, MediaAccessPolicy(), len(png_bytes) - 1)


def test_raw_bytes_like_references_pass_through(png_bytes: bytes) -> None:
    policy = MediaAccessPolicy()
    for ref in (png_bytes, bytearray(png_bytes), memoryview(png_bytes)):
        out = load_bytes(ref, policy, 10 * MB)
        assert type(out) is bytes and out == png_bytes


# -- local files ---------------------------------------------------------------------------------
@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "media root"  # a space, to exercise file:// URL quoting
    r.mkdir()
    return r


def test_local_file_in_nested_dirs_is_read(root: Path, jpeg_bytes: bytes) -> None:
    path = root / "2024" / "trip" / "day 1" / "cat.jpg"
    path.parent.mkdir(parents=True)
    path.write_bytes(jpeg_bytes)
    policy = MediaAccessPolicy(allowed_local_root=root)
    assert load_bytes(str(path), policy, 10 * MB) == jpeg_bytes
    assert load_bytes(path, policy, 10 * MB) == jpeg_bytes  # os.PathLike


def test_file_url_is_read(root: Path, png_bytes: bytes) -> None:
    path = root / "albums" / "x%y photo.png"
    path.parent.mkdir()
    path.write_bytes(png_bytes)
    policy = MediaAccessPolicy(allowed_local_root=root)
    uri = path.as_uri()
    assert "%20" in uri and "%25" in uri  # quoted space and percent sign
    assert load_bytes(uri, policy, 10 * MB) == png_bytes
    localhost_uri = "file://localhost" + uri[len("file://") :]
    assert load_bytes(localhost_uri, policy, 10 * MB) == png_bytes


def test_root_given_with_dotdot_and_symlink_still_allows_its_files(
    tmp_path: Path, root: Path, png_bytes: bytes
) -> None:
    (root / "a.png").write_bytes(png_bytes)
    (root / "sub").mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    for configured in (alias, root / "sub" / ".."):
        policy = MediaAccessPolicy(allowed_local_root=configured)
        assert load_bytes(str(root / "a.png"), policy, 10 * MB) == png_bytes
        assert load_bytes(str(alias / "a.png"), policy, 10 * MB) == png_bytes


def test_symlink_inside_root_to_file_inside_root_is_fine(root: Path, png_bytes: bytes) -> None:
    target = root / "originals" / "cat.png"
    target.parent.mkdir()
    target.write_bytes(png_bytes)
    link = root / "latest.png"
    link.symlink_to(target)
    relative_link = root / "originals" / "again.png"
    relative_link.symlink_to("cat.png")
    policy = MediaAccessPolicy(allowed_local_root=root)
    assert load_bytes(str(link), policy, 10 * MB) == png_bytes
    assert load_bytes(link.as_uri(), policy, 10 * MB) == png_bytes
    assert load_bytes(str(relative_link), policy, 10 * MB) == png_bytes


def test_local_file_size_cap_is_exact(root: Path, png_bytes: bytes) -> None:
    path = root / "cat.png"
    path.write_bytes(png_bytes)
    policy = MediaAccessPolicy(allowed_local_root=root)
    assert load_bytes(str(path), policy, len(png_bytes)) == png_bytes
    with pytest.raises(MediaTooLarge) as excinfo:
        load_bytes(str(path), policy, len(png_bytes) - 1)
    assert excinfo.value.status_code == 413


def test_sibling_directory_sharing_the_root_prefix_is_denied(
    tmp_path: Path, root: Path, png_bytes: bytes
) -> None:
    # "/x/media root2/cat.png" starts with the string "/x/media root" but is not under it
    sibling = tmp_path / (root.name + "2")
    sibling.mkdir()
    (sibling / "cat.png").write_bytes(png_bytes)
    with pytest.raises(MediaAccessDenied):
        load_bytes(str(sibling / "cat.png"), MediaAccessPolicy(allowed_local_root=root), 10 * MB)


# -- domain allow-list (no network) --------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("example.com", True),
        ("img.example.com", True),
        ("a.b.img.example.com", True),
        ("IMG.Example.COM", True),
        ("img.example.com.", True),
        ("badexample.com", False),
        ("example.com.evil.test", False),
        ("examplexcom", False),
        ("com", False),
        ("example.org", False),
        ("", False),
        (None, False),
    ],
)
def test_domain_allow_list_covers_subdomains_only(host: str | None, allowed: bool) -> None:
    policy = MediaAccessPolicy(allowed_domains=("example.com",))
    assert _domain_allowed(host, policy) is allowed


def test_domain_allow_list_entries_are_normalised() -> None:
    policy = MediaAccessPolicy(allowed_domains=("Example.COM.", "cdn.test"))
    assert _domain_allowed("img.example.com", policy)
    assert _domain_allowed("cdn.test", policy)
    assert not _domain_allowed("other.test", policy)
    assert not _domain_allowed("example.com", MediaAccessPolicy())


# -- http(s) URLs against a real server ----------------------------------------------------------
@dataclass
class Server:
    port: int
    body: bytes
    requests: list[tuple[str, str]] = field(default_factory=list)  # (Host header, path)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, jpeg_bytes: bytes) -> Iterator[Server]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    release = threading.Event()
    state = Server(port=0, body=jpeg_bytes)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "image/jpeg")
            if length is not None:
                self.send_header("Content-Length", str(length))
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        def _redirect(self, location: str) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            state.requests.append((self.headers.get("Host", ""), self.path))
            body = state.body
            if self.path == "/cat.jpg":
                self._send(200, body, len(body))
            elif self.path == "/streamed.jpg":  # no Content-Length: read until close
                self._send(200, body)
            elif self.path == "/redirect-same-host":
                self._redirect("/cat.jpg")
            elif self.path == "/redirect-localhost":
                self._redirect(f"http://localhost:{state.port}/cat.jpg")
            elif self.path == "/redirect-evil":
                self._redirect("http://images.invalid/cat.jpg")
            elif self.path == "/stalls-after-cap.jpg":  # 8 KiB, then neither data nor EOF
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body[:8192])
                self.wfile.flush()
                release.wait(30)
                self.close_connection = True
            elif self.path == "/trickle.jpg":  # one byte every 0.1 s: each read is quick
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(len(body)):
                    if release.wait(0.1):
                        break
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                self.close_connection = True
            elif self.path == "/slow.jpg":
                release.wait(30)  # never answers within the client's timeout
            elif self.path == "/short.jpg":  # promises more than it sends, then hangs up
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:1000])
                self.close_connection = True
            elif self.path == "/not-http":  # e.g. an allow-listed host's port speaking SSH
                self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
                self.close_connection = True
            elif self.path == "/bad-chunked.jpg":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc")
                self.close_connection = True
            else:
                self.send_error(404, "no such picture")

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _policy(timeout: float = 5.0) -> MediaAccessPolicy:
    return MediaAccessPolicy(allowed_domains=("127.0.0.1",), url_timeout_s=timeout)


def test_allowed_url_is_fetched(server: Server) -> None:
    out = load_bytes(server.url("/cat.jpg"), _policy(), 10 * MB)
    assert out == server.body
    assert server.requests == [(f"127.0.0.1:{server.port}", "/cat.jpg")]


def test_allowed_url_without_content_length_is_fetched(server: Server) -> None:
    assert load_bytes(server.url("/streamed.jpg"), _policy(), 10 * MB) == server.body


def test_redirect_within_allowed_host_is_followed(server: Server) -> None:
    assert load_bytes(server.url("/redirect-same-host"), _policy(), 10 * MB) == server.body
    assert [p for _, p in server.requests] == ["/redirect-same-host", "/cat.jpg"]


def test_response_at_the_cap_is_accepted(server: Server) -> None:
    cap = len(server.body)
    assert load_bytes(server.url("/cat.jpg"), _policy(), cap) == server.body
    assert load_bytes(server.url("/streamed.jpg"), _policy(), cap) == server.body


def test_response_over_the_cap_is_too_large(server: Server) -> None:
    cap = len(server.body) - 1
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/cat.jpg"), _policy(), cap)
    err = excinfo.value
    assert type(err) is MediaTooLarge and err.status_code == 413
    assert f"limit of {cap} bytes" in err.message


def test_streamed_response_over_the_cap_is_too_large(server: Server) -> None:
    # no Content-Length to refuse up front: the read itself must stop at the cap
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/streamed.jpg"), _policy(), 4096)
    err = excinfo.value
    assert type(err) is MediaTooLarge and err.status_code == 413
    assert "limit of 4096 bytes" in err.message


def test_read_stops_at_the_cap(server: Server) -> None:
    # The server sends more than the cap and then stalls without closing: a client that reads
    # only cap + 1 bytes refuses it at once; one that reads to EOF would hit the timeout.
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/stalls-after-cap.jpg"), _policy(timeout=2.0), 4096)
    err = excinfo.value
    assert type(err) is MediaTooLarge and err.status_code == 413


def test_redirect_to_localhost_is_denied(server: Server) -> None:
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/redirect-localhost"), _policy(), 10 * MB)
    err = excinfo.value
    assert type(err) is MediaAccessDenied and err.status_code == 400
    assert "not allowed" in err.message and "localhost" in err.message
    # the redirect target was never requested
    assert [p for _, p in server.requests] == ["/redirect-localhost"]


def test_redirect_to_unresolvable_foreign_host_is_denied(server: Server) -> None:
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/redirect-evil"), _policy(), 10 * MB)
    assert type(excinfo.value) is MediaAccessDenied
    assert "images.invalid" in excinfo.value.message


def test_url_via_localhost_name_is_denied_without_request(server: Server) -> None:
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/cat.jpg", host="localhost"), _policy(), 10 * MB)
    assert type(excinfo.value) is MediaAccessDenied
    assert server.requests == []


def test_http_404_is_invalid_request(server: Server) -> None:
    url = server.url("/missing.jpg")
    with pytest.raises(MediaError) as excinfo:
        load_bytes(url, _policy(), 10 * MB)
    err = excinfo.value
    assert type(err) is InvalidMediaRequest and err.status_code == 400
    assert "HTTP 404" in err.message and url in err.message


def test_server_that_never_answers_times_out(server: Server) -> None:
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/slow.jpg"), _policy(timeout=0.5), 10 * MB)
    err = excinfo.value
    assert type(err) is InvalidMediaRequest and err.status_code == 400
    assert "failed" in err.message and "timed out" in err.message


def test_response_shorter_than_its_content_length_is_a_failed_fetch(server: Server) -> None:
    # The server promises len(body) bytes, sends 1000 and closes: the download is incomplete and
    # must not be handed on (and hashed) as if it were the media.
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/short.jpg"), _policy(), 10 * MB)
    err = excinfo.value
    assert type(err) is InvalidMediaRequest and err.status_code == 400
    assert "failed" in err.message


def test_non_http_answer_is_a_failed_fetch(server: Server) -> None:
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/not-http"), _policy(), 10 * MB)
    err = excinfo.value
    assert type(err) is InvalidMediaRequest and err.status_code == 400
    assert "failed" in err.message


def test_malformed_chunked_body_is_a_failed_fetch(server: Server) -> None:
    with pytest.raises(MediaError) as excinfo:
        load_bytes(server.url("/bad-chunked.jpg"), _policy(), 10 * MB)
    err = excinfo.value
    assert type(err) is InvalidMediaRequest and err.status_code == 400
    assert "failed" in err.message


def test_trickling_download_is_bounded_by_the_total_timeout(server: Server) -> None:
    with pytest.raises(InvalidMediaRequest) as info:
        load_bytes(server.url("/trickle.jpg"), _policy(timeout=0.5), 10 * MB)
    assert "longer than the URL timeout" in info.value.message


def test_data_url_with_characters_outside_base64_is_malformed() -> None:
    with pytest.raises(InvalidMediaRequest) as info:
        load_bytes("data:image/png;base64,@@@@", MediaAccessPolicy(), MB)
    assert info.value.status_code == 400
    assert "base64" in info.value.message


def test_relative_path_is_taken_from_the_allowed_root(root: Path, png_bytes: bytes) -> None:
    (root / "pages").mkdir(exist_ok=True)
    (root / "pages" / "p1.png").write_bytes(png_bytes)
    policy = MediaAccessPolicy(allowed_local_root=root)
    assert load_bytes("pages/p1.png", policy, 10 * MB) == png_bytes
    (root.parent / "outside.png").write_bytes(png_bytes)
    for escaping in ("../outside.png", "../missing.png"):  # existence outside is not revealed
        with pytest.raises(MediaAccessDenied):
            load_bytes(escaping, policy, 10 * MB)
