"""Media ingestion: loading, hashing, per-family processing and prompt expansion (no paddle)."""

from vision.errors import (
    InvalidMediaRequest,
    MediaAccessDenied,
    MediaError,
    MediaTooLarge,
    UndecodableMedia,
    UnsupportedMedia,
)
from vision.ingest import MediaIngestor, MediaRequest
from vision.limits import MediaAccessPolicy, MediaLimits
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt
from vision.types import MultimodalInputs, MultimodalItem, ProcessedItem, ProcessedMedia

__all__ = [
    "InvalidMediaRequest",
    "MediaAccessDenied",
    "MediaAccessPolicy",
    "MediaError",
    "MediaIngestor",
    "MediaLimits",
    "MediaProcessor",
    "MediaRequest",
    "MediaTooLarge",
    "MultimodalInputs",
    "MultimodalItem",
    "ProcessedItem",
    "ProcessedMedia",
    "ProcessorConfig",
    "UndecodableMedia",
    "UnsupportedMedia",
    "expand_prompt",
]
