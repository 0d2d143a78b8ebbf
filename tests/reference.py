"""Calling the reference implementations (paddleformers 1.2 and transformers 5.x) from tests.

Every processor is configured with exactly the settings of ``RELEASED[family]`` (the released
checkpoints' ``preprocessor_config.json``), so a parity test compares like with like. Imports are
lazy (paddle and transformers take seconds to load) and processors are cached.

Rules the references impose (see the notes next to each wrapper):

* ``paddleformers`` is always imported before a transformers processor (otherwise transformers
  may fail on a missing ``torchcodec`` metadata lookup);
* paddleformers' PaddleOCR-VL modeling imports ``triton`` at import time: a minimal stand-in is
  registered under that name when the real package is not importable;
* paddleformers' ``BaseImageProcessor`` subclasses need ``return_tensors`` or ``.preprocess``.
"""

from __future__ import annotations

import io
from functools import cache
from types import SimpleNamespace
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from benchmarks.model_reference import install_triton_stub
from vision.released_configs import RELEASED, released_processor_config

QWEN_FAMILIES = ("qwen2_vl", "qwen2_5_vl")
IMAGE_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "paddleocr_vl", "ernie4_5_vl")


# -- imports -----------------------------------------------------------------------------------
def paddleformers() -> Any:
    """Import paddleformers (it must come before any transformers processor import)."""
    from benchmarks.model_reference import import_paddleformers

    return import_paddleformers()


@cache
def paddle() -> Any:
    paddleformers()
    import paddle as module

    return module


# -- released settings ---------------------------------------------------------------------------
def released_preprocessor(family: str) -> dict[str, Any]:
    return RELEASED[family][1]


def released_model_config(family: str) -> dict[str, Any]:
    return RELEASED[family][0]


def image_pixels(family: str) -> tuple[int, int]:
    """``(min_pixels, max_pixels)`` of the released image preprocessor."""
    pre = released_preprocessor(family)
    return int(pre["min_pixels"]), int(pre["max_pixels"])


def video_pixels(family: str) -> tuple[int, int]:
    """``(min_pixels, max_pixels)`` our config uses for video frames."""
    rule = released_processor_config(family).video_resize
    assert rule is not None, f"{family} has no video"
    return rule.min_pixels, rule.max_pixels


def _norm_kwargs(family: str) -> dict[str, Any]:
    pre = released_preprocessor(family)
    return {
        "image_mean": list(pre["image_mean"]),
        "image_std": list(pre["image_std"]),
        "patch_size": int(pre["patch_size"]),
        "merge_size": int(pre["merge_size"]),
    }


# -- image decode as the references' loaders do it ------------------------------------------------
def has_transparency(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info
    )


def reference_decode(data: bytes) -> Image.Image:
    """Open encoded bytes the way a reference user would before calling a processor.

    EXIF orientation is applied; an image with transparency is composited on white as Qwen's
    ``fetch_image`` does (``convert("RGBA")``, alpha-composite over a white RGBA background, then
    ``convert("RGB")``); any other image is returned as is (the processors convert it to RGB).
    """
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    image.load()
    if has_transparency(image):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image


# -- image processors ----------------------------------------------------------------------------
IMAGE_PROCESSOR_CLASSES = {
    ("hf", "qwen"): (
        "transformers.models.qwen2_vl.image_processing_qwen2_vl",
        "Qwen2VLImageProcessor",
    ),
    ("hf", "paddleocr_vl"): (
        "transformers.models.paddleocr_vl.image_processing_paddleocr_vl",
        "PaddleOCRVLImageProcessor",
    ),
    ("hf", "ernie4_5_vl"): (
        "transformers.models.ernie4_5_vl_moe.image_processing_ernie4_5_vl_moe",
        "Ernie4_5_VLMoeImageProcessor",
    ),
    ("pf", "qwen"): (
        "paddleformers.transformers.qwen2_vl.image_processor",
        "Qwen2VLImageProcessor",
    ),
    ("pf", "paddleocr_vl"): (
        "paddleformers.transformers.paddleocr_vl.image_processor",
        "PaddleOCRVLImageProcessor",
    ),
    ("pf", "ernie4_5_vl"): (
        "paddleformers.transformers.ernie4_5_moe_vl.image_processor",
        "Ernie4_5_VLImageProcessor",
    ),
}


def _image_processor(source: str, family: str) -> Any:
    """A reference image processor (``source`` hf: transformers' numpy/PIL one; pf:
    paddleformers') for ``family`` with the released settings."""
    import importlib

    paddleformers()
    key = (source, "qwen" if family in QWEN_FAMILIES else family)
    module, name = IMAGE_PROCESSOR_CLASSES[key]
    cls = getattr(importlib.import_module(module), name)
    lo, hi = image_pixels(family)
    kwargs = _norm_kwargs(family)
    if family == "ernie4_5_vl":
        if source == "hf":
            return cls(size={"shortest_edge": lo, "longest_edge": hi}, **kwargs)
        return cls(min_pixels=lo, max_pixels=hi, **kwargs)
    temporal = int(released_preprocessor(family)["temporal_patch_size"])
    return cls(min_pixels=lo, max_pixels=hi, temporal_patch_size=temporal, **kwargs)


@cache
def hf_image_processor(family: str) -> Any:
    """transformers' numpy/PIL (slow) image processor for ``family``, with the released settings."""
    return _image_processor("hf", family)


@cache
def pf_image_processor(family: str) -> Any:
    """paddleformers' image processor for ``family``, with the released settings."""
    return _image_processor("pf", family)


def _as_rows(pixel_values: Any, grid: Any) -> tuple[np.ndarray, np.ndarray]:
    pixels = np.asarray(pixel_values)
    pixels = pixels.reshape(pixels.shape[0], -1)
    return pixels, np.asarray(grid, dtype=np.int64).reshape(-1, 3)


def hf_image(family: str, image: Image.Image) -> tuple[np.ndarray, np.ndarray]:
    """transformers: ``(pixel_values [N, D] float32 normalized, grid_thw [1, 3])`` for one image."""
    out = hf_image_processor(family)(image, return_tensors="np")
    return _as_rows(out["pixel_values"], out["image_grid_thw"])


def pf_image(family: str, image: Image.Image) -> tuple[np.ndarray, np.ndarray]:
    """paddleformers: ``(pixel_values [N, D], grid_thw [1, 3])`` for one image.

    Qwen and PaddleOCR-VL give float32 normalized rows. ERNIE is called exactly like
    ``Ernie4_5_VLProcessor._add_image`` does (grid from ``get_smarted_resize`` with the image
    min/max pixels, no rescale/normalize, ``do_convert_rgb=True``) and gives **uint8** rows.
    """
    proc = pf_image_processor(family)
    if family == "ernie4_5_vl":
        from paddleformers.transformers.image_utils import ChannelDimension

        lo, hi = image_pixels(family)
        _, (ph, pw) = proc.get_smarted_resize(
            image.height, image.width, min_pixels=lo, max_pixels=hi
        )
        out = proc.preprocess(
            images=[image],
            do_normalize=False,
            do_rescale=False,
            predetermined_grid_thw=np.array([[ph, pw]]),
            do_convert_rgb=True,
            input_data_format=ChannelDimension.LAST,
        )
        return _as_rows(out["pixel_values"], out["image_grid_thw"])
    out = proc(image, return_tensors="np")
    return _as_rows(out["pixel_values"], out["image_grid_thw"])


# -- video processors ----------------------------------------------------------------------------
@cache
def pf_qwen_video_processor(min_pixels: int, max_pixels: int) -> Any:
    """paddleformers' Qwen2VLVideoProcessor (no frame sampling) with the given frame budget."""
    paddleformers()
    from paddleformers.transformers.qwen2_vl.video_processor import Qwen2VLVideoProcessor

    pre = released_preprocessor("qwen2_vl")
    # A fresh ``size`` dict: the constructor writes min/max pixels into the dict it is given, and
    # without one it would modify the class attribute shared by every instance.
    return Qwen2VLVideoProcessor(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        image_mean=list(pre["image_mean"]),
        image_std=list(pre["image_std"]),
        patch_size=int(pre["patch_size"]),
        temporal_patch_size=int(pre["temporal_patch_size"]),
        merge_size=int(pre["merge_size"]),
        do_sample_frames=False,
    )


def pf_qwen_video(
    frames: np.ndarray, min_pixels: int, max_pixels: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(pixel_values_videos [N, 1176] float32, video_grid_thw [1, 3])`` for frames NHWC uint8.

    The reference resizes with paddle's antialiased bicubic on uint8, not Pillow's bicubic.
    """
    out = pf_qwen_video_processor(min_pixels, max_pixels)(videos=frames, return_tensors="np")
    return _as_rows(out["pixel_values_videos"], out["video_grid_thw"])


def pf_ernie_video(
    frames: np.ndarray, min_pixels: int, max_pixels: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(pixel_values_videos [N, 588] uint8, video_grid_thw [1, 3])`` for frames NHWC uint8,
    called exactly like ``Ernie4_5_VLProcessor._add_video`` (grid t = number of frames)."""
    from paddleformers.transformers.image_utils import ChannelDimension

    proc = pf_image_processor("ernie4_5_vl")
    _, (ph, pw) = proc.get_smarted_resize(
        frames.shape[1], frames.shape[2], min_pixels=min_pixels, max_pixels=max_pixels
    )
    out = proc.preprocess(
        images=None,
        videos=frames,
        do_normalize=False,
        do_rescale=False,
        predetermined_grid_thw=np.array([[ph, pw]] * len(frames)),
        do_convert_rgb=True,
        input_data_format=ChannelDimension.LAST,
    )
    return _as_rows(out["pixel_values_videos"], out["video_grid_thw"])


# -- frame sampling ------------------------------------------------------------------------------
def pf_qwen_sample_frames(
    total: int, video_fps: float, fps: float, min_frames: int, max_frames: int
) -> np.ndarray:
    """paddleformers' ``Qwen2VLVideoProcessor.sample_frames`` indices for a video of ``total``
    frames at ``video_fps``."""
    paddleformers()
    from paddleformers.transformers.video_utils import VideoMetadata

    proc = pf_qwen_video_processor(*video_pixels("qwen2_vl"))
    meta = VideoMetadata(total_num_frames=total, fps=video_fps)
    return np.asarray(
        proc.sample_frames(
            meta,
            temporal_patch_size=int(released_preprocessor("qwen2_vl")["temporal_patch_size"]),
            min_frames=min_frames,
            max_frames=max_frames,
            fps=fps,
        )
    )


def pf_qwen_nframes(
    total: int, video_fps: float, fps: float, min_frames: int, max_frames: int
) -> int:
    """paddleformers' ``qwen2_vl.vision_process.smart_nframes`` (the qwen-vl-utils count rule):
    the number of frames sampled from ``total`` frames at ``video_fps``."""
    paddleformers()
    from paddleformers.transformers.qwen2_vl.vision_process import smart_nframes

    ele = {"fps": fps, "min_frames": min_frames, "max_frames": max_frames}
    return int(smart_nframes(ele, total_frames=total, video_fps=video_fps))


def pf_ernie_frame_indices(
    total: int,
    video_fps: float,
    fps: float,
    min_frames: int,
    max_frames: int,
    frames_sample: str = "middle",
) -> np.ndarray:
    """The indices paddleformers' ERNIE processor decodes from a video of ``total`` frames at
    ``video_fps``: ``_set_video_frame_args`` (duration * fps clamped to [min, max]) then
    ``vision_process.get_frame_indices``."""
    paddleformers()
    from paddleformers.transformers.ernie4_5_moe_vl import vision_process
    from paddleformers.transformers.ernie4_5_moe_vl.processor import Ernie4_5_VLProcessor

    processor = object.__new__(Ernie4_5_VLProcessor)  # the method reads nothing from self
    meta = {"fps": video_fps, "duration": total / video_fps, "num_of_frame": total}
    args = processor._set_video_frame_args(
        {
            "fps": fps,
            "min_frames": min_frames,
            "max_frames": max_frames,
            "target_frames": -1,
            "frames_sample": frames_sample,
        },
        meta,
    )
    indices = vision_process.get_frame_indices(
        total,
        target_frames=args["target_frames"],
        target_fps=args["fps"],
        frames_sample=args["frames_sample"],
        input_fps=video_fps,
    )
    return np.asarray(indices, dtype=np.int64)


def pf_get_frame_indices(vlen: int, target_frames: int, frames_sample: str) -> np.ndarray:
    """paddleformers' ERNIE ``vision_process.get_frame_indices`` with a target frame count."""
    paddleformers()
    from paddleformers.transformers.ernie4_5_moe_vl import vision_process

    return np.asarray(
        vision_process.get_frame_indices(
            vlen, target_frames=target_frames, frames_sample=frames_sample
        ),
        dtype=np.int64,
    )


# -- rope index ----------------------------------------------------------------------------------
def _grid_tensor(grids: list[tuple[int, int, int]] | None) -> Any:
    if not grids:
        return None
    return paddle().to_tensor(np.asarray(grids, dtype=np.int64).reshape(-1, 3))


def _ids_tensor(ids: list[int]) -> Any:
    return paddle().to_tensor(np.asarray([ids], dtype=np.int64))


def qwen25_rope_index(
    ids: list[int],
    image_grids: list[tuple[int, int, int]],
    video_grids: list[tuple[int, int, int]],
    second_per_grid_ts: list[float] | None = None,
    family: str = "qwen2_5_vl",
) -> tuple[np.ndarray, int]:
    """paddleformers ``Qwen2_5_VLModel.get_rope_index`` on one sequence: ``(positions [3, N],
    delta)``. Qwen2-VL has no paddleformers model; its rope is 2.5's without time scaling, which
    ``family="qwen2_vl"`` gets by passing 1 / tokens_per_second seconds per grid step."""
    paddleformers()
    from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VLModel

    cfg = released_model_config(family)
    tokens_per_second = cfg["vision_config"].get("tokens_per_second", 1)
    if family == "qwen2_vl" and video_grids:
        second_per_grid_ts = [1.0 / tokens_per_second] * len(video_grids)
    self_ = SimpleNamespace(
        config=SimpleNamespace(
            image_token_id=cfg["image_token_id"],
            video_token_id=cfg["video_token_id"],
            vision_start_token_id=cfg["vision_start_token_id"],
            vision_config=SimpleNamespace(
                spatial_merge_size=cfg["vision_config"]["spatial_merge_size"],
                tokens_per_second=tokens_per_second,
            ),
        )
    )
    spgt = None
    if second_per_grid_ts is not None and video_grids:
        spgt = paddle().to_tensor(np.asarray(second_per_grid_ts, dtype=np.float32))
    pos, delta = Qwen2_5_VLModel.get_rope_index(
        self_,
        _ids_tensor(ids),
        _grid_tensor(image_grids),
        _grid_tensor(video_grids),
        second_per_grid_ts=spgt,
        attention_mask=None,
    )
    return pos.numpy()[:, 0].astype(np.int64), int(np.asarray(delta.numpy()).reshape(-1)[0])


def paddleocr_rope_index(
    ids: list[int], image_grid: tuple[int, int, int]
) -> tuple[np.ndarray, int]:
    """paddleformers ``PaddleOCRVLForConditionalGeneration.get_rope_index`` on one sequence with
    exactly one image (the reference supports one image per sequence only)."""
    install_triton_stub()
    paddleformers()
    from paddleformers.transformers.paddleocr_vl.modeling import (
        PaddleOCRVLForConditionalGeneration,
    )

    cfg = released_model_config("paddleocr_vl")
    self_ = SimpleNamespace(
        config=SimpleNamespace(
            image_token_id=cfg["image_token_id"],
            vision_config=SimpleNamespace(
                spatial_merge_size=cfg["vision_config"]["spatial_merge_size"]
            ),
        )
    )
    pos, delta = PaddleOCRVLForConditionalGeneration.get_rope_index(
        self_, _ids_tensor(ids), image_grid_thw=_grid_tensor([image_grid])
    )
    return pos.numpy()[:, 0].astype(np.int64), int(np.asarray(delta.numpy()).reshape(-1)[0])


def ernie_rope_index(
    ids: list[int],
    image_grids: list[tuple[int, int, int]],
    video_grids: list[tuple[int, int, int]],
) -> tuple[np.ndarray, int]:
    """paddleformers ``Ernie4_5_VLMoeForConditionalGeneration.get_rope_index`` on one sequence.

    Grids are in patches; a video's t is its number of frames."""
    paddleformers()
    from paddleformers.transformers.ernie4_5_moe_vl.model.modeling_moe_vl import (
        Ernie4_5_VLMoeForConditionalGeneration,
    )

    cfg = released_model_config("ernie4_5_vl")
    self_ = SimpleNamespace(
        config=SimpleNamespace(
            temporal_conv_size=cfg["temporal_conv_size"],
            image_start_token_id=cfg["image_start_token_id"],
            video_start_token_id=cfg["video_start_token_id"],
            vision_config=SimpleNamespace(
                spatial_merge_size=cfg["vision_config"]["spatial_merge_size"]
            ),
        )
    )
    pos, delta = Ernie4_5_VLMoeForConditionalGeneration.get_rope_index(
        self_,
        _ids_tensor(ids),
        _grid_tensor(image_grids),
        _grid_tensor(video_grids),
        attention_mask=None,
    )
    return pos.numpy()[:, 0].astype(np.int64), int(np.asarray(delta.numpy()).reshape(-1)[0])


# -- ERNIE processor (ids, token types and positions without a real tokenizer) -------------------
ERNIE_IMAGE_TEXT = "<|IMAGE_START|><|image@placeholder|><|IMAGE_END|>"
ERNIE_VIDEO_TEXT = "<|VIDEO_START|><|video@placeholder|><|VIDEO_END|>"


class _CharTokenizer:
    """One token per character (``chr(i)`` -> ``i``), plus ERNIE's special tokens."""

    def __init__(self, special: dict[str, int]) -> None:
        self.special = special

    def tokenize(self, text: str) -> list[str]:
        return list(text)

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, list):
            return [self.convert_tokens_to_ids(t) for t in tokens]
        return self.special.get(tokens, ord(tokens) if len(tokens) == 1 else -1)


@cache
def ernie_processor() -> Any:
    """paddleformers' ``Ernie4_5_VLProcessor`` with a character tokenizer and the released image
    and our video pixel budgets (built without ``__init__``, which needs a real tokenizer)."""
    paddleformers()
    from paddleformers.transformers.ernie4_5_moe_vl.processor import Ernie4_5_VLProcessor

    cfg = released_model_config("ernie4_5_vl")
    special = {
        "<|IMAGE_PLACEHOLDER|>": cfg["im_patch_id"],
        "<|IMAGE_START|>": cfg["image_start_token_id"],
        "<|IMAGE_END|>": cfg["image_end_token_id"],
        "<|VIDEO_START|>": cfg["video_start_token_id"],
        "<|VIDEO_END|>": cfg["video_end_token_id"],
    }
    p = object.__new__(Ernie4_5_VLProcessor)
    p.image_processor = pf_image_processor("ernie4_5_vl")
    p.tokenizer = _CharTokenizer(special)
    p.spatial_conv_size = cfg["spatial_conv_size"]
    p.temporal_conv_size = cfg["temporal_conv_size"]
    p.image_min_pixels, p.image_max_pixels = image_pixels("ernie4_5_vl")
    p.video_min_pixels, p.video_max_pixels = video_pixels("ernie4_5_vl")
    p.image_patch_id = cfg["im_patch_id"]
    p.token_type_mapping = p._build_token_type_mapping()
    return p


def ernie_process(
    text: str, images: list[Image.Image], videos: list[np.ndarray]
) -> dict[str, np.ndarray]:
    """Run the ERNIE processor on ``text`` (with ``ERNIE_IMAGE_TEXT``/``ERNIE_VIDEO_TEXT``
    markers), PIL images and NHWC uint8 videos; returns numpy arrays for one sequence."""
    out = ernie_processor()(text=[text], images=images or None, videos=videos or None)
    return {
        "input_ids": np.asarray(out["input_ids"]).reshape(-1).astype(np.int64),
        "token_type_ids": np.asarray(out["token_type_ids"]).reshape(-1).astype(np.int64),
        "position_ids": np.asarray(out["position_ids"]).reshape(-1, 3).T.astype(np.int64),
        "images": np.asarray(out["images"]),
        "grid_thw": np.asarray(out["grid_thw"], dtype=np.int64).reshape(-1, 3),
    }
