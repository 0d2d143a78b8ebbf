"""Data that leaves the ingestion pipeline: processed media and a prompt's multimodal inputs.

These dataclasses import nothing heavier than numpy: the scheduler and the runner both use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TEXT, IMAGE, VIDEO = 0, 1, 2
"""Token type ids: what each prompt token is."""


@dataclass(frozen=True)
class ProcessedItem:
    """One vision-encoder input: an image, or one temporal chunk of a video.

    Attributes:
        modality: ``"image"`` or ``"video"``.
        mm_hash: identity of the item (keys the encoder feature store and prefix-cache hashes).
        grid_thw: the item's grid in patches (temporal, height, width).
        num_tokens: placeholder tokens it fills in the prompt (= rows of encoder features).
        patches: uint8 pixels, one row per patch in the family's patch layout.
    """

    modality: str
    mm_hash: str
    grid_thw: tuple[int, int, int]
    num_tokens: int
    patches: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.patches.nbytes)


@dataclass(frozen=True)
class ProcessedMedia:
    """An image (one item) or a video (one item per 2-frame chunk): what the processor cache holds.

    Attributes:
        modality: ``"image"`` or ``"video"``.
        mm_hash: hash of the encoded bytes and processor settings.
        items: the encoder inputs, in order.
        grid_thw: the whole media's grid in patches (a video's ``t`` counts all its chunks).
        seconds_per_grid_t: seconds of video covered by one temporal grid step (0 for images).
    """

    modality: str
    mm_hash: str
    items: tuple[ProcessedItem, ...]
    grid_thw: tuple[int, int, int]
    seconds_per_grid_t: float = 0.0

    @property
    def num_tokens(self) -> int:
        return sum(item.num_tokens for item in self.items)

    @property
    def nbytes(self) -> int:
        return sum(item.nbytes for item in self.items)


@dataclass
class MultimodalItem:
    """One encoder input placed in a prompt.

    Attributes:
        modality, mm_hash, grid_thw: as in :class:`ProcessedItem`.
        offset: index of the item's first placeholder token in the prompt.
        length: number of placeholder tokens (= rows of features the encoder produces).
        patches: uint8 patches, or ``None`` when a cache already holds the item's features.
    """

    modality: str
    mm_hash: str
    grid_thw: tuple[int, int, int]
    offset: int
    length: int
    patches: np.ndarray | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def num_feature_rows(self) -> int:
        return self.length


@dataclass
class MultimodalInputs:
    """A prompt's media: items in prompt order with their spans, 3D positions and token types.

    Attributes:
        items: encoder inputs sorted by ``offset``; spans never overlap.
        position_ids: int64 ``[3, N]`` (temporal, height, width) rope positions of the prompt.
        rope_delta: ``max(position_ids) + 1 - N``; a decode token at cache length ``c`` has
            position ``c + rope_delta`` on all three axes.
        token_type_ids: int8 ``[N]``: 0 text, 1 image, 2 video.
    """

    items: list[MultimodalItem] = field(default_factory=list)
    position_ids: np.ndarray | None = None
    rope_delta: int = 0
    token_type_ids: np.ndarray | None = None
