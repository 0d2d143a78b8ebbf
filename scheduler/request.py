"""A request as the scheduler sees it: tokens, media spans, progress and state."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from scheduler.contracts import FinishReason, SamplingParams
from vision.types import MultimodalInputs, MultimodalItem


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """One generation request.

    The rule of the step planner: ``num_computed_tokens`` catches up with ``num_tokens``
    (prompt plus generated tokens). A prefill chunk, a prefix-cache hit, a decode step and the
    recomputation after preemption are all the same move.

    Attributes:
        request_id: unique id.
        prompt_token_ids: the expanded prompt (placeholders already expanded).
        sampling: sampling and stop parameters.
        eos_token_id: the model's end-of-sequence token (None: none).
        mm_inputs: media items with their spans (None: text only).
        arrival_time: ``time.monotonic()`` at arrival; waiting requests are admitted in order.
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    eos_token_id: int | None = None
    mm_inputs: MultimodalInputs | None = None
    arrival_time: float = field(default_factory=time.monotonic)

    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)
    slot: int | None = None
    finish_reason: FinishReason | None = None
    error: str | None = None
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    first_token_time: float | None = None
    encoder_cache_hits: int = 0
    # True until the runner has been sent this request's NewRequestData (again after preemption)
    needs_new_data: bool = True

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def mm_items(self) -> list[MultimodalItem]:
        return self.mm_inputs.items if self.mm_inputs is not None else []

    def token_ids(self, start: int, end: int) -> list[int]:
        """Tokens ``[start, end)`` of prompt + output."""
        n = len(self.prompt_token_ids)
        if end <= n:
            return self.prompt_token_ids[start:end]
        if start >= n:
            return self.output_token_ids[start - n : end - n]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - n]

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
