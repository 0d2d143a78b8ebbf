"""``vlm-server bench ingest``: our image pipeline vs paddleformers' Qwen2-VL image processor.

Both sides start from the same encoded bytes (decode included) and run single-threaded. Ours
produces uint8 patches (normalization happens in the model); the reference produces normalized
float32 pixel values. ``max_abs_diff`` compares the reference with our patches normalized by
:meth:`MediaProcessor.normalize`.
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from benchmarks.media_corpus import EncodedImage, mixed_corpus
from encoder_cache.processor_cache import ProcessorCache
from vision.ingest import MediaIngestor
from vision.processor_config import ProcessorConfig

# Released Qwen2-VL preprocessor settings.
QWEN2_VL_CONFIG = {"model_type": "qwen2_vl"}
QWEN2_VL_PREPROCESSOR = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}


def reference_processor():
    """paddleformers' Qwen2-VL image processor with the released settings."""
    import paddleformers  # noqa: F401  (must precede transformers' processors)
    from paddleformers.transformers.qwen2_vl.image_processor import Qwen2VLImageProcessor

    return Qwen2VLImageProcessor(
        min_pixels=QWEN2_VL_PREPROCESSOR["min_pixels"],
        max_pixels=QWEN2_VL_PREPROCESSOR["max_pixels"],
    )


def reference_decode_and_process(processor, data: bytes) -> dict[str, np.ndarray]:
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    return processor(image, return_tensors="np")


def _best_time(fn, data: bytes, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(data)
        best = min(best, time.perf_counter() - start)
    return best


LARGE_PIXELS = 4_000_000
"""Images above this many pixels count as large (phone photos) in the breakdown."""


def run(repeat: int = 3, corpus: list[EncodedImage] | None = None) -> dict[str, Any]:
    """Measure both pipelines on ``corpus`` (default: :func:`mixed_corpus`)."""
    _single_thread()
    corpus = corpus if corpus is not None else mixed_corpus()
    config = ProcessorConfig.from_dicts(QWEN2_VL_CONFIG, QWEN2_VL_PREPROCESSOR)
    reference = reference_processor()
    uncached = MediaIngestor(config, cache=ProcessorCache(0))
    cached = MediaIngestor(config, cache=ProcessorCache(4 << 30))

    max_diff = 0.0
    ours_s = ref_s = hit_s = 0.0
    large = {"ours": 0.0, "ref": 0.0, "n": 0}
    for item in corpus:
        ours = uncached.image(item.data)
        ref = reference_decode_and_process(reference, item.data)
        if tuple(ref["image_grid_thw"][0]) != ours.grid_thw:
            raise AssertionError(f"{item.name}: grid {ref['image_grid_thw'][0]} vs {ours.grid_thw}")
        ours_values = uncached.processor.normalize(ours.items[0].patches)
        max_diff = max(max_diff, float(np.abs(ours_values - ref["pixel_values"]).max()))
        cached.image(item.data)
        t_ours = _best_time(uncached.image, item.data, repeat)
        t_ref = _best_time(lambda d: reference_decode_and_process(reference, d), item.data, repeat)
        ours_s += t_ours
        ref_s += t_ref
        hit_s += _best_time(cached.image, item.data, max(repeat, 5))
        width, height = Image.open(io.BytesIO(item.data)).size
        if width * height > LARGE_PIXELS:
            large["ours"] += t_ours
            large["ref"] += t_ref
            large["n"] += 1
    n = len(corpus)
    small_ours, small_ref = ours_s - large["ours"], ref_s - large["ref"]
    return {
        "images": n,
        "large_images": large["n"],
        "ours_images_per_s": round(n / ours_s, 2),
        "reference_images_per_s": round(n / ref_s, 2),
        "hit_images_per_s": round(n / hit_s, 2),
        "speedup": round(ref_s / ours_s, 2),
        "speedup_without_large": round(small_ref / small_ours, 2) if small_ours else None,
        "hit_speedup": round(ref_s / hit_s, 2),
        "max_abs_diff": max_diff,
        "reference": "paddleformers Qwen2VLImageProcessor (decode included), single thread",
    }


def _single_thread() -> None:
    import cv2

    cv2.setNumThreads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass
