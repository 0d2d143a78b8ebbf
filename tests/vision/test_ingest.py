"""The ingestion pipeline end to end on real photos and real videos: hashing, the processor cache,
per-chunk video hashes and prompt expansion."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from encoder_cache.processor_cache import ProcessorCache
from vision.errors import MediaError, UnsupportedMedia
from vision.image_decode import decode_image
from vision.ingest import MediaIngestor, MediaRequest
from vision.limits import MediaAccessPolicy, MediaLimits
from vision.processor_config import ProcessorConfig
from vision.released_configs import RELEASED, released_processor_config
from vision.types import IMAGE, TEXT, VIDEO

VIDEO_FPS = 8.0
VIDEO_SIZE = (168, 112)  # (width, height)


def _encode(pixels: np.ndarray, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **params)
    return buf.getvalue()


def _ingestor(family: str, **kwargs) -> MediaIngestor:
    return MediaIngestor(released_processor_config(family), **kwargs)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return skdata.coffee()  # 400x600 RGB photo


@pytest.fixture(scope="module")
def jpeg_bytes(photo: np.ndarray) -> bytes:
    return _encode(photo, "JPEG", quality=90)


@pytest.fixture(scope="module")
def png_bytes(photo: np.ndarray) -> bytes:
    return _encode(photo, "PNG")


# -- videos --------------------------------------------------------------------------------------
def _frames(count: int) -> list[np.ndarray]:
    """``count`` distinct RGB frames: a crop window sliding over a real photo."""
    src = skdata.astronaut()  # 512x512
    frames = []
    for i in range(count):
        crop = src[i * 7 : i * 7 + 336, i * 10 : i * 10 + 224]
        frames.append(cv2.resize(crop, VIDEO_SIZE, interpolation=cv2.INTER_AREA))
    return frames


def _write_video(path: Path, frames: list[np.ndarray], fps: float = VIDEO_FPS) -> bytes:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, VIDEO_SIZE)
    assert writer.isOpened()
    for frame in frames:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path.read_bytes()


@pytest.fixture(scope="module")
def video_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("videos")


@pytest.fixture(scope="module")
def videos(video_dir: Path) -> dict[int, bytes]:
    """Videos made of the first N frames of the same 24-frame clip, by N."""
    frames = _frames(24)
    return {n: _write_video(video_dir / f"first{n}.mp4", frames[:n]) for n in (10, 16, 24)}


# -- images: processor cache ---------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_same_image_bytes_twice_hit_the_processor_cache(photo: np.ndarray, fmt: str) -> None:
    encoded = _encode(photo, fmt)
    ingestor = _ingestor("qwen2_vl")
    first = ingestor.image(encoded)
    stats = ingestor.cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (0, 1, 1)
    assert stats.bytes_used == first.nbytes > 0
    second = ingestor.image(bytes(encoded))  # an equal copy, not the same object
    stats = ingestor.cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (1, 1, 1)
    assert second is first
    assert second.mm_hash == first.mm_hash
    assert first.modality == "image" and len(first.items) == 1
    assert first.items[0].mm_hash == first.mm_hash
    ingestor.cache.check_invariants()


def test_same_bytes_by_any_reference_share_one_cache_entry(
    tmp_path: Path, jpeg_bytes: bytes
) -> None:
    path = tmp_path / "coffee.jpg"
    path.write_bytes(jpeg_bytes)
    ingestor = _ingestor("qwen2_vl", policy=MediaAccessPolicy(allowed_local_root=tmp_path))
    refs = [
        jpeg_bytes,
        "data:image/jpeg;base64," + base64.b64encode(jpeg_bytes).decode(),
        str(path),
        path,
        path.as_uri(),
    ]
    results = [ingestor.image(ref) for ref in refs]
    assert all(r is results[0] for r in results)
    stats = ingestor.cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (len(refs) - 1, 1, 1)


def test_cached_image_equals_a_fresh_computation(jpeg_bytes: bytes) -> None:
    cached = _ingestor("qwen2_vl")
    cached.image(jpeg_bytes)
    hit = cached.image(jpeg_bytes)
    fresh = _ingestor("qwen2_vl").image(jpeg_bytes)
    assert hit.mm_hash == fresh.mm_hash
    assert hit.grid_thw == fresh.grid_thw
    np.testing.assert_array_equal(hit.items[0].patches, fresh.items[0].patches)


def test_same_pixels_encoded_differently_hash_differently(photo: np.ndarray) -> None:
    encodings = {
        "png": _encode(photo, "PNG"),
        "png-fast": _encode(photo, "PNG", compress_level=1),
        "webp-lossless": _encode(photo, "WEBP", lossless=True),
        "bmp": _encode(photo, "BMP"),
    }
    limits = MediaLimits()
    for encoded in encodings.values():  # all decode to exactly the same pixels
        np.testing.assert_array_equal(decode_image(encoded, limits), photo)
    ingestor = _ingestor("qwen2_vl")
    processed = {name: ingestor.image(encoded) for name, encoded in encodings.items()}
    hashes = {p.mm_hash for p in processed.values()}
    assert len(hashes) == len(encodings)
    assert ingestor.cache.stats().hits == 0
    assert ingestor.cache.stats().entries == len(encodings)
    # ... while the processed outputs are identical
    reference = processed["png"].items[0].patches
    for p in processed.values():
        np.testing.assert_array_equal(p.items[0].patches, reference)


def test_other_processor_settings_hash_differently(jpeg_bytes: bytes) -> None:
    families = ["qwen2_vl", "qwen2_5_vl", "paddleocr_vl", "ernie4_5_vl"]
    hashes = {f: _ingestor(f).image(jpeg_bytes).mm_hash for f in families}
    assert len(set(hashes.values())) == len(families)
    # the same family with one setting changed (max_pixels) is another processor too
    config, pre = RELEASED["qwen2_vl"]
    smaller = ProcessorConfig.from_dicts(config, {**pre, "max_pixels": 200_000})
    small_hash = MediaIngestor(smaller).image(jpeg_bytes).mm_hash
    assert small_hash not in hashes.values()
    # ... and the same settings give the same hash in another ingestor
    assert _ingestor("qwen2_vl").image(jpeg_bytes).mm_hash == hashes["qwen2_vl"]


def test_families_sharing_one_cache_never_hit_each_other(jpeg_bytes: bytes) -> None:
    cache = ProcessorCache(1 << 30)
    qwen = _ingestor("qwen2_vl", cache=cache)
    ernie = _ingestor("ernie4_5_vl", cache=cache)
    a = qwen.image(jpeg_bytes)
    b = ernie.image(jpeg_bytes)
    assert a is not b and a.mm_hash != b.mm_hash
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (0, 2, 2)
    assert qwen.image(jpeg_bytes) is a and ernie.image(jpeg_bytes) is b
    assert cache.stats().hits == 2
    cache.check_invariants()


def test_zero_byte_cache_never_stores(jpeg_bytes: bytes, png_bytes: bytes) -> None:
    ingestor = _ingestor("qwen2_vl", cache=ProcessorCache(0))
    first = ingestor.image(jpeg_bytes)
    second = ingestor.image(jpeg_bytes)
    ingestor.image(png_bytes)
    assert second is not first  # recomputed, not served from the cache
    assert second.mm_hash == first.mm_hash
    np.testing.assert_array_equal(second.items[0].patches, first.items[0].patches)
    stats = ingestor.cache.stats()
    assert (stats.hits, stats.misses, stats.entries, stats.bytes_used) == (0, 3, 0, 0)
    assert len(ingestor.cache) == 0 and first.mm_hash not in ingestor.cache
    ingestor.cache.check_invariants()


def test_video_bytes_cached_as_video_are_not_served_as_an_image(videos: dict[int, bytes]) -> None:
    """mp4 bytes are not an image: a fresh ingestor refuses them as one (415). After the same
    bytes were processed as a video, the processor cache (keyed by bytes + settings, not by
    modality) must not hand the video back from ``image()``."""
    clip = videos[24]
    with pytest.raises(UnsupportedMedia):
        _ingestor("qwen2_vl").image(clip)
    ingestor = _ingestor("qwen2_vl")
    assert ingestor.video(clip).modality == "video"
    try:
        result = ingestor.image(clip)
    except MediaError as err:
        assert type(err) is UnsupportedMedia and err.status_code == 415
    else:
        assert result.modality == "image", "image() returned the cached video"


# -- videos --------------------------------------------------------------------------------------
# 24 frames at 8 fps (3 s):
#   qwen2_vl: n = 3 s * 2 fps = 6 (within [min_frames=4, 24], even) -> frames 0,4,8,12,16,20
#             -> 3 chunks of 2 frames, each chunk one temporal patch (grid t = 1).
#   ernie4_5_vl: n = int(3 s * 2 fps) = 6 < min_frames=16 -> 16 frames (middle of 16 equal
#             intervals: 0,1,3,4,6,7,...,21,22) -> 8 chunks of 2 frames (grid t = 2 each).
@pytest.mark.parametrize(
    ("family", "chunks", "chunk_t"), [("qwen2_vl", 3, 1), ("ernie4_5_vl", 8, 2)]
)
def test_video_is_one_item_per_two_frame_chunk(
    videos: dict[int, bytes], family: str, chunks: int, chunk_t: int
) -> None:
    ingestor = _ingestor(family)
    video = ingestor.video(videos[24])
    assert video.modality == "video"
    assert len(video.items) == chunks
    hashes = [item.mm_hash for item in video.items]
    assert len(set(hashes)) == chunks  # every chunk has its own identity
    assert video.mm_hash not in hashes
    t, h, w = video.grid_thw
    assert t == chunks * chunk_t
    merge = ingestor.config.merge_size
    for item in video.items:
        assert item.modality == "video"
        assert item.grid_thw == (chunk_t, h, w)
        assert item.num_tokens == chunk_t * h * w // (merge * merge) // (
            ingestor.config.video_temporal_merge
        )
        assert item.patches.dtype == np.uint8
        assert item.patches.shape[0] == chunk_t * h * w
    assert video.num_tokens == sum(item.num_tokens for item in video.items)
    assert video.seconds_per_grid_t > 0


@pytest.mark.parametrize("family", ["qwen2_vl", "ernie4_5_vl"])
def test_resent_video_bytes_hit_the_cache(
    videos: dict[int, bytes], video_dir: Path, family: str
) -> None:
    ingestor = _ingestor(family, policy=MediaAccessPolicy(allowed_local_root=video_dir))
    first = ingestor.video(videos[24])
    again = ingestor.video(str(video_dir / "first24.mp4"))
    assert again is first
    stats = ingestor.cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (1, 1, 1)
    ingestor.cache.check_invariants()


# Which chunks a trimmed copy (the first N frames of the clip, re-encoded) shares with the clip.
# mp4v encodes each frame from the past only, so the first N decoded frames are bit-identical
# in both files; chunks are hashed by content, so a chunk of the copy shares its hash with a
# chunk of the clip (at any position) when both sample the same two frames into it.
#   qwen2_vl, 24 vs 16 frames: 0,4,8,12,16,20 vs 16/8*2 = 4 frames 0,4,8,12
#       -> chunks (0,4),(8,12) shared at the same positions; the clip's (16,20) is not.
#   ernie4_5_vl, 16 vs 10 frames: min_frames=16 >= total, so both take every frame
#       (0..15 vs 0..9) -> the 5 chunks of the copy are the first 5 of the clip.
#   ernie4_5_vl, 24 vs 16 frames: the clip takes the middle frame of 16 intervals of 1.5 frames,
#       0,1 3,4 6,7 9,10 12,13 15,16 18,19 21,22, the copy every frame 0,1 2,3 4,5 6,7 ...
#       -> only (0,1), (6,7) and (12,13) coincide: clip chunks 0,2,4 = copy chunks 0,3,6.
@pytest.mark.parametrize(
    ("family", "full", "trimmed", "shared"),
    [
        ("qwen2_vl", 24, 16, [(0, 0), (1, 1)]),
        ("ernie4_5_vl", 16, 10, [(i, i) for i in range(5)]),
        ("ernie4_5_vl", 24, 16, [(0, 0), (2, 3), (4, 6)]),
    ],
)
def test_trimmed_copy_shares_chunk_hashes_for_identical_sampled_frames(
    videos: dict[int, bytes],
    family: str,
    full: int,
    trimmed: int,
    shared: list[tuple[int, int]],
) -> None:
    ingestor = _ingestor(family)
    original = ingestor.video(videos[full])
    copy = ingestor.video(videos[trimmed])
    assert copy.mm_hash != original.mm_hash
    original_hashes = [item.mm_hash for item in original.items]
    copy_hashes = [item.mm_hash for item in copy.items]
    common = {
        (original_hashes.index(h), copy_hashes.index(h))
        for h in set(original_hashes) & set(copy_hashes)
    }
    assert common == set(shared)
    for i, j in shared:
        np.testing.assert_array_equal(original.items[i].patches, copy.items[j].patches)
        assert original.items[i].grid_thw == copy.items[j].grid_thw


# A copy of a clip with one sampled frame of chunk 1 replaced (its first or its second frame):
# the chunk before it decodes identically and keeps its hash; the chunk holding the new frame
# does not (whichever of its two frames changed).
#   qwen2_vl, 24 frames: chunks (0,4),(8,12),(16,20) -> replace frame 8 or 12.
#   ernie4_5_vl, 10 frames: every frame, chunks (0,1),(2,3),... -> replace frame 2 or 3.
@pytest.mark.parametrize(
    ("family", "count", "replaced"),
    [("qwen2_vl", 24, 8), ("qwen2_vl", 24, 12), ("ernie4_5_vl", 10, 2), ("ernie4_5_vl", 10, 3)],
)
def test_chunk_hash_covers_both_frames_of_a_chunk(
    video_dir: Path, family: str, count: int, replaced: int
) -> None:
    frames = _frames(count)
    edited = list(frames)
    edited[replaced] = cv2.resize(skdata.chelsea(), VIDEO_SIZE, interpolation=cv2.INTER_AREA)
    clip = _write_video(video_dir / f"{family}-{replaced}-clip.mp4", frames)
    other = _write_video(video_dir / f"{family}-{replaced}-edited.mp4", edited)
    ingestor = _ingestor(family)
    a, b = ingestor.video(clip), ingestor.video(other)
    assert len(a.items) == len(b.items)
    assert a.items[0].mm_hash == b.items[0].mm_hash
    assert a.items[1].mm_hash != b.items[1].mm_hash


def test_chunk_hashes_depend_on_processor_settings(videos: dict[int, bytes]) -> None:
    qwen = _ingestor("qwen2_vl").video(videos[24])
    qwen25 = _ingestor("qwen2_5_vl").video(videos[24])
    assert len(qwen.items) == len(qwen25.items)
    assert not {i.mm_hash for i in qwen.items} & {i.mm_hash for i in qwen25.items}


# -- prompt expansion ----------------------------------------------------------------------------
def _runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(start, length) of every maximal run of ``token`` in ``ids``."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t != token:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "ernie4_5_vl"])
def test_build_inputs_places_image_and_video_spans(
    videos: dict[int, bytes], video_dir: Path, jpeg_bytes: bytes, family: str
) -> None:
    ingestor = _ingestor(family, policy=MediaAccessPolicy(allowed_local_root=video_dir))
    cfg = ingestor.config
    img, vid = cfg.image_token_id, cfg.video_token_id
    text_a, text_b, text_c = [11, 12, 13], [14], [15, 16]
    prompt = [*text_a, img, *text_b, vid, *text_c]
    media = [
        MediaRequest("image", "data:image/jpeg;base64," + base64.b64encode(jpeg_bytes).decode()),
        MediaRequest("video", str(video_dir / "first24.mp4")),
    ]
    ids, inputs = ingestor.build_inputs(prompt, media)

    image = ingestor.image(jpeg_bytes)  # cache hits: the very objects build_inputs used
    video = ingestor.video(videos[24])
    n_img, n_vid = image.num_tokens, video.num_tokens
    assert n_img > 0 and n_vid > 0
    expected = [*text_a, *[img] * n_img, *text_b, *[vid] * n_vid, *text_c]
    assert ids == expected

    # one item per image and per video chunk, in prompt order, spans tiling the placeholders
    assert [i.modality for i in inputs.items] == ["image"] + ["video"] * len(video.items)
    assert [i.mm_hash for i in inputs.items] == [image.mm_hash] + [i.mm_hash for i in video.items]
    image_item, video_items = inputs.items[0], inputs.items[1:]
    assert _runs(ids, img) == [(image_item.offset, image_item.length)]
    assert (image_item.offset, image_item.length) == (len(text_a), n_img)
    assert _runs(ids, vid) == [(video_items[0].offset, n_vid)]
    offset = len(text_a) + n_img + len(text_b)
    for item, chunk in zip(video_items, video.items, strict=True):
        assert item.offset == offset and item.length == chunk.num_tokens
        assert item.grid_thw == chunk.grid_thw
        assert all(t == vid for t in ids[item.offset : item.end])
        np.testing.assert_array_equal(item.patches, chunk.patches)
        offset = item.end
    assert offset == len(ids) - len(text_c)

    types = inputs.token_type_ids
    assert types is not None and types.shape == (len(ids),)
    expected_types = np.array(
        [TEXT if t not in (img, vid) else (IMAGE if t == img else VIDEO) for t in ids]
    )
    np.testing.assert_array_equal(types, expected_types)
    assert (types == IMAGE).sum() == n_img and (types == VIDEO).sum() == n_vid
    assert inputs.position_ids is not None and inputs.position_ids.shape == (3, len(ids))
