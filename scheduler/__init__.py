"""Requests, paged KV blocks with media-aware prefix caching, and the step planner."""

from scheduler.config import CacheConfig, SchedulerConfig
from scheduler.contracts import (
    EncodeItem,
    FinishReason,
    NewRequestData,
    RunnerOutput,
    SamplingParams,
    ScheduledChunk,
    SchedulerOutput,
)
from scheduler.kv_blocks import KVBlockManager, revert_to_media_boundary
from scheduler.request import Request, RequestStatus
from scheduler.scheduler import Scheduler

__all__ = [
    "CacheConfig",
    "EncodeItem",
    "FinishReason",
    "KVBlockManager",
    "NewRequestData",
    "Request",
    "RequestStatus",
    "RunnerOutput",
    "SamplingParams",
    "ScheduledChunk",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "revert_to_media_boundary",
]
