"""Video decoding with OpenCV and each family's frame-sampling rule."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass

import cv2
import numpy as np

from vision.errors import MediaTooLarge, UndecodableMedia

cv2.setNumThreads(1)


@dataclass(frozen=True)
class VideoMeta:
    """What the container says about a video (frame count may be corrected by decoding)."""

    num_frames: int
    fps: float
    width: int
    height: int

    @property
    def duration_s(self) -> float:
        return self.num_frames / self.fps if self.fps > 0 else 0.0


@dataclass(frozen=True)
class FrameSampling:
    """A family's rule for choosing frames.

    Attributes:
        rule: ``"qwen"`` (fps-based count, uniform ``floor(i * total / n)`` indices) or
            ``"ernie"`` (count from duration * fps, one frame from the middle of each of n equal
            intervals).
        fps: target frames per second.
        min_frames / max_frames: bounds on the number of sampled frames.
        frame_factor: the count is made a multiple of this (2: temporal chunks of two frames).
    """

    rule: str
    fps: float
    min_frames: int
    max_frames: int
    frame_factor: int = 2

    def indices(self, total_frames: int, video_fps: float) -> np.ndarray:
        """Indices of the frames to decode, before padding to an even count."""
        if total_frames <= 0:
            raise UndecodableMedia("video has no frames")
        if self.rule == "qwen":
            return qwen_frame_indices(
                total_frames,
                video_fps,
                self.fps,
                self.min_frames,
                self.max_frames,
                self.frame_factor,
            )
        if self.rule == "ernie":
            return ernie_frame_indices(
                total_frames, video_fps, self.fps, self.min_frames, self.max_frames
            )
        raise ValueError(f"unknown frame sampling rule {self.rule!r}")


def qwen_frame_indices(
    total: int, video_fps: float, fps: float, min_frames: int, max_frames: int, factor: int = 2
) -> np.ndarray:
    """Qwen2-VL rule: ``n = total / video_fps * fps`` clamped to ``[min_frames, min(max_frames,
    total)]`` and floored to a multiple of ``factor``; indices ``floor(arange(0, total, total/n))``.

    A video shorter than ``factor`` frames keeps all its frames (the last is repeated later).
    """
    upper = math.floor(min(max_frames, total) / factor) * factor
    n = total / video_fps * fps if video_fps > 0 else float(min_frames)
    n = min(max(n, min_frames), upper, total)
    n = math.floor(n / factor) * factor
    if n <= 0:
        return np.arange(total, dtype=np.int64)
    return np.floor(np.arange(n) * (total / n)).astype(np.int64)


def ernie_frame_indices(
    total: int, video_fps: float, fps: float, min_frames: int, max_frames: int
) -> np.ndarray:
    """ERNIE-4.5-VL rule: ``n = int(duration * fps)`` clamped to ``[min_frames, max_frames]`` (and
    to ``total``); the video is cut into ``n`` equal intervals and the middle frame of each is
    taken."""
    duration = total / video_fps if video_fps > 0 else 0.0
    n = int(duration * fps)
    if min_frames > 0 and n < min_frames:
        n = min_frames
    if max_frames > 0 and n > max_frames:
        n = max_frames
    n = min(n, total)
    bounds = np.linspace(0, total, n + 1).astype(np.int64)
    return (bounds[:-1] + (bounds[1:] - 1)) // 2


def pad_to_even(frames: np.ndarray, factor: int = 2) -> np.ndarray:
    """Repeat the last frame until the count is a multiple of ``factor``."""
    missing = (-len(frames)) % factor
    if missing == 0:
        return frames
    return np.concatenate([frames, np.repeat(frames[-1:], missing, axis=0)], axis=0)


def read_video(
    data: bytes, sampling: FrameSampling, max_frames: int
) -> tuple[np.ndarray, VideoMeta]:
    """Decode the sampled frames of an encoded video.

    Returns ``(frames [n, H, W, 3] uint8 RGB, meta)``. Frames are decoded sequentially (grab all,
    retrieve only the sampled ones), which is robust to containers with inexact seeking.
    """
    if not data:
        raise UndecodableMedia("video is empty (0 bytes)")
    fd, path = tempfile.mkstemp(suffix=".video")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return _read_video_file(path, sampling, max_frames)
    finally:
        os.unlink(path)


def _read_video_file(
    path: str, sampling: FrameSampling, max_frames: int
) -> tuple[np.ndarray, VideoMeta]:
    capture = cv2.VideoCapture(path)
    try:
        if not capture.isOpened():
            raise UndecodableMedia("bytes are not a video OpenCV can open")
        meta = VideoMeta(
            num_frames=int(capture.get(cv2.CAP_PROP_FRAME_COUNT)),
            fps=float(capture.get(cv2.CAP_PROP_FPS) or 0.0),
            width=int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
            height=int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        )
        if meta.num_frames <= 0:
            meta = VideoMeta(_count_frames(capture), meta.fps, meta.width, meta.height)
            capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
        if meta.num_frames <= 0:
            raise UndecodableMedia("video has no decodable frames")
        wanted = sampling.indices(meta.num_frames, meta.fps)
        if len(wanted) > max_frames:
            raise MediaTooLarge(
                f"video would need {len(wanted)} frames, above the limit of {max_frames}"
            )
        frames = _decode_indices(capture, wanted)
    finally:
        capture.release()
    if not frames:
        raise UndecodableMedia("video has no decodable frames")
    return np.stack(frames), meta


def _count_frames(capture: cv2.VideoCapture) -> int:
    count = 0
    while capture.grab():
        count += 1
    return count


def _decode_indices(capture: cv2.VideoCapture, wanted: np.ndarray) -> list[np.ndarray]:
    """Decode frames at ``wanted`` (sorted, may repeat); stops early if the stream ends."""
    frames: list[np.ndarray] = []
    position = -1
    last: np.ndarray | None = None
    for index in wanted.tolist():
        while position < index:
            if not capture.grab():
                return frames
            position += 1
            last = None
        if last is None:
            ok, bgr = capture.retrieve()
            if not ok:
                return frames
            last = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        frames.append(last)
    return frames
