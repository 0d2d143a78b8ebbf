"""Per-family processor settings, read from a checkpoint's ``config.json`` and
``preprocessor_config.json`` (and ``video_preprocessor_config.json`` when present)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vision.resize import ResizeRule
from vision.video import FrameSampling

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

FAMILY_BY_MODEL_TYPE = {
    "qwen2_vl": "qwen2_vl",
    "qwen2_5_vl": "qwen2_5_vl",
    "paddleocr_vl": "paddleocr_vl",
    "ernie4_5_moe_vl": "ernie4_5_vl",
    "ernie4_5_vl": "ernie4_5_vl",
    "ernie4_5_vl_moe": "ernie4_5_vl",
}


@dataclass(frozen=True)
class ProcessorConfig:
    """Everything that decides how media become patches, token spans and positions.

    Attributes:
        family: ``qwen2_vl``, ``qwen2_5_vl``, ``paddleocr_vl`` or ``ernie4_5_vl``.
        patch_size: side of a square patch in pixels (14).
        merge_size: patches merged per side into one LLM token (2).
        temporal_patch_size: frames per patch (2 for Qwen, 1 otherwise).
        merge_block_order: patch rows grouped by 2x2 merge block (Qwen, ERNIE) or raster
            (PaddleOCR-VL).
        image_resize / video_resize: smart-resize rules (``video_resize`` None: no video).
        image_mean / image_std: normalization, applied by the model, not by ingestion.
        frame_sampling: how frames are picked from a video (None: no video).
        video_temporal_merge: frames merged into one LLM position (2 for ERNIE video, else 1 after
            the temporal patch).
        tokens_per_second: Qwen2.5-VL's temporal position scale (None: positions step by 1).
        image_token_id / video_token_id / vision_start_token_id: placeholder ids.
    """

    family: str
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    merge_block_order: bool
    image_resize: ResizeRule
    video_resize: ResizeRule | None
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    frame_sampling: FrameSampling | None
    video_temporal_merge: int
    tokens_per_second: float | None
    image_token_id: int
    video_token_id: int | None
    vision_start_token_id: int

    @property
    def supports_video(self) -> bool:
        return self.frame_sampling is not None and self.video_resize is not None

    def fingerprint(self) -> str:
        """Settings that change processed outputs (not normalization: patches stay uint8)."""
        fields = asdict(self)
        for key in ("image_mean", "image_std", "image_token_id", "video_token_id"):
            fields.pop(key)
        fields.pop("vision_start_token_id")
        return "vlm-serve-ingest-v1:" + json.dumps(fields, sort_keys=True)

    @classmethod
    def from_checkpoint(cls, model_dir: str | Path) -> ProcessorConfig:
        """Read the settings of the checkpoint in ``model_dir``."""
        model_dir = Path(model_dir)
        config = _read_json(model_dir / "config.json", required=True)
        preprocessor = _read_json(model_dir / "preprocessor_config.json")
        video = _read_json(model_dir / "video_preprocessor_config.json")
        return cls.from_dicts(config, preprocessor, video)

    @classmethod
    def from_dicts(
        cls,
        config: dict[str, Any],
        preprocessor: dict[str, Any] | None = None,
        video_preprocessor: dict[str, Any] | None = None,
    ) -> ProcessorConfig:
        """Build from the parsed JSON files (missing files: pass None)."""
        model_type = config.get("model_type", "")
        family = FAMILY_BY_MODEL_TYPE.get(model_type)
        if family is None:
            raise ValueError(
                f"unsupported model_type {model_type!r}; "
                f"supported: {', '.join(sorted(FAMILY_BY_MODEL_TYPE))}"
            )
        builder = {
            "qwen2_vl": _qwen,
            "qwen2_5_vl": _qwen,
            "paddleocr_vl": _paddleocr,
            "ernie4_5_vl": _ernie,
        }[family]
        return builder(family, config, preprocessor or {}, video_preprocessor or {})


def _read_json(path: Path, required: bool = False) -> dict[str, Any]:
    if not path.exists():
        if required:
            raise FileNotFoundError(f"{path} not found: is this a Hugging Face model directory?")
        return {}
    return json.loads(path.read_text())


def _pixel_bounds(pre: dict[str, Any], default_min: int, default_max: int) -> tuple[int, int]:
    size = pre.get("size") or {}
    lo = pre.get("min_pixels") or size.get("shortest_edge") or size.get("min_pixels")
    hi = pre.get("max_pixels") or size.get("longest_edge") or size.get("max_pixels")
    return int(lo or default_min), int(hi or default_max)


def _triple(values: Any, default: tuple[float, float, float]) -> tuple[float, float, float]:
    if values is None:
        return default
    if isinstance(values, (int, float)):
        return (float(values),) * 3
    return tuple(float(v) for v in values)  # type: ignore[return-value]


def _qwen(family: str, config: dict, pre: dict, video: dict) -> ProcessorConfig:
    vision = config.get("vision_config") or {}
    patch = int(pre.get("patch_size") or vision.get("patch_size") or 14)
    merge = int(pre.get("merge_size") or vision.get("spatial_merge_size") or 2)
    temporal = int(pre.get("temporal_patch_size") or vision.get("temporal_patch_size") or 2)
    factor = patch * merge
    lo, hi = _pixel_bounds(pre, 56 * 56, 28 * 28 * 1280)
    vlo, vhi = _pixel_bounds(video, 128 * 28 * 28, 768 * 28 * 28)
    text = config.get("text_config") or {}
    tokens_per_second = vision.get("tokens_per_second") if family == "qwen2_5_vl" else None
    return ProcessorConfig(
        family=family,
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=temporal,
        merge_block_order=True,
        image_resize=ResizeRule(factor, lo, hi, at_least_factor_when_shrinking=True),
        video_resize=ResizeRule(factor, vlo, vhi, at_least_factor_when_rounding=True),
        image_mean=_triple(pre.get("image_mean"), CLIP_MEAN),
        image_std=_triple(pre.get("image_std"), CLIP_STD),
        frame_sampling=FrameSampling(
            rule="qwen",
            fps=float(video.get("fps", 2.0)),
            min_frames=int(video.get("min_frames", 4)),
            max_frames=int(video.get("max_frames", 768)),
            frame_factor=temporal,
        ),
        video_temporal_merge=1,
        tokens_per_second=float(tokens_per_second) if tokens_per_second is not None else None,
        image_token_id=int(config.get("image_token_id", text.get("image_token_id", 151655))),
        video_token_id=int(config.get("video_token_id", text.get("video_token_id", 151656))),
        vision_start_token_id=int(
            config.get("vision_start_token_id", text.get("vision_start_token_id", 151652))
        ),
    )


def _paddleocr(family: str, config: dict, pre: dict, video: dict) -> ProcessorConfig:
    vision = config.get("vision_config") or {}
    patch = int(pre.get("patch_size") or vision.get("patch_size") or 14)
    merge = int(pre.get("merge_size") or vision.get("spatial_merge_size") or 2)
    lo, hi = _pixel_bounds(pre, 112896, 1003520)
    return ProcessorConfig(
        family=family,
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=int(pre.get("temporal_patch_size") or 1),
        merge_block_order=False,
        image_resize=ResizeRule(patch * merge, lo, hi, lift_short_side=True),
        video_resize=None,
        image_mean=_triple(pre.get("image_mean"), (0.5, 0.5, 0.5)),
        image_std=_triple(pre.get("image_std"), (0.5, 0.5, 0.5)),
        frame_sampling=None,
        video_temporal_merge=1,
        tokens_per_second=None,
        image_token_id=int(config.get("image_token_id", 100295)),
        video_token_id=None,
        vision_start_token_id=int(config.get("vision_start_token_id", 101305)),
    )


def _ernie(family: str, config: dict, pre: dict, video: dict) -> ProcessorConfig:
    vision = config.get("vision_config") or {}
    patch = int(pre.get("patch_size") or vision.get("patch_size") or 14)
    merge = int(pre.get("merge_size") or config.get("spatial_conv_size") or 2)
    lo, hi = _pixel_bounds(pre, 56 * 56, 28 * 28 * 6177)
    vlo = int(pre.get("video_min_pixels") or video.get("min_pixels") or 299 * 28 * 28)
    vhi = int(pre.get("video_max_pixels") or video.get("max_pixels") or 1196 * 28 * 28)
    factor = patch * merge
    return ProcessorConfig(
        family=family,
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=1,
        merge_block_order=True,
        image_resize=ResizeRule(factor, lo, hi, at_least_factor_when_rounding=True),
        video_resize=ResizeRule(factor, vlo, vhi, at_least_factor_when_rounding=True),
        image_mean=_triple(pre.get("image_mean"), CLIP_MEAN),
        image_std=_triple(pre.get("image_std"), CLIP_STD),
        frame_sampling=FrameSampling(
            rule="ernie",
            fps=float(pre.get("video_fps") or video.get("fps") or 2),
            min_frames=int(pre.get("video_min_frames") or video.get("min_frames") or 16),
            max_frames=int(pre.get("video_max_frames") or video.get("max_frames") or 180),
            frame_factor=2,
        ),
        video_temporal_merge=int(config.get("temporal_conv_size") or 2),
        tokens_per_second=None,
        image_token_id=int(config.get("im_patch_id", config.get("image_token_id", 100295))),
        video_token_id=int(config.get("video_token_id", 103367)),
        vision_start_token_id=int(config.get("image_start_token_id", 101304)),
    )
