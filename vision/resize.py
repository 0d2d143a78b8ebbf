"""Smart resize: the target size each family resizes an image or frame to.

All families round both sides to a multiple of ``factor`` (patch size x merge size) and keep the
pixel count within ``[min_pixels, max_pixels]``; they differ in small edge-case rules, captured
by :class:`ResizeRule` so each family's processor reproduces its reference exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vision.errors import InvalidMediaRequest

MAX_ASPECT_RATIO = 200.0


@dataclass(frozen=True)
class ResizeRule:
    """Parameters of one family's smart resize.

    Attributes:
        factor: both output sides are multiples of this (patch size x spatial merge size).
        min_pixels: smallest output pixel count.
        max_pixels: largest output pixel count.
        lift_short_side: first scale a side shorter than ``factor`` up to ``factor`` (PaddleOCR-VL).
        at_least_factor_when_rounding: clamp the rounded sides to ``factor`` (ERNIE, Qwen video).
        at_least_factor_when_shrinking: clamp the shrunk sides to ``factor`` (Qwen images).
    """

    factor: int
    min_pixels: int
    max_pixels: int
    lift_short_side: bool = False
    at_least_factor_when_rounding: bool = False
    at_least_factor_when_shrinking: bool = False

    def target_size(self, height: int, width: int) -> tuple[int, int]:
        """Return ``(height, width)`` of the resized image."""
        f = self.factor
        if self.lift_short_side:
            if height < f:
                width, height = round(width * f / height), f
            if width < f:
                height, width = round(height * f / width), f
        ratio = max(height, width) / min(height, width)
        if ratio > MAX_ASPECT_RATIO:
            raise InvalidMediaRequest(
                f"image is {width}x{height}: aspect ratio {ratio:.1f} is above "
                f"{MAX_ASPECT_RATIO:g}; crop or pad it"
            )
        h_bar, w_bar = round(height / f) * f, round(width / f) * f
        if self.at_least_factor_when_rounding:
            h_bar, w_bar = max(f, h_bar), max(f, w_bar)
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h_bar = math.floor(height / beta / f) * f
            w_bar = math.floor(width / beta / f) * f
            if self.at_least_factor_when_shrinking:
                h_bar, w_bar = max(f, h_bar), max(f, w_bar)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar = math.ceil(height * beta / f) * f
            w_bar = math.ceil(width * beta / f) * f
        if h_bar <= 0 or w_bar <= 0:
            raise InvalidMediaRequest(f"image of {width}x{height} pixels is too small to process")
        return h_bar, w_bar
