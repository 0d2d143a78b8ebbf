"""Decoding encoded image bytes into an RGB Pillow image, with limits checked from the header."""

from __future__ import annotations

import io
import warnings

from PIL import Image, ImageOps, UnidentifiedImageError

from vision.errors import InvalidMediaRequest, MediaTooLarge, UndecodableMedia, UnsupportedMedia
from vision.limits import MediaLimits

ACCEPTED_IMAGE_FORMATS = frozenset({"JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "MPO"})


def decode_image(data: bytes, limits: MediaLimits) -> Image.Image:
    """Decode ``data`` into an RGB image.

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
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
    except Image.DecompressionBombError as e:
        raise MediaTooLarge(f"image declares too many pixels: {e}") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise UndecodableMedia(f"image data is truncated or corrupt: {e}") from None
    return to_rgb(ImageOps.exif_transpose(image))


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
        if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
            # Match Pillow's RGBA route used by the reference processors.
            return _composite_on_white(image.convert("RGBA"))
        return image.convert("RGB")
    return _composite_on_white(image.convert("RGBA"))


def _composite_on_white(rgba: Image.Image) -> Image.Image:
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")
