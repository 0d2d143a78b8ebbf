"""The engine: tokenizer, media ingestion, scheduler and model runner in one step loop, and the
offline ``LLM`` API built on it."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from maca_kernels import detect_platform
from runner.kv_cache import PagedKVCache
from runner.loader import resolve_model_dir
from runner.model_runner import ModelRunner
from runner.models import load_model
from scheduler import CacheConfig, FinishReason, Request, SamplingParams, Scheduler, SchedulerConfig
from vision.errors import InvalidMediaRequest
from vision.ingest import MediaIngestor
from vision.limits import MediaAccessPolicy, MediaLimits
from vision.processor_config import ProcessorConfig
from vlm_server.messages import parse_conversation


def free_memory_bytes(platform: Any) -> int:
    """Free memory where the KV cache will live."""
    if platform.is_accelerator:
        from maca_kernels.ops import paddle

        total = paddle.device.cuda.get_device_properties().total_memory
        return int(total - paddle.device.cuda.memory_allocated())
    import psutil

    return int(psutil.virtual_memory().available)


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings (the scheduler's and the caches' knobs).

    Attributes:
        max_num_batched_tokens / max_num_seqs / max_model_len: see ``SchedulerConfig``
            (``max_model_len`` None: the checkpoint's ``max_position_embeddings``, at most 8192).
        block_size: KV block size in tokens.
        kv_cache_memory: bytes of KV cache; None: ``kv_cache_fraction`` of the memory free
            after the model loaded (device memory on accelerators, RAM on the CPU).
        kv_cache_fraction: share of free memory for the KV cache when ``kv_cache_memory`` is
            None (default 0.3).
        enable_prefix_caching: reuse KV blocks of identical prefixes.
        encoder_cache_tokens: encoder-cache budget in feature tokens (None: automatic).
        allowed_local_media_path: local media files are readable below this directory only.
        allowed_media_domains: http(s) media is fetched from these domains only.
        limits: media size limits (encoded bytes, decoded pixels, video frames).
        limit_mm_per_prompt: most images / videos in one prompt (0: that modality is refused).
        seed: seeds requests that have no seed of their own.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    max_model_len: int | None = None
    block_size: int = 16
    kv_cache_memory: int | None = None
    kv_cache_fraction: float = 0.3
    enable_prefix_caching: bool = True
    encoder_cache_tokens: int | None = None
    allowed_local_media_path: str | None = None
    allowed_media_domains: tuple[str, ...] = ()
    limits: MediaLimits = field(default_factory=MediaLimits)
    limit_mm_per_prompt: tuple[tuple[str, int], ...] = (("image", 16), ("video", 2))
    seed: int = 0


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str
    logprobs: list[Any] | None = None


@dataclass
class RequestMetrics:
    arrival_time: float
    first_token_time: float | None
    finished_time: float
    cached_tokens: int
    encoder_cache_hits: int
    preemptions: int

    @property
    def ttft(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    metrics: RequestMetrics
    error: str | None = None


@dataclass
class _Tracked:
    request: Request
    text: str = ""
    logprobs: list[Any] = field(default_factory=list)


class Engine:
    """Owns the model, caches and step loop; front ends add requests and step it."""

    def __init__(self, model: str | Path, config: EngineConfig | None = None) -> None:
        from transformers import AutoTokenizer

        self.config = config = config or EngineConfig()
        directory = resolve_model_dir(model)
        self.model_dir = directory
        self.model = load_model(directory)
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory))
        self.processor_config = ProcessorConfig.from_checkpoint(directory)
        root = Path(config.allowed_local_media_path) if config.allowed_local_media_path else None
        self.ingestor = MediaIngestor(
            self.processor_config,
            limits=config.limits,
            policy=MediaAccessPolicy(
                allowed_local_root=root, allowed_domains=config.allowed_media_domains
            ),
        )
        self.eos_token_id = self.tokenizer.eos_token_id
        cfg = self.model.config
        dtype = str(self.model.model.embed_tokens.weight.dtype).replace("paddle.", "")
        budget = config.kv_cache_memory
        if budget is None:
            budget = int(free_memory_bytes(detect_platform()) * config.kv_cache_fraction)
        blocks = PagedKVCache.blocks_for_budget(
            budget,
            cfg.num_hidden_layers,
            config.block_size,
            cfg.num_key_value_heads,
            cfg.head_dim,
            dtype,
        )
        max_len = config.max_model_len or 8192
        # never more blocks than every batch slot filled to max_model_len needs
        blocks = min(blocks, config.max_num_seqs * -(-max_len // config.block_size))
        if blocks < 2:
            raise ValueError(
                f"a KV cache of {budget} bytes holds fewer than 2 blocks of "
                f"{config.block_size} tokens: raise kv_cache_memory"
            )
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_num_seqs=config.max_num_seqs,
                max_model_len=max_len,
            ),
            CacheConfig(
                num_kv_blocks=blocks,
                block_size=config.block_size,
                enable_prefix_caching=config.enable_prefix_caching,
                encoder_cache_tokens=config.encoder_cache_tokens,
            ),
            max_item_tokens=self._largest_item_tokens(),
        )
        cache = PagedKVCache(
            cfg.num_hidden_layers,
            blocks,
            config.block_size,
            cfg.num_key_value_heads,
            cfg.head_dim,
            dtype,
        )
        self.runner = ModelRunner(self.model, cache, self.eos_token_id, seed=config.seed)
        self.platform = detect_platform()
        self._tracked: dict[str, _Tracked] = {}
        self._ids = itertools.count()

    def _largest_item_tokens(self) -> int:
        rule = self.processor_config.image_resize
        merge = self.processor_config.merge_size * self.processor_config.patch_size
        return rule.max_pixels // (merge * merge)

    # -- requests --------------------------------------------------------------------------
    def tokenize_chat(self, messages: list[dict[str, Any]]) -> tuple[list[int], list]:
        parsed = parse_conversation(messages)
        for modality, limit in self.config.limit_mm_per_prompt:
            count = sum(1 for m in parsed.media if m.modality == modality)
            if count > limit:
                raise InvalidMediaRequest(
                    f"the prompt has {count} {modality} items; at most {limit} are allowed "
                    "(--limit-mm-per-prompt)",
                    param="messages",
                )
        ids = self.tokenizer.apply_chat_template(
            parsed.messages, tokenize=True, add_generation_prompt=True
        )
        ids = list(ids if isinstance(ids, list) else ids["input_ids"])
        return ids, parsed.media

    def add_request(
        self,
        token_ids: list[int],
        media: list,
        params: SamplingParams,
        request_id: str | None = None,
    ) -> str:
        """Ingest the media, expand the prompt and queue the request; returns its id.

        The request's arrival time is taken before ingestion, so TTFT includes preprocessing.
        """
        arrival = time.monotonic()
        expanded, mm = self.ingestor.build_inputs(token_ids, media) if media else (token_ids, None)
        if mm is not None and not mm.items:
            mm = None
        rid = request_id or f"req-{next(self._ids)}"
        request = Request(rid, list(expanded), params, self.eos_token_id, mm, arrival_time=arrival)
        self._tracked[rid] = _Tracked(request)
        self.scheduler.add_request(request)
        return rid

    def add_prepared(
        self,
        token_ids: list[int],
        mm: Any,
        params: SamplingParams,
        request_id: str,
        arrival_time: float | None = None,
    ) -> None:
        """Queue a request whose prompt is already expanded (media ingested elsewhere);
        ``arrival_time`` (monotonic) is when preprocessing started."""
        arrival = arrival_time if arrival_time is not None else time.monotonic()
        request = Request(
            request_id, list(token_ids), params, self.eos_token_id, mm, arrival_time=arrival
        )
        self._tracked[request_id] = _Tracked(request)
        self.scheduler.add_request(request)

    def abort(self, request_id: str) -> bool:
        return self.scheduler.abort(request_id)

    def has_work(self) -> bool:
        return self.scheduler.has_unfinished()

    # -- the loop --------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Schedule, execute, update; returns the requests that finished in this step."""
        return self.step_with_tokens()[1]

    def step_with_tokens(self) -> tuple[dict[str, int], list[RequestOutput]]:
        """One step; returns ``(token sampled per request, requests finished)``."""
        out = self.scheduler.schedule()
        result = self.runner.execute(out)
        self.scheduler.update(out, result)
        for rid, logprob in result.logprobs.items():
            if rid in self._tracked:
                self._tracked[rid].logprobs.append(logprob)
        for rid in result.sampled:
            self._check_stop_strings(rid)
        return result.sampled, [self._finish(r) for r in self.scheduler.take_finished()]

    def finish_refused(self) -> list[RequestOutput]:
        """Outputs of requests that ended without a step (refused at admission, aborted while
        waiting)."""
        return [self._finish(r) for r in self.scheduler.take_finished()]

    def _check_stop_strings(self, rid: str) -> None:
        tracked = self._tracked.get(rid)
        if tracked is None or not tracked.request.sampling.stop:
            return
        text = self.tokenizer.decode(tracked.request.output_token_ids, skip_special_tokens=True)
        for stop in tracked.request.sampling.stop:
            if stop in text:
                tracked.text = text[: text.index(stop)]
                self.scheduler.abort(rid, FinishReason.STOP_STRING)
                return

    def _finish(self, request: Request) -> RequestOutput:
        tracked = self._tracked.pop(request.request_id, None) or _Tracked(request)
        reason = request.finish_reason or FinishReason.ERROR
        text = tracked.text
        if reason is not FinishReason.STOP_STRING:
            text = self.tokenizer.decode(request.output_token_ids, skip_special_tokens=True)
        return RequestOutput(
            request.request_id,
            list(request.prompt_token_ids),
            [
                CompletionOutput(
                    text,
                    list(request.output_token_ids),
                    reason.openai,
                    tracked.logprobs if request.sampling.logprobs is not None else None,
                )
            ],
            RequestMetrics(
                request.arrival_time,
                request.first_token_time,
                time.monotonic(),
                request.num_cached_tokens,
                request.encoder_cache_hits,
                request.num_preemptions,
            ),
            error=request.error,
        )


class LLM:
    """Offline inference in the style people know from vLLM.

    >>> llm = LLM(model="/path/to/checkpoint")
    >>> out = llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url":
    ...     {"url": "data:image/png;base64,..."}}, {"type": "text", "text": "OCR:"}]}])
    >>> out[0].outputs[0].text
    """

    def __init__(self, model: str | Path, **engine_args: Any) -> None:
        self.engine = Engine(model, EngineConfig(**engine_args))

    def chat(
        self,
        messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
        sampling_params: SamplingParams | list[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Answer one conversation, or a list of them batched together."""
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        prompts = [self.engine.tokenize_chat(conv) for conv in conversations]
        return self._run(prompts, sampling_params, use_tqdm)

    def generate(
        self,
        prompts: str | list[str] | list[list[int]],
        sampling_params: SamplingParams | list[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Complete raw text prompts (or token id lists) without a chat template."""
        if isinstance(prompts, str):
            prompts = [prompts]
        encoded = [
            (p if isinstance(p, list) else self.engine.tokenizer(p)["input_ids"], [])
            for p in prompts
        ]
        return self._run(encoded, sampling_params, use_tqdm)

    def _run(self, prompts, sampling_params, use_tqdm: bool) -> list[RequestOutput]:
        params = sampling_params or SamplingParams()
        if not isinstance(params, list):
            params = [params] * len(prompts)
        order = [
            self.engine.add_request(ids, media, p)
            for (ids, media), p in zip(prompts, params, strict=True)
        ]
        results: dict[str, RequestOutput] = {}
        for finished in self.engine.finish_refused():
            results[finished.request_id] = finished
        with tqdm(total=len(order), desc="requests", disable=not use_tqdm) as bar:
            bar.update(len(results))
            while self.engine.has_work():
                for output in self.engine.step():
                    results[output.request_id] = output
                    bar.update(1)
        return [results[rid] for rid in order]
