"""Decoding encoded image bytes into RGB pixels, with limits checked from the header first.

Pillow reads the header (format, size, mode, EXIF orientation). Plain 8-bit RGB or grayscale
JPEG, PNG and WebP files without rotation are then decoded by OpenCV, which uses the same codecs
and gives identical pixels faster; everything else (transparency, palettes, CMYK, 16-bit, EXIF
rotation...) is decoded and converted by Pillow.
"""

from __future__ import annotations

import io
import warnings

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vision.errors import InvalidMediaRequest, MediaTooLarge, UndecodableMedia, UnsupportedMedia
from vision.limits import MediaLimits

ACCEPTED_IMAGE_FORMATS = frozenset({"JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "MPO"})
_FAST_FORMATS = frozenset({"JPEG", "PNG", "WEBP"})
_EXIF_ORIENTATION = 0x0112


def decode_image(data: bytes, limits: MediaLimits) -> np.ndarray:
    """Decode ``data`` into RGB pixels ``[H, W, 3]`` uint8.

    The size is read from the header and checked against ``limits`` before any pixel data is
    decoded. EXIF orientation is applied; transparency is composited on white; every other mode
    (grayscale, palette, CMYK, 16-bit) is converted to RGB.
    """
    if not data:
        raise UndecodableMedia("image is empty (0 bytes)")
    if len(data) > limits.max_image_bytes:
        raise MediaTooLarge(
            f"image is {len(data)} bytes, above the limit of {limits.max_image_bytes} bytes"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:
        raise MediaTooLarge(f"image declares too many pixels: {e}") from None
    except UnidentifiedImageError:
        raise UnsupportedMedia(
            "bytes are not a supported image (accepted: JPEG, PNG, WebP, GIF, BMP, TIFF)"
        ) from None
    except (OSError, SyntaxError, ValueError) as e:
        raise UndecodableMedia(f"image header cannot be read: {e}") from None
    if image.format not in ACCEPTED_IMAGE_FORMATS:
        raise UnsupportedMedia(f"image format {image.format} is not supported")
    check_image_size(*image.size, limits)
    fast = _decode_plain(data, image)
    if fast is not None:
        return fast
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
    except Image.DecompressionBombError as e:
        raise MediaTooLarge(f"image declares too many pixels: {e}") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise UndecodableMedia(f"image data is truncated or corrupt: {e}") from None
    return np.asarray(to_rgb(ImageOps.exif_transpose(image)))


def _decode_plain(data: bytes, image: Image.Image) -> np.ndarray | None:
    """OpenCV decode for plain 8-bit RGB/grayscale files; None when Pillow must decode."""
    if image.format not in _FAST_FORMATS or image.mode not in ("RGB", "L"):
        return None
    if "transparency" in image.info:
        return None
    if image.format != "WEBP":  # Pillow's WebP reader has no tiles; its mode says it all
        if not image.tile:
            return None
        rawmode = image.tile[0][3]
        rawmode = rawmode[0] if isinstance(rawmode, tuple) else rawmode
        if rawmode not in ("RGB", "L", "RGBX"):
            return None
    if image.format == "JPEG" and not data.rstrip(b"\x00\r\n ").endswith(b"\xff\xd9"):
        return None  # possibly truncated: let Pillow decide
    if image.format == "PNG":
        if b"eXIf" in data:  # Pillow would have to decode the whole file to read it
            return None
    else:
        try:
            if image.getexif().get(_EXIF_ORIENTATION, 1) not in (1, None):
                return None
        except Exception:  # noqa: BLE001 - malformed EXIF: Pillow's path reports it
            return None
    flags = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    if bgr is None or bgr.shape[:2] != (image.height, image.width):
        return None
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def check_image_size(width: int, height: int, limits: MediaLimits) -> None:
    """Refuse empty, too large or too elongated images."""
    if width <= 0 or height <= 0:
        raise UndecodableMedia(f"image has an empty size {width}x{height}")
    if width * height > limits.max_image_pixels:
        raise MediaTooLarge(
            f"image is {width}x{height} = {width * height} pixels, above the limit of "
            f"{limits.max_image_pixels} pixels; downscale it before sending"
        )
    ratio = max(width, height) / min(width, height)
    if ratio > limits.max_aspect_ratio:
        raise InvalidMediaRequest(
            f"image is {width}x{height}: aspect ratio {ratio:.1f} is above the limit of "
            f"{limits.max_aspect_ratio:g}; crop or pad it"
        )


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert to RGB, compositing any transparency on a white background."""
    if image.mode == "RGB":
        return image
    has_alpha = image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        image.mode == "P" and "transparency" in image.info
    )
    if not has_alpha:
        return image.convert("RGB")
    return _composite_on_white(image.convert("RGBA"))


def _composite_on_white(rgba: Image.Image) -> Image.Image:
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")
