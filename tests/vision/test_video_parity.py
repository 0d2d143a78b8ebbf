"""Video parity: frame processing and frame-index rules against paddleformers.

(a) Qwen2-VL: our ``process_video`` (all chunks' patches concatenated, whole-video grid) against
    paddleformers' ``Qwen2VLVideoProcessor`` given the same decoded frames and the same video
    pixel budget.
(b) ERNIE-4.5-VL: our uint8 chunks against the ERNIE processor's video path (uint8 rows, grid t =
    number of frames, padded to even).
(c) Frame sampling: our ``qwen_frame_indices`` / ``ernie_frame_indices`` against paddleformers'
    rules, on many (frame count, fps) combinations.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests import reference
from vision.processor import MediaProcessor
from vision.released_configs import released_processor_config
from vision.types import ProcessedMedia
from vision.video import ernie_frame_indices, pad_to_even, qwen_frame_indices

# -- frames from real photographs ----------------------------------------------------------------
_SOURCES = ("hubble_deep_field", "coffee", "chelsea", "astronaut", "retina")


def _source(name: str) -> np.ndarray:
    from skimage import data

    return np.ascontiguousarray(getattr(data, name)()[:, :, :3])


def _frames(count: int, height: int, width: int, source: str) -> np.ndarray:
    """``count`` frames [H, W, 3] uint8: a window panning across a real photograph (resized up
    first when the photograph is smaller than the window plus the pan)."""
    from PIL import Image

    image = _source(source)
    step_y, step_x = 5, 9
    need_h, need_w = height + step_y * count, width + step_x * count
    if image.shape[0] < need_h or image.shape[1] < need_w:
        scale = max(need_h / image.shape[0], need_w / image.shape[1])
        size = (int(np.ceil(image.shape[1] * scale)), int(np.ceil(image.shape[0] * scale)))
        image = np.asarray(Image.fromarray(image).resize(size, Image.BICUBIC))
    return np.stack(
        [
            image[i * step_y : i * step_y + height, i * step_x : i * step_x + width]
            for i in range(count)
        ]
    )


def _concat(media: ProcessedMedia) -> np.ndarray:
    return np.concatenate([item.patches for item in media.items])


def _needs_resize(family: str, height: int, width: int) -> bool:
    rule = released_processor_config(family).video_resize
    return rule.target_size(height, width) != (height, width)


# -- (a) Qwen2-VL --------------------------------------------------------------------------------
QWEN_NO_RESIZE = [(4, 280, 392), (5, 336, 448), (3, 308, 448), (2, 560, 840), (1, 336, 336)]
QWEN_RESIZE = [(3, 240, 320), (4, 300, 451), (5, 600, 800), (2, 812, 980), (6, 100, 700)]


def _qwen_case(count: int, height: int, width: int, index: int):
    family = "qwen2_vl"
    config = released_processor_config(family)
    processor = MediaProcessor(config)
    frames = _frames(count, height, width, _SOURCES[index % len(_SOURCES)])
    media = processor.process_video(frames, 2.0, "h")
    expected, grid = reference.pf_qwen_video(frames, *reference.video_pixels(family))

    assert tuple(grid[0]) == media.grid_thw, (media.grid_thw, grid[0])
    t, h, w = media.grid_thw
    assert t == (count + 1) // 2
    assert len(media.items) == t
    for item in media.items:
        assert item.grid_thw == (1, h, w)
        assert item.num_tokens == h * w // config.merge_size**2
    ours = _concat(media)
    assert ours.shape == expected.shape
    return processor, ours, expected


@pytest.mark.parametrize(
    ("count", "height", "width"),
    QWEN_NO_RESIZE,
    ids=[f"{n}x{h}x{w}" for n, h, w in QWEN_NO_RESIZE],
)
def test_qwen_video_without_resize_matches_paddleformers(count: int, height: int, width: int):
    """Frames already at their smart-resize size: no resampling on either side, so the
    normalized values must agree to float rounding (<= 1e-5)."""
    assert not _needs_resize("qwen2_vl", height, width)
    processor, ours, expected = _qwen_case(
        count, height, width, QWEN_NO_RESIZE.index((count, height, width))
    )
    diff = float(np.abs(processor.normalize(ours) - expected).max())
    assert diff <= 1e-5, f"max |diff| {diff:.3g}"


@pytest.mark.parametrize(
    ("count", "height", "width"),
    QWEN_RESIZE,
    ids=[f"{n}x{h}x{w}" for n, h, w in QWEN_RESIZE],
)
def test_qwen_video_with_resize_is_within_two_levels(count: int, height: int, width: int):
    """Frames that need a resize. paddleformers' video processor resizes with paddle's uint8
    bicubic with antialiasing, not Pillow's bicubic; we resize frames exactly like images
    (Pillow-exact). The two kernels differ by up to 2 uint8 levels, so grids must be equal and the
    normalized values may differ by at most 2 / 255 / min(std) (plus float rounding)."""
    assert _needs_resize("qwen2_vl", height, width)
    index = QWEN_RESIZE.index((count, height, width))
    processor, ours, expected = _qwen_case(count, height, width, index)
    diff = float(np.abs(processor.normalize(ours) - expected).max())
    bound = 2 / 255 / min(processor.config.image_std) + 1e-5
    assert diff <= bound, (
        f"max |diff| {diff:.4g} = {diff * 255 * min(processor.config.image_std):.2f} levels"
    )


# -- (b) ERNIE-4.5-VL ----------------------------------------------------------------------------
ERNIE_CASES = [(4, 476, 504), (6, 240, 320), (2, 600, 800), (3, 300, 451), (5, 130, 900)]


@pytest.mark.parametrize(
    ("count", "height", "width"),
    ERNIE_CASES,
    ids=[f"{n}x{h}x{w}" for n, h, w in ERNIE_CASES],
)
def test_ernie_video_matches_paddleformers(count: int, height: int, width: int):
    """Both sides resize with Pillow's bicubic on uint8: the uint8 rows must be identical. The
    reference is given the frames padded to an even count, as its video loader does."""
    family = "ernie4_5_vl"
    config = released_processor_config(family)
    index = ERNIE_CASES.index((count, height, width))
    frames = _frames(count, height, width, _SOURCES[index % len(_SOURCES)])
    media = MediaProcessor(config).process_video(frames, 2.0, "h")
    padded = pad_to_even(frames)
    expected, grid = reference.pf_ernie_video(padded, *reference.video_pixels(family))

    assert expected.dtype == np.uint8
    assert tuple(grid[0]) == media.grid_thw, (media.grid_thw, grid[0])
    t, h, w = media.grid_thw
    assert t == len(padded) == count + count % 2
    assert len(media.items) == t // 2
    for item in media.items:
        assert item.grid_thw == (2, h, w)
        assert item.num_tokens == 2 * h * w // (config.merge_size**2 * 2)
    ours = _concat(media)
    assert ours.shape == expected.shape
    differ = ours != expected
    assert not differ.any(), f"{int(differ.sum())} of {differ.size} uint8 values differ"


# -- (c) frame-index rules -----------------------------------------------------------------------
TOTALS = [
    1,
    2,
    3,
    4,
    5,
    7,
    10,
    12,
    15,
    16,
    17,
    30,
    31,
    59,
    60,
    61,
    99,
    100,
    101,
    198,
    299,
    300,
    301,
    527,
    625,
    1000,
    1537,
    3000,
    9999,
    20000,
    100000,
]
VIDEO_FPS = [1.0, 5.0, 10.0, 12.5, 23.976, 24.0, 25.0, 29.97, 30.0, 59.94, 60.0, 120.0]


def test_ernie_frame_indices_match_paddleformers():
    """ERNIE: n = int(duration * fps) clamped to [min, max] and to the frame count, the middle
    frame of each of n equal intervals (paddleformers ``_set_video_frame_args`` +
    ``get_frame_indices(frames_sample="middle")``)."""
    sampling = released_processor_config("ernie4_5_vl").frame_sampling
    assert (sampling.rule, sampling.fps, sampling.min_frames, sampling.max_frames) == (
        "ernie",
        2.0,
        16,
        180,
    )
    mismatches = []
    checked = 0
    settings = [(2.0, 16, 180), (1.0, 4, 64), (0.5, 0, 0), (3.0, 8, 0)]
    for (fps, lo, hi), total, video_fps in itertools.product(settings, TOTALS, VIDEO_FPS):
        got = ernie_frame_indices(total, video_fps, fps, lo, hi)
        checked += 1
        try:
            expected = reference.pf_ernie_frame_indices(total, video_fps, fps, lo, hi)
        except ValueError:
            # no minimum and int(duration * fps) == 0: the reference refuses; we sample nothing
            # (the video reader then reports an undecodable video)
            assert lo == 0 and int(total / video_fps * fps) == 0
            if got.size:
                mismatches.append((total, video_fps, fps, lo, hi, got[:8].tolist(), "raises"))
            continue
        if not np.array_equal(got, expected):
            mismatches.append(
                (total, video_fps, fps, lo, hi, got[:8].tolist(), expected[:8].tolist())
            )
        if (fps, lo, hi) == (2.0, 16, 180):
            assert np.array_equal(sampling.indices(total, video_fps), got)
    assert checked > 1000
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:5]}"


@pytest.mark.parametrize(
    ("total", "video_fps", "expected_count", "expected_prefix"),
    [
        (300, 30.0, 20, [7, 22, 37, 52]),
        (30, 10.0, 16, [0, 1, 3, 5]),
        (3000, 25.0, 180, [7, 24, 41]),
        (10, 30.0, 10, list(range(10))),
    ],
)
def test_ernie_frame_indices_known_cases(total, video_fps, expected_count, expected_prefix):
    got = ernie_frame_indices(total, video_fps, 2.0, 16, 180)
    assert len(got) == expected_count
    assert got[: len(expected_prefix)].tolist() == expected_prefix


def test_fastdeploy_sampler_cases():
    """FastDeploy's sampler cases (REFERENCE.md): 4 of 12 frames, middle -> [1, 4, 7, 10] (ours:
    12 frames at 6 fps sampled at 2 fps, no clamping); 5 of 10, leading -> [0, 2, 4, 6, 8] (only
    the reference has a "leading" mode; our Qwen rule gives the same uniform indices for 5 of
    10)."""
    assert reference.pf_get_frame_indices(12, 4, "middle").tolist() == [1, 4, 7, 10]
    assert ernie_frame_indices(12, 6.0, 2.0, 0, 0).tolist() == [1, 4, 7, 10]
    assert reference.pf_get_frame_indices(10, 5, "leading").tolist() == [0, 2, 4, 6, 8]
    assert np.floor(np.arange(5) * (10 / 5)).astype(int).tolist() == [0, 2, 4, 6, 8]


def test_qwen_frame_indices_against_paddleformers():
    """Qwen2-VL: the count equals paddleformers' count rule (``vision_process.smart_nframes``,
    and the length of ``Qwen2VLVideoProcessor.sample_frames``); the indices are our documented
    ``floor(arange(n) * total / n)``.

    ``sample_frames`` sometimes returns n + 1 indices: the length of
    ``np.arange(0, total, total / n)`` is ``ceil(total / (total / n))``, which float rounding can
    lift to n + 1 (59 frames at 1 fps: n = 58 but 59 indices, an odd count that its own
    temporal patching then pads). We count n, as its count rule intends.

    paddleformers computes ``np.arange(0, total, total / n, dtype=int)``: numpy's integer arange
    truncates the *step* (it casts ``start + step`` to int and steps by the difference), so for a
    non-integer ``total / n`` the reference samples a prefix of the video (10 frames, n = 4:
    [0, 2, 4, 6] instead of [0, 2, 5, 7]). Where the step is an integer both agree exactly; we
    check ours is uniformly spread over the whole video.
    """
    sampling = released_processor_config("qwen2_vl").frame_sampling
    assert (sampling.rule, sampling.fps, sampling.min_frames, sampling.max_frames) == (
        "qwen",
        2.0,
        4,
        768,
    )
    problems = []
    arange_artifacts = 0
    settings = [(2.0, 4, 768), (1.0, 4, 64), (4.0, 2, 1000), (0.5, 8, 16)]
    for (fps, lo, hi), total, video_fps in itertools.product(settings, TOTALS, VIDEO_FPS):
        got = qwen_frame_indices(total, video_fps, fps, lo, hi)
        if (fps, lo, hi) == (2.0, 4, 768):
            assert np.array_equal(sampling.indices(total, video_fps), got)
        if total < 2:
            # the reference divides by zero (n = 0); we keep the single frame
            assert got.tolist() == list(range(total))
            continue
        key = (total, video_fps, fps, lo, hi)
        n = reference.pf_qwen_nframes(total, video_fps, fps, lo, hi)
        expected = reference.pf_qwen_sample_frames(total, video_fps, fps, lo, hi)
        if len(expected) != n:
            # the reference's float-length artifact described above
            assert len(expected) == n + 1 and total / (total / n) > n, key
            arange_artifacts += 1
            expected = expected[:n]
        if len(got) != n:
            problems.append((key, "count", len(got), n))
            continue
        if got.tolist() != np.floor(np.arange(n) * (total / n)).astype(np.int64).tolist():
            problems.append((key, "rule", got[:6].tolist()))
            continue
        if float(total / n).is_integer() and not np.array_equal(got, expected):
            problems.append((key, "integer step differs", got[:6].tolist(), expected[:6].tolist()))
            continue
        uniform = (
            n % 2 == 0
            and got[0] == 0
            and bool(np.all(np.diff(got) > 0))
            and got[-1] >= total - total / n - 1
            and got[-1] < total
        )
        if not uniform:
            problems.append((key, "not uniform", got.tolist()))
    assert not problems, f"{len(problems)} problems, first: {problems[:5]}"


@pytest.mark.parametrize(
    ("total", "video_fps", "expected"),
    [
        (300, 30.0, list(range(0, 300, 15))),
        (30, 10.0, [0, 5, 10, 15, 20, 25]),
        (10, 30.0, [0, 2, 5, 7]),  # paddleformers: [0, 2, 4, 6] (truncated integer step)
        (100000, 30.0, None),
    ],
)
def test_qwen_frame_indices_known_cases(total, video_fps, expected):
    got = qwen_frame_indices(total, video_fps, 2.0, 4, 768)
    if expected is None:
        assert len(got) == 768 and got[0] == 0 and got[-1] >= total - total / 768 - 1
    else:
        assert got.tolist() == expected
