"""Image parity: our decode + process pipeline against the reference processors.

For every family and every image of a corpus of real photographs (scikit-image) and synthesised
edge cases, each encoded to bytes with Pillow, our pipeline
(``MediaIngestor(released_processor_config(family)).image(data)``) must give the same grid and
the same pixels as

* ``hf``: transformers' numpy/PIL image processor (Qwen2VLImageProcessor for both Qwen families,
  PaddleOCRVLImageProcessor, Ernie4_5_VLMoeImageProcessor), normalized float32 values within
  1e-5 of our ``normalize()``;
* ``pf``: paddleformers' image processor (float32 for Qwen and PaddleOCR-VL; for ERNIE the
  processor path's uint8 rows, compared exactly with our uint8 patches).

The references are fed with ``reference.reference_decode(data)``: EXIF orientation applied and
transparency composited on white (Qwen's ``fetch_image``); they convert other modes to RGB.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image

from encoder_cache.processor_cache import ProcessorCache
from tests import reference
from vision.ingest import MediaIngestor
from vision.processor import MediaProcessor
from vision.released_configs import released_processor_config
from vision.types import ProcessedMedia

TOLERANCE = 1e-5
ROW_CHUNK = 8192  # rows normalized and compared at a time (bounds memory on the 12 Mpx image)


# -- corpus --------------------------------------------------------------------------------------
def _photo(name: str) -> np.ndarray:
    from skimage import data

    return np.ascontiguousarray(getattr(data, name)())


def _rgb(name: str) -> Image.Image:
    array = _photo(name)
    if array.ndim == 2:
        return Image.fromarray(array).convert("RGB")
    return Image.fromarray(array[:, :, :3])


def _encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **kwargs)
    return buf.getvalue()


def _alpha_ramp(height: int, width: int) -> Image.Image:
    """Alpha with fully transparent, fully opaque and partial regions."""
    y, x = np.mgrid[0:height, 0:width]
    alpha = np.clip((x * 2.0 / width - 0.5) * 255, 0, 255).astype(np.uint8)
    alpha[: height // 4] = 0
    alpha[height // 4 : height // 2, : width // 3] = 255
    alpha[(y + x) % 37 == 0] = 128
    return Image.fromarray(alpha, "L")


def _with_alpha(image: Image.Image) -> Image.Image:
    rgba = image.convert("RGBA")
    rgba.putalpha(_alpha_ramp(image.height, image.width))
    return rgba


def _logo_cutout() -> Image.Image:
    """skimage's logo (opaque RGBA) with its white background made transparent, and other
    colours hidden under the transparent pixels (they must not leak through)."""
    logo = _photo("logo").copy()
    background = (logo[..., :3] > 235).all(axis=2)
    hidden = np.asarray(_rgb("coffee").resize(logo.shape[1::-1]))
    logo[background, :3] = hidden[background]
    logo[background, 3] = 0
    return Image.fromarray(logo, "RGBA")


def _exif_jpeg(image: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _encode(image, "JPEG", quality=90, exif=exif)


def _palette_with_transparency(image: Image.Image) -> bytes:
    pal = image.quantize(64)
    # make the most frequent palette index transparent: large real transparent areas
    index = int(np.bincount(np.asarray(pal).ravel()).argmax())
    return _encode(pal, "PNG", transparency=index)


def _corpus_builders() -> dict[str, Callable[[], bytes]]:
    coffee = _rgb("coffee")
    return {
        # real photographs, plain RGB / grayscale
        "astronaut_png": lambda: _encode(_rgb("astronaut"), "PNG"),
        "coffee_jpeg": lambda: _encode(coffee, "JPEG", quality=90),
        "chelsea_jpeg_q75": lambda: _encode(_rgb("chelsea"), "JPEG", quality=75),
        "rocket_jpeg": lambda: _encode(_rgb("rocket"), "JPEG", quality=95),
        "hubble_jpeg": lambda: _encode(_rgb("hubble_deep_field"), "JPEG", quality=85),
        "camera_gray_png": lambda: _encode(Image.fromarray(_photo("camera")), "PNG"),
        "page_gray_jpeg": lambda: _encode(Image.fromarray(_photo("page")), "JPEG", quality=90),
        "text_gray_png": lambda: _encode(Image.fromarray(_photo("text")), "PNG"),
        # size edge cases
        "tiny_10x300_png": lambda: _encode(coffee.crop((100, 150, 400, 160)), "PNG"),
        "tiny_300x10_jpeg": lambda: _encode(coffee.crop((200, 50, 210, 350)), "JPEG"),
        # (a 1- or 3-pixel-high image makes transformers guess channels-first: not usable)
        "tiny_5x7_png": lambda: _encode(coffee.crop((300, 200, 307, 205)), "PNG"),
        "round_half_70x126_png": lambda: _encode(coffee.crop((10, 20, 136, 90)), "PNG"),
        "huge_4000x3000_jpeg": lambda: _encode(
            _rgb("hubble_deep_field").resize((4000, 3000), Image.BICUBIC), "JPEG", quality=85
        ),
        "extreme_28x4000_png": lambda: _encode(
            _rgb("retina").resize((4000, 1411 * 28 // 140)).crop((0, 100, 4000, 128)), "PNG"
        ),
        # modes with transparency or conversions
        "logo_rgba_png": lambda: _encode(_logo_cutout(), "PNG"),
        "chelsea_rgba_ramp_png": lambda: _encode(_with_alpha(_rgb("chelsea")), "PNG"),
        "camera_la_png": lambda: _encode(
            Image.merge("LA", (Image.fromarray(_photo("camera")), _alpha_ramp(512, 512))),
            "PNG",
        ),
        "astronaut_palette_png": lambda: _encode(_rgb("astronaut").quantize(256), "PNG"),
        "coffee_palette_transparent_png": lambda: _palette_with_transparency(coffee),
        "chelsea_cmyk_jpeg": lambda: _encode(_rgb("chelsea").convert("CMYK"), "JPEG"),
        "rocket_exif6_jpeg": lambda: _exif_jpeg(_rgb("rocket"), 6),
        "coffee_exif3_jpeg": lambda: _exif_jpeg(coffee, 3),
        "moon_gray16_png": lambda: _encode(
            Image.fromarray((_photo("moon").astype(np.uint16) * 257 + 13).astype(np.uint16)),
            "PNG",
        ),
        "ihc_webp_lossy": lambda: _encode(_rgb("immunohistochemistry"), "WEBP", quality=80),
        "chelsea_webp_alpha": lambda: _encode(_with_alpha(_rgb("chelsea")), "WEBP", quality=80),
        "astronaut_bmp": lambda: _encode(_rgb("astronaut"), "BMP"),
        "coffee_gif": lambda: _encode(coffee, "GIF"),
    }


CORPUS_NAMES = tuple(_corpus_builders())


@pytest.fixture(scope="module")
def corpus() -> dict[str, bytes]:
    return {name: build() for name, build in _corpus_builders().items()}


def test_corpus_covers_the_modes(corpus: dict[str, bytes]) -> None:
    """The corpus really exercises the formats and modes it is named after."""
    seen = {}
    for name, data in corpus.items():
        image = Image.open(io.BytesIO(data))
        seen[name] = (image.format, image.mode, image.size)
    assert len(corpus) >= 20
    modes = {mode for _, mode, _ in seen.values()}
    assert {"RGB", "L", "RGBA", "LA", "P", "CMYK", "I;16"} <= modes, modes
    formats = {fmt for fmt, _, _ in seen.values()}
    assert {"JPEG", "PNG", "WEBP", "BMP", "GIF"} <= formats, formats
    assert seen["huge_4000x3000_jpeg"][2] == (4000, 3000)
    assert seen["extreme_28x4000_png"][2] == (4000, 28)
    assert seen["tiny_10x300_png"][2] == (300, 10)
    assert seen["tiny_300x10_jpeg"][2] == (10, 300)
    assert seen["chelsea_webp_alpha"][1] == "RGBA"
    assert "transparency" in Image.open(io.BytesIO(corpus["coffee_palette_transparent_png"])).info
    for name in ("rocket_exif6_jpeg", "coffee_exif3_jpeg"):
        assert Image.open(io.BytesIO(corpus[name])).getexif()[0x0112] in (3, 6)
    alpha = np.asarray(Image.open(io.BytesIO(corpus["logo_rgba_png"])))[..., 3]
    assert (alpha == 0).any() and (alpha == 255).any()


# -- our pipeline and the references, computed once and shared -----------------------------------
class _SmallCache:
    """Keeps the last few results: tests run image-major, so a handful of entries suffice."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict = OrderedDict()

    def get(self, key, compute):
        if key in self.entries:
            self.entries.move_to_end(key)
            return self.entries[key]
        value = compute()
        self.entries[key] = value
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return value


_OURS = _SmallCache(4)
_REFERENCE = _SmallCache(6)
_DECODED = _SmallCache(2)


def _settings_key(family: str) -> str:
    """Families with identical preprocessor settings share reference outputs (both Qwens)."""
    return repr(sorted(reference.released_preprocessor(family).items()))


def ours(family: str, name: str, data: bytes) -> ProcessedMedia:
    def compute() -> ProcessedMedia:
        ingestor = MediaIngestor(released_processor_config(family), cache=ProcessorCache(0))
        return ingestor.image(data)

    return _OURS.get((family, name), compute)


def reference_output(which: str, family: str, name: str, data: bytes):
    image = _DECODED.get(name, lambda: reference.reference_decode(data))
    call = {"hf": reference.hf_image, "pf": reference.pf_image}[which]
    kind = "qwen" if family in reference.QWEN_FAMILIES else family
    key = (which, kind, _settings_key(family), name)
    return _REFERENCE.get(key, lambda: call(family, image))


def _max_abs_diff_normalized(
    processor: MediaProcessor, patches: np.ndarray, expected: np.ndarray
) -> tuple[float, int]:
    """Max |normalize(patches) - expected| and number of differing values, chunk by chunk."""
    worst, count = 0.0, 0
    for start in range(0, len(patches), ROW_CHUNK):
        got = processor.normalize(patches[start : start + ROW_CHUNK])
        diff = np.abs(got - expected[start : start + ROW_CHUNK].astype(np.float32))
        worst = max(worst, float(diff.max(initial=0.0)))
        count += int((diff > TOLERANCE).sum())
    return worst, count


PARAMS = [
    pytest.param(family, name, which, id=f"{family}-{name}-{which}")
    for name in CORPUS_NAMES
    for family in reference.IMAGE_FAMILIES
    for which in ("hf", "pf")
]


@pytest.mark.parametrize(("family", "name", "which"), PARAMS)
def test_image_matches_reference(
    corpus: dict[str, bytes], family: str, name: str, which: str
) -> None:
    data = corpus[name]
    media = ours(family, name, data)
    expected_pixels, expected_grid = reference_output(which, family, name, data)

    assert media.modality == "image" and len(media.items) == 1
    item = media.items[0]
    assert tuple(expected_grid[0]) == media.grid_thw == item.grid_thw, (
        f"{family}/{name} ({which}): grid {media.grid_thw}, reference {expected_grid[0]}"
    )
    patches = item.patches
    assert patches.dtype == np.uint8
    assert patches.shape == expected_pixels.shape, (patches.shape, expected_pixels.shape)
    config = released_processor_config(family)
    assert item.num_tokens == int(np.prod(item.grid_thw)) // config.merge_size**2

    if family == "ernie4_5_vl" and which == "pf":
        # paddleformers' ERNIE processor path returns un-normalized uint8 rows: exact equality
        assert expected_pixels.dtype == np.uint8
        differ = patches != expected_pixels
        assert not differ.any(), (
            f"{family}/{name} (pf): {int(differ.sum())} of {differ.size} uint8 values differ, "
            f"max |diff| {int(np.abs(patches.astype(int) - expected_pixels).max())} levels"
        )
        return
    worst, count = _max_abs_diff_normalized(MediaProcessor(config), patches, expected_pixels)
    assert worst <= TOLERANCE, (
        f"{family}/{name} ({which}): max |diff| {worst:.6g} of normalized values "
        f"({count} of {expected_pixels.size} above {TOLERANCE})"
    )
