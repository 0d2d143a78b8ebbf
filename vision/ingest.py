"""The ingestion pipeline: reference -> bytes -> hash -> processor cache -> decode -> process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from encoder_cache.processor_cache import ProcessorCache
from vision.errors import UnsupportedMedia
from vision.hashing import media_hash
from vision.image_decode import decode_image
from vision.limits import MediaAccessPolicy, MediaLimits
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt
from vision.sources import MediaRef, load_bytes
from vision.types import MultimodalInputs, ProcessedMedia
from vision.video import read_video

DEFAULT_PROCESSOR_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class MediaRequest:
    """One media part of a request: its modality and where its bytes are."""

    modality: str
    ref: MediaRef


class MediaIngestor:
    """Loads, hashes and processes media for one model family; safe to share between threads.

    The hash covers the encoded bytes and the processor settings and is taken before decoding,
    so a processor-cache hit skips decode, resize and patchify.
    """

    def __init__(
        self,
        config: ProcessorConfig,
        limits: MediaLimits | None = None,
        policy: MediaAccessPolicy | None = None,
        cache: ProcessorCache[ProcessedMedia] | None = None,
    ) -> None:
        self.config = config
        self.processor = MediaProcessor(config)
        self.limits = limits or MediaLimits()
        self.policy = policy or MediaAccessPolicy()
        self.cache = cache if cache is not None else ProcessorCache(DEFAULT_PROCESSOR_CACHE_BYTES)

    def image(self, ref: MediaRef) -> ProcessedMedia:
        """Load and process one image."""
        data = load_bytes(ref, self.policy, self.limits.max_image_bytes)
        key = media_hash(data, "image:" + self.processor.fingerprint)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        processed = self.processor.process_image(decode_image(data, self.limits), key)
        self.cache.put(key, processed)
        return processed

    def video(self, ref: MediaRef) -> ProcessedMedia:
        """Load, sample and process one video."""
        if not self.config.supports_video or self.config.frame_sampling is None:
            raise UnsupportedMedia(f"the {self.config.family} model does not accept video input")
        data = load_bytes(ref, self.policy, self.limits.max_video_bytes)
        key = media_hash(data, "video:" + self.processor.fingerprint)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        frames, meta = read_video(data, self.config.frame_sampling, self.limits.max_video_frames)
        sample_fps = len(frames) / meta.duration_s if meta.duration_s > 0 else 0.0
        processed = self.processor.process_video(frames, sample_fps, key)
        self.cache.put(key, processed)
        return processed

    def load(self, request: MediaRequest) -> ProcessedMedia:
        if request.modality == "image":
            return self.image(request.ref)
        if request.modality == "video":
            return self.video(request.ref)
        raise ValueError(f"unknown modality {request.modality!r}")

    def build_inputs(
        self, token_ids: Sequence[int], media: Sequence[MediaRequest]
    ) -> tuple[list[int], MultimodalInputs]:
        """Process every media part and expand the prompt's placeholders."""
        processed = [self.load(m) for m in media]
        return expand_prompt(token_ids, processed, self.config)
