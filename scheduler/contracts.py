"""The step contract between the scheduler and the runner (and the sampling parameters both need).

The runner imports this module and nothing else from ``scheduler``; everything here is plain data
(nothing heavier than numpy).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from vision.types import MultimodalInputs


@dataclass(frozen=True)
class SamplingParams:
    """How to sample and when to stop (OpenAI/vLLM semantics).

    Attributes:
        max_tokens: most tokens to generate.
        min_tokens: EOS and stop tokens are ignored until this many tokens exist.
        temperature: 0 means greedy.
        top_k: 0 or -1 disables; top_p: 1.0 disables; min_p: 0.0 disables.
        repetition_penalty / presence_penalty / frequency_penalty: 1.0 / 0.0 / 0.0 disable.
        seed: per-request seed (reproducible whatever the batch); None: engine's generator.
        ignore_eos: keep generating past EOS.
        stop_token_ids: extra token ids that end the request (the token is kept in the output).
        logprobs: number of top alternatives to return per token (None: no logprobs).
        stop: strings that end the request when the detokenized output contains one (the
            engine checks them; the text is cut before the match).
    """

    max_tokens: int = 16
    min_tokens: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    logprobs: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError("min_tokens must be between 0 and max_tokens")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")


class FinishReason(enum.Enum):
    """Why a request ended."""

    EOS = "eos"
    STOP_TOKEN = "stop_token"
    STOP_STRING = "stop_string"
    MAX_TOKENS = "max_tokens"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"

    @property
    def openai(self) -> str:
        """The OpenAI API's ``finish_reason``."""
        if self in (FinishReason.EOS, FinishReason.STOP_TOKEN, FinishReason.STOP_STRING):
            return "stop"
        if self in (FinishReason.MAX_TOKENS, FinishReason.LENGTH):
            return "length"
        return self.value


@dataclass(frozen=True)
class NewRequestData:
    """Everything the runner needs about a request it does not know yet (first schedule, or
    resumption after preemption: the runner forgot it then)."""

    request_id: str
    slot: int
    token_ids: tuple[int, ...]  # prompt, then any tokens generated before a preemption
    mm_inputs: MultimodalInputs | None
    sampling: SamplingParams
    num_prompt_tokens: int


class ScheduledChunk(NamedTuple):
    """One request's work this step (a named tuple: one is built per request per step).

    Attributes:
        request_id: the request.
        slot: its batch slot (stable while it runs).
        start / end: token range ``[start, end)`` whose KV is computed now.
        new_block_ids: KV blocks appended to the request's block table this step.
        sample: a token is sampled after ``end`` (the chunk reaches the last known token).

    The runner knows every token of ``[start, end)``: the prompt (and, after a preemption, the
    generated tokens) came in :class:`NewRequestData`; later tokens are the ones it sampled.
    """

    request_id: str
    slot: int
    start: int
    end: int
    new_block_ids: tuple[int, ...]
    sample: bool

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class EncodeItem:
    """A media item to run through the vision encoder this step.

    ``cache=False`` marks an item larger than the whole encoder cache: its features serve every
    chunk of this step that needs the item (it is encoded once per step) and are dropped after
    the step. The runner executes the whole plan, including encodes for requests aborted since.
    """

    request_id: str
    mm_hash: str
    item_index: int
    num_tokens: int
    cache: bool = True


@dataclass
class SchedulerOutput:
    """One step's plan (see DESIGN.md).

    ``free_mm_hashes`` are dropped from the runner's feature store after this step's forward;
    ``finished_ids`` (finished, aborted or preempted since the last step) free the runner's
    per-request state before this step.
    """

    new_requests: list[NewRequestData] = field(default_factory=list)
    chunks: list[ScheduledChunk] = field(default_factory=list)
    encode: list[EncodeItem] = field(default_factory=list)
    free_mm_hashes: list[str] = field(default_factory=list)
    finished_ids: list[str] = field(default_factory=list)
    preempted_ids: list[str] = field(default_factory=list)

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(chunk.end - chunk.start for chunk in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@dataclass(frozen=True)
class TokenLogprobs:
    """Logprob of the sampled token and the top alternatives ``(token_id, logprob)``."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class RunnerOutput:
    """Sampled tokens of one step, for chunks with ``sample=True``."""

    sampled: dict[str, int] = field(default_factory=dict)
    logprobs: dict[str, TokenLogprobs] = field(default_factory=dict)
