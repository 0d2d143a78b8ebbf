"""Real photographs and scans from scikit-image, encoded as JPEG/PNG/WebP at several sizes."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "page", "text", "camera")


@dataclass(frozen=True)
class EncodedImage:
    name: str
    data: bytes


def load_photo(name: str) -> Image.Image:
    """A scikit-image sample image (shipped with the package, no download)."""
    try:
        from skimage import data as skdata
    except ImportError as e:  # pragma: no cover - the test extras install it
        raise SystemExit(
            "the benchmark corpus needs scikit-image: pip install 'vlm-serve[test]'"
        ) from e
    array = getattr(skdata, name)()
    if array.dtype != np.uint8:
        array = (np.clip(array, 0, 1) * 255).astype(np.uint8)
    return Image.fromarray(array)


def encode(image: Image.Image, fmt: str, **save_args) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **save_args)
    return buf.getvalue()


def mixed_corpus() -> list[EncodedImage]:
    """26 images of mixed sizes and formats, shaped like a serving workload.

    8 photos and scans x (JPEG 1280x960 camera shot, PNG at native size 172..1000 px, WebP
    640 px wide web image), plus 2 phone photos (JPEG 4032x3024, 12 Mpx).
    """
    out = []
    for name in PHOTOS:
        photo = load_photo(name)
        rgb = photo.convert("RGB")
        out.append(EncodedImage(f"{name}.jpg", encode(rgb.resize((1280, 960)), "JPEG", quality=90)))
        out.append(EncodedImage(f"{name}.png", encode(photo, "PNG")))
        small = rgb.resize((640, max(28, round(640 * rgb.height / rgb.width))))
        out.append(EncodedImage(f"{name}.webp", encode(small, "WEBP", quality=85)))
    for name in ("astronaut", "coffee"):
        phone = load_photo(name).convert("RGB").resize((4032, 3024), Image.Resampling.BICUBIC)
        out.append(EncodedImage(f"{name}-phone.jpg", encode(phone, "JPEG", quality=90)))
    return out
