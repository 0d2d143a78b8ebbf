"""Bad media input: every user mistake must become a typed MediaError with the right HTTP status
and a message that names the problem, never a crash, a hang or a huge allocation.

One test per case; everything goes through the public entry points (``MediaIngestor``,
``load_bytes``, ``decode_image``) with real files, real encoded images and real videos.
"""

from __future__ import annotations

import base64
import io
import socket
import struct
import subprocess
import sys
import tracemalloc
import urllib.parse
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from vision.errors import (
    InvalidMediaRequest,
    MediaAccessDenied,
    MediaError,
    MediaTooLarge,
    UndecodableMedia,
    UnsupportedMedia,
)
from vision.image_decode import decode_image
from vision.ingest import MediaIngestor, MediaRequest
from vision.limits import MediaAccessPolicy, MediaLimits
from vision.released_configs import released_processor_config
from vision.sources import load_bytes

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# -- helpers -------------------------------------------------------------------------------------
def _encode(pixels: np.ndarray, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **params)
    return buf.getvalue()


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def _png_declaring(width: int, height: int) -> bytes:
    """A structurally valid PNG (signature, IHDR with a correct CRC, a tiny IDAT, IEND) whose
    header declares ``width x height`` 8-bit RGB pixels but whose data is a few bytes."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _png_chunk(b"IEND", b"")
    )


def _check(err: BaseException, cls: type[MediaError], status: int, *needles: str) -> None:
    """``err`` is exactly ``cls``, a MediaError with ``status``, and its message names the
    problem (every needle appears in it, case-insensitively)."""
    assert type(err) is cls, f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    assert isinstance(err, MediaError)
    assert err.status_code == status
    assert err.code == cls.code
    assert str(err) == err.message
    for needle in needles:
        assert needle.lower() in err.message.lower(), f"{needle!r} not in {err.message!r}"


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return skdata.chelsea()  # 300x451 RGB photo


@pytest.fixture(scope="module")
def jpeg_bytes(photo: np.ndarray) -> bytes:
    return _encode(photo, "JPEG", quality=90)


@pytest.fixture(scope="module")
def png_bytes(photo: np.ndarray) -> bytes:
    return _encode(photo, "PNG")


@pytest.fixture
def qwen() -> MediaIngestor:
    return MediaIngestor(released_processor_config("qwen2_vl"))


@pytest.fixture
def media_root(tmp_path: Path) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    return root


@pytest.fixture
def rooted_qwen(media_root: Path) -> MediaIngestor:
    return MediaIngestor(
        released_processor_config("qwen2_vl"),
        policy=MediaAccessPolicy(allowed_local_root=media_root),
    )


@pytest.fixture
def listening_socket():
    """A TCP socket listening on 127.0.0.1 that nobody accepts from: a client that connects
    leaves a queued connection, which a non-blocking accept() then reveals."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def _assert_nobody_connected(sock: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        conn, _ = sock.accept()
        conn.close()


@pytest.fixture(scope="module")
def mp4_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """8 frames at 8 fps, 168x112, from a real photo (mp4v)."""
    path = tmp_path_factory.mktemp("video") / "clip.mp4"
    src = skdata.astronaut()
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 8.0, (168, 112))
    assert writer.isOpened()
    for i in range(8):
        crop = src[i * 10 : i * 10 + 336, i * 12 : i * 12 + 224]
        frame = cv2.resize(crop, (168, 112), interpolation=cv2.INTER_AREA)
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path.read_bytes()


# -- undecodable / unsupported images ------------------------------------------------------------
def test_truncated_jpeg_is_undecodable(qwen: MediaIngestor, jpeg_bytes: bytes) -> None:
    with pytest.raises(MediaError) as excinfo:
        qwen.image(jpeg_bytes[: len(jpeg_bytes) // 2])
    _check(excinfo.value, UndecodableMedia, 422, "truncated")


def test_truncated_png_is_undecodable(qwen: MediaIngestor, png_bytes: bytes) -> None:
    with pytest.raises(MediaError) as excinfo:
        qwen.image(png_bytes[: len(png_bytes) // 2])
    _check(excinfo.value, UndecodableMedia, 422, "truncated")


def test_zero_byte_file_is_undecodable(rooted_qwen: MediaIngestor, media_root: Path) -> None:
    empty = media_root / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(str(empty))
    _check(excinfo.value, UndecodableMedia, 422, "0 bytes")


def test_text_file_is_not_an_image(rooted_qwen: MediaIngestor, media_root: Path) -> None:
    notes = media_root / "notes.png"  # the extension lies: the content decides
    notes.write_text("this is a shopping list, not a picture\n" * 20)
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(str(notes))
    _check(excinfo.value, UnsupportedMedia, 415, "not a supported image")


def test_random_bytes_are_not_an_image(qwen: MediaIngestor) -> None:
    noise = np.random.default_rng(1234).bytes(4096)
    with pytest.raises(MediaError) as excinfo:
        qwen.image(noise)
    _check(excinfo.value, UnsupportedMedia, 415, "not a supported image")


# -- decompression bombs and geometry ------------------------------------------------------------
_RLIMIT_CHILD = """
import resource, sys
from vision.errors import MediaTooLarge
from vision.image_decode import decode_image
from vision.limits import MediaLimits

data = sys.stdin.buffer.read()
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
# Allow 1 GiB more address space than already mapped; 100000x100000 RGB would need 30 GB.
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))
try:
    decode_image(data, MediaLimits())
except MediaTooLarge as e:
    print("REFUSED", e)
"""


def test_png_header_declaring_100000x100000_is_refused_without_allocating() -> None:
    bomb = _png_declaring(100_000, 100_000)
    assert len(bomb) < 200
    tracemalloc.start()
    try:
        with pytest.raises(MediaError) as excinfo:
            decode_image(bomb, MediaLimits())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _check(excinfo.value, MediaTooLarge, 413, "pixels")
    assert peak < 50 * 2**20
    # tracemalloc does not see native (Pillow/OpenCV) allocations: in a child process whose
    # address space is capped 1 GiB above its current size, the refusal must still happen
    # (allocating the declared 30 GB of pixels would raise MemoryError instead).
    if not Path("/proc/self/status").exists():
        return
    child = subprocess.run(
        [sys.executable, "-c", _RLIMIT_CHILD],
        input=bomb,
        capture_output=True,
        cwd=PROJECT_ROOT,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr.decode(errors="replace")
    assert child.stdout.startswith(b"REFUSED"), child.stdout


def test_png_header_above_max_image_pixels_is_refused_before_decoding() -> None:
    # 9000x9000 = 81 Mpx: below Pillow's own bomb error (2 x 89.5 Mpx), above our 64 Mpx limit,
    # so it is the project's header check that must refuse it.
    tracemalloc.start()
    try:
        with pytest.raises(MediaError) as excinfo:
            decode_image(_png_declaring(9000, 9000), MediaLimits())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _check(excinfo.value, MediaTooLarge, 413, "9000x9000", "pixels")
    assert peak < 50 * 2**20


def test_real_photo_above_a_configured_pixel_limit_is_too_large(
    png_bytes: bytes, photo: np.ndarray
) -> None:
    h, w = photo.shape[:2]
    ingestor = MediaIngestor(
        released_processor_config("qwen2_vl"), limits=MediaLimits(max_image_pixels=w * h - 1)
    )
    with pytest.raises(MediaError) as excinfo:
        ingestor.image(png_bytes)
    _check(excinfo.value, MediaTooLarge, 413, "pixels")
    # exactly at the limit is accepted
    ok = MediaIngestor(
        released_processor_config("qwen2_vl"), limits=MediaLimits(max_image_pixels=w * h)
    )
    assert ok.image(png_bytes).modality == "image"


def test_image_over_aspect_ratio_limit_is_invalid(qwen: MediaIngestor) -> None:
    stripe = np.tile(np.linspace(0, 255, 10, dtype=np.uint8)[None, :, None], (2500, 1, 3))
    assert stripe.shape == (2500, 10, 3)  # 10 wide, 2500 tall: ratio 250 > 200
    with pytest.raises(MediaError) as excinfo:
        qwen.image(_encode(stripe, "PNG"))
    _check(excinfo.value, InvalidMediaRequest, 400, "aspect ratio", "10x2500")


def test_image_over_max_image_bytes_is_too_large(png_bytes: bytes) -> None:
    limit = len(png_bytes) - 1
    ingestor = MediaIngestor(
        released_processor_config("qwen2_vl"), limits=MediaLimits(max_image_bytes=limit)
    )
    with pytest.raises(MediaError) as excinfo:
        ingestor.image(png_bytes)
    _check(excinfo.value, MediaTooLarge, 413, f"{len(png_bytes)} bytes", f"{limit} bytes")
    at_limit = MediaIngestor(
        released_processor_config("qwen2_vl"), limits=MediaLimits(max_image_bytes=len(png_bytes))
    )
    assert at_limit.image(png_bytes).modality == "image"


def test_local_file_over_max_image_bytes_is_too_large(media_root: Path, png_bytes: bytes) -> None:
    path = media_root / "big.png"
    path.write_bytes(png_bytes)
    ingestor = MediaIngestor(
        released_processor_config("qwen2_vl"),
        limits=MediaLimits(max_image_bytes=1000),
        policy=MediaAccessPolicy(allowed_local_root=media_root),
    )
    with pytest.raises(MediaError) as excinfo:
        ingestor.image(str(path))
    _check(excinfo.value, MediaTooLarge, 413, "above the limit of 1000 bytes")


def test_data_url_over_max_image_bytes_is_too_large(png_bytes: bytes) -> None:
    url = "data:image/png;base64," + base64.b64encode(png_bytes).decode()
    ingestor = MediaIngestor(
        released_processor_config("qwen2_vl"), limits=MediaLimits(max_image_bytes=1000)
    )
    with pytest.raises(MediaError) as excinfo:
        ingestor.image(url)
    _check(excinfo.value, MediaTooLarge, 413, "above the limit of 1000 bytes")


# -- data URLs -----------------------------------------------------------------------------------
def test_data_url_without_base64_is_unsupported(qwen: MediaIngestor, png_bytes: bytes) -> None:
    url = "data:image/png;charset=utf-8," + urllib.parse.quote_from_bytes(png_bytes)
    with pytest.raises(MediaError) as excinfo:
        qwen.image(url)
    _check(excinfo.value, UnsupportedMedia, 415, "base64")


def test_data_url_with_malformed_base64_is_invalid(qwen: MediaIngestor, png_bytes: bytes) -> None:
    payload = base64.b64encode(png_bytes).decode().rstrip("=")
    payload = payload[: (len(payload) // 4 - 1) * 4 + 1]  # one character past a 4-char group
    with pytest.raises(MediaError) as excinfo:
        qwen.image("data:image/png;base64," + payload)
    _check(excinfo.value, InvalidMediaRequest, 400, "base64")


def test_data_url_without_comma_is_invalid(qwen: MediaIngestor) -> None:
    with pytest.raises(MediaError) as excinfo:
        qwen.image("data:image/png;base64")
    _check(excinfo.value, InvalidMediaRequest, 400, "malformed data url")


# -- local paths ---------------------------------------------------------------------------------
def test_local_path_outside_root_is_denied(
    rooted_qwen: MediaIngestor, tmp_path: Path, png_bytes: bytes
) -> None:
    secret = tmp_path / "secret.png"  # a sibling of the root, not inside it
    secret.write_bytes(png_bytes)
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(str(secret))
    _check(excinfo.value, MediaAccessDenied, 400, "outside")


def test_dotdot_path_escaping_root_is_denied(
    rooted_qwen: MediaIngestor, media_root: Path, tmp_path: Path, png_bytes: bytes
) -> None:
    (tmp_path / "secret.png").write_bytes(png_bytes)
    (media_root / "sub").mkdir()
    sneaky = f"{media_root}/sub/../../secret.png"
    assert Path(sneaky).resolve() == (tmp_path / "secret.png").resolve()
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(sneaky)
    _check(excinfo.value, MediaAccessDenied, 400, "outside")


def test_symlink_inside_root_pointing_outside_is_denied(
    rooted_qwen: MediaIngestor, media_root: Path, tmp_path: Path, png_bytes: bytes
) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(png_bytes)
    link = media_root / "innocent.png"
    link.symlink_to(secret)
    assert link.read_bytes() == png_bytes  # the link works; only the policy may refuse it
    for ref in (str(link), link, link.as_uri()):
        with pytest.raises(MediaError) as excinfo:
            rooted_qwen.image(ref)
        _check(excinfo.value, MediaAccessDenied, 400, "outside")


def test_symlinked_directory_inside_root_pointing_outside_is_denied(
    rooted_qwen: MediaIngestor, media_root: Path, tmp_path: Path, png_bytes: bytes
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "photo.png").write_bytes(png_bytes)
    (media_root / "shared").symlink_to(outside, target_is_directory=True)
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(str(media_root / "shared" / "photo.png"))
    _check(excinfo.value, MediaAccessDenied, 400, "outside")


def test_local_paths_refused_when_no_root_configured(
    qwen: MediaIngestor, tmp_path: Path, png_bytes: bytes
) -> None:
    path = tmp_path / "photo.png"
    path.write_bytes(png_bytes)
    assert qwen.policy.allowed_local_root is None
    for ref in (str(path), path, path.as_uri()):
        with pytest.raises(MediaError) as excinfo:
            qwen.image(ref)
        _check(excinfo.value, MediaAccessDenied, 400, "disabled")


def test_missing_local_file_is_invalid(rooted_qwen: MediaIngestor, media_root: Path) -> None:
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(str(media_root / "nope.png"))
    _check(excinfo.value, InvalidMediaRequest, 400, "not found")


def test_directory_inside_root_is_invalid(rooted_qwen: MediaIngestor, media_root: Path) -> None:
    (media_root / "album").mkdir()
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(str(media_root / "album"))
    _check(excinfo.value, InvalidMediaRequest, 400, "not a regular file")


def test_file_url_with_remote_host_is_denied(
    rooted_qwen: MediaIngestor, media_root: Path, png_bytes: bytes
) -> None:
    (media_root / "photo.png").write_bytes(png_bytes)
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.image(f"file://fileserver.example{media_root}/photo.png")
    _check(excinfo.value, MediaAccessDenied, 400, "remote host")


# -- URLs ----------------------------------------------------------------------------------------
def test_disallowed_url_domain_is_denied_before_connecting(listening_socket: socket.socket) -> None:
    port = listening_socket.getsockname()[1]
    policy = MediaAccessPolicy(allowed_domains=("example.com",), url_timeout_s=0.5)
    with pytest.raises(MediaError) as excinfo:
        load_bytes(f"http://127.0.0.1:{port}/cat.png", policy, 1 << 20)
    _check(excinfo.value, MediaAccessDenied, 400, "not allowed", "127.0.0.1")
    _assert_nobody_connected(listening_socket)


def test_any_url_is_denied_with_the_default_policy(qwen: MediaIngestor) -> None:
    # .invalid never resolves: a DNS lookup would surface as a fetch failure, not a denial.
    assert qwen.policy.allowed_domains == ()
    with pytest.raises(MediaError) as excinfo:
        qwen.image("https://images.invalid/cat.png")
    _check(excinfo.value, MediaAccessDenied, 400, "not allowed")


def test_url_with_userinfo_pointing_elsewhere_is_denied(listening_socket: socket.socket) -> None:
    # "http://example.com@host/" targets host, not example.com.
    port = listening_socket.getsockname()[1]
    policy = MediaAccessPolicy(allowed_domains=("example.com",), url_timeout_s=0.5)
    with pytest.raises(MediaError) as excinfo:
        load_bytes(f"http://example.com@127.0.0.1:{port}/cat.png", policy, 1 << 20)
    _check(excinfo.value, MediaAccessDenied, 400, "not allowed")
    _assert_nobody_connected(listening_socket)


def test_ftp_url_is_unsupported(listening_socket: socket.socket) -> None:
    port = listening_socket.getsockname()[1]
    policy = MediaAccessPolicy(allowed_domains=("127.0.0.1",), url_timeout_s=0.5)
    with pytest.raises(MediaError) as excinfo:
        load_bytes(f"ftp://127.0.0.1:{port}/cat.png", policy, 1 << 20)
    _check(excinfo.value, UnsupportedMedia, 415, "scheme", "ftp")
    _assert_nobody_connected(listening_socket)


def test_unknown_reference_type_is_invalid() -> None:
    with pytest.raises(MediaError) as excinfo:
        load_bytes(12345, MediaAccessPolicy(), 1 << 20)  # type: ignore[arg-type]
    _check(excinfo.value, InvalidMediaRequest, 400, "int")


# -- videos --------------------------------------------------------------------------------------
def test_text_file_as_video_is_undecodable(rooted_qwen: MediaIngestor, media_root: Path) -> None:
    fake = media_root / "clip.mp4"
    fake.write_text("definitely not a video\n" * 100)
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.video(str(fake))
    _check(excinfo.value, UndecodableMedia, 422, "not a video")


def test_still_image_as_video_has_no_decodable_frames(
    qwen: MediaIngestor, png_bytes: bytes
) -> None:
    with pytest.raises(MediaError) as excinfo:
        qwen.video(png_bytes)
    _check(excinfo.value, UndecodableMedia, 422, "no decodable frames")


def test_zero_byte_video_is_undecodable(rooted_qwen: MediaIngestor, media_root: Path) -> None:
    empty = media_root / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(MediaError) as excinfo:
        rooted_qwen.video(str(empty))
    _check(excinfo.value, UndecodableMedia, 422, "0 bytes")


def test_video_for_paddleocr_vl_is_unsupported(mp4_bytes: bytes) -> None:
    ingestor = MediaIngestor(released_processor_config("paddleocr_vl"))
    with pytest.raises(MediaError) as excinfo:
        ingestor.video(mp4_bytes)
    _check(excinfo.value, UnsupportedMedia, 415, "paddleocr_vl", "video")
    with pytest.raises(MediaError) as excinfo:
        ingestor.build_inputs([1, 2], [MediaRequest("video", mp4_bytes)])
    _check(excinfo.value, UnsupportedMedia, 415, "video")


def test_video_for_paddleocr_vl_is_unsupported_even_if_bytes_were_cached_as_image(
    png_bytes: bytes,
) -> None:
    """The processor cache key is (encoded bytes, processor settings), not the modality: bytes
    first sent as an image must not turn a later video request for them into a cache hit that
    skips the "no video support" check."""
    ingestor = MediaIngestor(released_processor_config("paddleocr_vl"))
    assert ingestor.image(png_bytes).modality == "image"
    with pytest.raises(MediaError) as excinfo:
        ingestor.video(png_bytes)
    _check(excinfo.value, UnsupportedMedia, 415, "video")


def test_video_needing_more_than_max_video_frames_is_too_large(mp4_bytes: bytes) -> None:
    # 8 frames at 8 fps: Qwen samples max(1 s * 2 fps, min_frames=4) = 4 frames.
    ingestor = MediaIngestor(
        released_processor_config("qwen2_vl"), limits=MediaLimits(max_video_frames=3)
    )
    with pytest.raises(MediaError) as excinfo:
        ingestor.video(mp4_bytes)
    _check(excinfo.value, MediaTooLarge, 413, "4 frames", "limit of 3")


def test_video_over_max_video_bytes_is_too_large(mp4_bytes: bytes) -> None:
    ingestor = MediaIngestor(
        released_processor_config("qwen2_vl"), limits=MediaLimits(max_video_bytes=1024)
    )
    with pytest.raises(MediaError) as excinfo:
        ingestor.video(mp4_bytes)
    _check(excinfo.value, MediaTooLarge, 413, "above the limit of 1024 bytes")


# -- prompts -------------------------------------------------------------------------------------
def test_more_placeholders_than_media_is_invalid(qwen: MediaIngestor, jpeg_bytes: bytes) -> None:
    img = qwen.config.image_token_id
    with pytest.raises(MediaError) as excinfo:
        qwen.build_inputs([1, img, 2, img, 3], [MediaRequest("image", jpeg_bytes)])
    _check(excinfo.value, InvalidMediaRequest, 400, "2 media placeholders", "1 media items")


def test_fewer_placeholders_than_media_is_invalid(qwen: MediaIngestor, jpeg_bytes: bytes) -> None:
    img = qwen.config.image_token_id
    media = [MediaRequest("image", jpeg_bytes), MediaRequest("image", jpeg_bytes)]
    with pytest.raises(MediaError) as excinfo:
        qwen.build_inputs([1, img, 2], media)
    _check(excinfo.value, InvalidMediaRequest, 400, "1 media placeholders", "2 media items")


def test_no_placeholder_for_an_image_is_invalid(qwen: MediaIngestor, jpeg_bytes: bytes) -> None:
    with pytest.raises(MediaError) as excinfo:
        qwen.build_inputs([1, 2, 3], [MediaRequest("image", jpeg_bytes)])
    _check(excinfo.value, InvalidMediaRequest, 400, "0 media placeholders")


def test_placeholders_in_the_wrong_order_are_invalid(
    qwen: MediaIngestor, jpeg_bytes: bytes, mp4_bytes: bytes
) -> None:
    cfg = qwen.config
    prompt = [1, cfg.video_token_id, 2, cfg.image_token_id, 3]
    media = [MediaRequest("image", jpeg_bytes), MediaRequest("video", mp4_bytes)]
    with pytest.raises(MediaError) as excinfo:
        qwen.build_inputs(prompt, media)
    _check(excinfo.value, InvalidMediaRequest, 400, "order")


def test_every_media_error_status_is_a_client_error() -> None:
    # the typed errors are the API's 4xx contract
    expected = {
        InvalidMediaRequest: 400,
        MediaAccessDenied: 400,
        MediaTooLarge: 413,
        UnsupportedMedia: 415,
        UndecodableMedia: 422,
    }
    for cls, status in expected.items():
        err = cls("boom", param="image_url")
        assert isinstance(err, MediaError)
        assert err.status_code == status
        assert err.message == "boom" and err.param == "image_url"
    assert len({cls.code for cls in expected}) == len(expected)
