"""Placeholder expansion: from a tokenized prompt with one placeholder per media item to the
model's token ids, item spans, token types and 3D positions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vision.errors import InvalidMediaRequest
from vision.positions import MediaPlacement, rope_positions
from vision.processor_config import ProcessorConfig
from vision.types import IMAGE, TEXT, VIDEO, MultimodalInputs, MultimodalItem, ProcessedMedia


def expand_prompt(
    token_ids: Sequence[int],
    media: Sequence[ProcessedMedia],
    config: ProcessorConfig,
    keep_patches: bool = True,
) -> tuple[list[int], MultimodalInputs]:
    """Expand each placeholder token into its media's span.

    ``token_ids`` holds exactly one ``image_token_id`` per image and one ``video_token_id`` per
    video, in the order of ``media`` (runs of already-expanded placeholders are not accepted).
    Returns the expanded ids and the prompt's :class:`MultimodalInputs`.
    """
    placeholder = {"image": config.image_token_id, "video": config.video_token_id}
    expected = [placeholder[m.modality] for m in media]
    found = [t for t in token_ids if t in placeholder.values()]
    if found != expected:
        raise InvalidMediaRequest(
            f"the prompt has {len(found)} media placeholders but {len(media)} media items were "
            "given (or their order differs): put one image/video placeholder per item"
        )
    ids: list[int] = []
    types: list[np.ndarray] = []
    items: list[MultimodalItem] = []
    placements: list[MediaPlacement] = []
    media_iter = iter(media)
    text_run = 0
    for token in token_ids:
        if token not in placeholder.values():
            ids.append(token)
            text_run += 1
            continue
        if text_run:
            types.append(np.full(text_run, TEXT, dtype=np.int8))
            text_run = 0
        m = next(media_iter)
        offset = len(ids)
        placements.append(_placement(m, offset, config))
        for item in m.items:
            items.append(
                MultimodalItem(
                    modality=item.modality,
                    mm_hash=item.mm_hash,
                    grid_thw=item.grid_thw,
                    offset=len(ids),
                    length=item.num_tokens,
                    patches=item.patches if keep_patches else None,
                )
            )
            ids.extend([placeholder[m.modality]] * item.num_tokens)
        kind = IMAGE if m.modality == "image" else VIDEO
        types.append(np.full(len(ids) - offset, kind, dtype=np.int8))
    if text_run:
        types.append(np.full(text_run, TEXT, dtype=np.int8))
    position_ids, rope_delta = rope_positions(len(ids), placements)
    token_types = np.concatenate(types) if types else np.zeros(0, dtype=np.int8)
    return ids, MultimodalInputs(items, position_ids, rope_delta, token_types)


def _placement(media: ProcessedMedia, offset: int, config: ProcessorConfig) -> MediaPlacement:
    t, h, w = media.grid_thw
    merge = config.merge_size
    time_scale = None
    if config.tokens_per_second is not None:
        seconds = media.seconds_per_grid_t if media.modality == "video" else 0.0
        time_scale = (seconds, config.tokens_per_second)
    if media.modality == "video":
        t //= config.video_temporal_merge
    return MediaPlacement(offset, (t, h // merge, w // merge), time_scale)
