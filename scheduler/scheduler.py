"""The step planner: continuous batching with chunked prefill that respects media spans,
media-aware prefix caching, encoder-cache decisions, preemption and abort.

One rule drives it (vLLM v1's): each step, a request's computed tokens catch up with its known
tokens as far as the budgets allow. Running requests go first (decodes and unfinished prefills),
then waiting requests in arrival order.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from encoder_cache.manager import EncoderCacheManager
from scheduler.config import CacheConfig, SchedulerConfig
from scheduler.contracts import (
    EncodeItem,
    FinishReason,
    NewRequestData,
    RunnerOutput,
    ScheduledChunk,
    SchedulerOutput,
)
from scheduler.kv_blocks import KVBlockManager
from scheduler.request import Request, RequestStatus
from vision.types import MultimodalItem


@dataclass
class SchedulerStats:
    """Counters for metrics (cumulative unless noted)."""

    steps: int = 0
    preemptions: int = 0
    budget_overruns: int = 0
    scheduled_tokens: int = 0


@dataclass
class _Chunk:
    end: int
    encode: list[MultimodalItem]


class Scheduler:
    """Decides every step which requests run, how far, and what the vision encoder computes."""

    def __init__(
        self, config: SchedulerConfig, cache: CacheConfig, max_item_tokens: int = 0
    ) -> None:
        self.config = config
        self.cache_config = cache
        self.blocks = KVBlockManager(
            cache.num_kv_blocks, cache.block_size, cache.enable_prefix_caching
        )
        capacity = cache.encoder_cache_tokens
        if capacity is None:
            capacity = max(config.max_num_batched_tokens, max_item_tokens)
        self.encoder = EncoderCacheManager(capacity)
        self.max_len = min(config.max_model_len, cache.num_kv_blocks * cache.block_size)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.free_slots = list(range(config.max_num_seqs - 1, -1, -1))
        self.stats = SchedulerStats()
        self._gone_ids: list[str] = []  # finished/aborted since the last schedule()
        self._finished: list[Request] = []  # not yet taken by the engine

    # -- requests ----------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue ``request``; one that can never fit finishes at once with an error."""
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        limit = self.max_len
        if request.num_prompt_tokens == 0:
            self._finish(request, FinishReason.ERROR, "the prompt is empty")
            return
        if request.num_prompt_tokens >= limit:
            what = "max_model_len" if limit == self.config.max_model_len else "the KV cache"
            self._finish(
                request,
                FinishReason.ERROR,
                f"prompt has {request.num_prompt_tokens} tokens; {what} holds {limit} "
                "(prompt plus at least one generated token must fit)",
            )
            return
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def abort(self, request_id: str, reason: FinishReason = FinishReason.ABORT) -> bool:
        """End a waiting or running request now (abort, or a stop string the engine found),
        freeing everything. False if unknown."""
        request = self.requests.get(request_id)
        if request is None:
            return False
        if request.status is RequestStatus.WAITING:
            self.waiting.remove(request)
        else:
            self.running.remove(request)
            self._release_running(request)
            self._gone_ids.append(request_id)
        self._finish(request, reason)
        return True

    def take_finished(self) -> list[Request]:
        """Requests finished since the last call (any reason)."""
        finished, self._finished = self._finished, []
        return finished

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def metrics(self) -> dict[str, float]:
        """Current gauges and cumulative counters for the metrics endpoint."""
        prefix, enc = self.blocks.stats, self.encoder.stats
        lookups = enc.hits + enc.misses
        return {
            "num_running": len(self.running),
            "num_waiting": len(self.waiting),
            "kv_usage": self.blocks.usage,
            "prefix_cache_queried_tokens": prefix.queried_tokens,
            "prefix_cache_hit_tokens": prefix.hit_tokens,
            "prefix_cache_hit_rate": prefix.hit_tokens / prefix.queried_tokens
            if prefix.queried_tokens
            else 0.0,
            "encoder_cache_hits": enc.hits,
            "encoder_cache_misses": enc.misses,
            "encoder_cache_hit_rate": enc.hits / lookups if lookups else 0.0,
            "encoder_cache_evictions": enc.evictions,
            "encoder_cache_uncacheable": enc.uncacheable,
            "preemptions": self.stats.preemptions,
            "budget_overruns": self.stats.budget_overruns,
            "steps": self.stats.steps,
        }

    # -- planning ----------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Plan one step."""
        out = SchedulerOutput(finished_ids=self._gone_ids)
        self._gone_ids = []
        budget = self.config.max_num_batched_tokens
        enc_budget = self.config.encoder_budget
        encoded_any = False

        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            start = request.num_computed_tokens
            chunk = self._plan_chunk(request, start, budget, enc_budget, encoded_any)
            if chunk.end == start:
                index += 1
                continue
            known_blocks = len(request.block_ids)
            if not self._allocate_or_preempt(request, chunk.end, out):
                break  # the request preempted itself: nothing after it runs either
            budget, enc_budget, encoded_any = self._commit(
                request, start, chunk, known_blocks, budget, enc_budget, encoded_any, out
            )
            index += 1

        while (
            not out.preempted_ids
            and self.waiting
            and budget > 0
            and len(self.running) < self.config.max_num_seqs
        ):
            request = self.waiting[0]
            prefix = self.blocks.find_cached_prefix(request)
            start = len(prefix) * self.blocks.block_size
            chunk = self._plan_chunk(request, start, budget, enc_budget, encoded_any)
            if chunk.end == start or not self._admissible(request, prefix, chunk.end):
                break
            self.waiting.popleft()
            self.blocks.record_lookup(request.num_tokens, start)
            self.blocks.acquire_cached(request, prefix)
            self.blocks.allocate(request, chunk.end)
            request.num_computed_tokens = request.num_cached_tokens = start
            request.status = RequestStatus.RUNNING
            request.slot = self.free_slots.pop()
            self.running.append(request)
            budget, enc_budget, encoded_any = self._commit(
                request, start, chunk, 0, budget, enc_budget, encoded_any, out
            )

        # An item evicted and encoded again within the step stays: the runner keeps it.
        out.free_mm_hashes = [h for h in self.encoder.take_evicted() if h not in self.encoder]
        self.stats.steps += 1
        return out

    def _plan_chunk(
        self, request: Request, start: int, budget: int, enc_budget: int, encoded_any: bool
    ) -> _Chunk:
        """How far ``request`` can go from ``start`` this step, and the items to encode."""
        total = request.num_tokens
        end = min(total, start + budget)
        items = request.mm_items
        if not items or start >= items[-1].end:
            return _Chunk(end, [])
        if end < total:
            inside = _span_containing(items, end)
            if inside is not None:
                end = inside.offset if inside.offset > start else inside.end
        # Walk the chunk's items in order; cut the chunk before the first item that does not
        # fit. Hits are protected from eviction by this chunk's own allocations, so both a hit
        # and a miss can make the cache plan infeasible (and feasibility only shrinks).
        hits: set[str] = set()
        to_encode: list[MultimodalItem] = []
        enc_tokens = new_cache_tokens = 0
        for item in items:
            if item.end <= start or item.offset >= end:
                continue
            mm_hash = item.mm_hash
            if mm_hash in hits or any(e.mm_hash == mm_hash for e in to_encode):
                continue
            if mm_hash in self.encoder:
                fits = self.encoder.can_allocate(new_cache_tokens, hits | {mm_hash})
                if fits:
                    hits.add(mm_hash)
                    continue
            else:
                first_of_step = not (encoded_any or enc_tokens)
                extra = item.length if self.encoder.fits_ever(item.length) else 0
                fits = (first_of_step or enc_tokens + item.length <= enc_budget) and (
                    self.encoder.can_allocate(new_cache_tokens + extra, hits)
                )
                if fits:
                    to_encode.append(item)
                    enc_tokens += item.length
                    new_cache_tokens += extra
                    continue
            end = item.offset if item.offset > start else start
            break
        return _Chunk(end, to_encode)

    def _admissible(self, request: Request, prefix: list[int], end: int) -> bool:
        """Enough free blocks for the new request while keeping one per running request."""
        reused_free = sum(1 for block in prefix if self.blocks.ref_counts[block] == 0)
        new_blocks = -(-end // self.blocks.block_size) - len(prefix)
        reserve = len(self.running)
        return reused_free + new_blocks + reserve <= self.blocks.num_free_blocks

    def _allocate_or_preempt(self, request: Request, end: int, out: SchedulerOutput) -> bool:
        """Grow ``request``'s blocks to ``end`` tokens, preempting the most recently admitted
        requests while blocks are short. False if ``request`` itself had to be preempted."""
        while self.blocks.allocate(request, end) is None:
            victim = self.running[-1]
            self._preempt(victim)
            out.preempted_ids.append(victim.request_id)
            if victim is request:
                return False
        return True

    def _commit(
        self,
        request: Request,
        start: int,
        chunk: _Chunk,
        known_blocks: int,
        budget: int,
        enc_budget: int,
        encoded_any: bool,
        out: SchedulerOutput,
    ) -> tuple[int, int, bool]:
        """Record the planned chunk and its encoder work; return the remaining budgets."""
        rid = request.request_id
        items = request.mm_items if request.mm_items and start < request.mm_items[-1].end else []
        for item in items:
            if item.end <= start or item.offset >= chunk.end:
                continue
            if item.mm_hash in self.encoder:
                if item not in chunk.encode:
                    request.encoder_cache_hits += 1
                self.encoder.reference(rid, item.mm_hash)
        for item in chunk.encode:
            if item.mm_hash in self.encoder:
                continue  # already referenced above (encoded by another request this step)
            index = items.index(item)
            if self.encoder.fits_ever(item.length):
                self.encoder.allocate(rid, item.mm_hash, item.length)
                out.encode.append(EncodeItem(rid, item.mm_hash, index, item.length))
            elif not any(e.mm_hash == item.mm_hash for e in out.encode):
                self.encoder.stats.uncacheable += 1
                out.encode.append(EncodeItem(rid, item.mm_hash, index, item.length, cache=False))
            enc_budget -= item.length
            encoded_any = True
        if request.needs_new_data:
            known_blocks = 0
            out.new_requests.append(
                NewRequestData(
                    rid,
                    request.slot,
                    tuple(request.token_ids(0, request.num_tokens)),
                    request.mm_inputs,
                    request.sampling,
                    request.num_prompt_tokens,
                )
            )
            request.needs_new_data = False
        num_tokens = chunk.end - start
        if num_tokens > budget:
            self.stats.budget_overruns += 1
        block_ids = request.block_ids
        new_blocks = tuple(block_ids[known_blocks:]) if known_blocks < len(block_ids) else ()
        sample = chunk.end == request.num_tokens
        out.chunks.append(ScheduledChunk(rid, request.slot, start, chunk.end, new_blocks, sample))
        request.num_computed_tokens = chunk.end
        self.stats.scheduled_tokens += num_tokens
        return max(0, budget - num_tokens), enc_budget, encoded_any

    # -- results -----------------------------------------------------------------------------
    def update(self, out: SchedulerOutput, result: RunnerOutput) -> list[Request]:
        """Apply a step's results: cache computed blocks, release encoder references, append
        sampled tokens, finish requests that stop. Returns the requests finished now."""
        finished: list[Request] = []
        now = time.monotonic()
        for chunk in out.chunks:
            request = self.requests.get(chunk.request_id)
            if request is None or request.status is not RequestStatus.RUNNING:
                continue  # aborted (or preempted) since it was scheduled
            items = request.mm_items
            if items and chunk.start < items[-1].end:
                for item in items:
                    if item.offset < chunk.end and item.end > chunk.start:
                        self.encoder.release(request.request_id, item.mm_hash)
            self.blocks.cache_computed_blocks(request)
            if not chunk.sample:
                continue
            token = result.sampled.get(chunk.request_id)
            error = None
            if token is None:
                reason, error = FinishReason.ERROR, "the model runner returned no token"
            else:
                request.output_token_ids.append(token)
                if request.first_token_time is None:
                    request.first_token_time = now
                reason = self._stop_reason(request, token)
            if reason is not None:
                finished.append(request)
                self._release_running(request)
                self._gone_ids.append(request.request_id)
                self._finish(request, reason, error)
        if finished:
            gone = {id(r) for r in finished}
            self.running = [r for r in self.running if id(r) not in gone]
        return finished

    def _stop_reason(self, request: Request, token: int) -> FinishReason | None:
        params = request.sampling
        produced = len(request.output_token_ids)
        if produced >= params.min_tokens:
            if token == request.eos_token_id and not params.ignore_eos:
                return FinishReason.EOS
            if token in params.stop_token_ids:
                return FinishReason.STOP_TOKEN
        if produced >= params.max_tokens:
            return FinishReason.MAX_TOKENS
        if request.num_tokens >= self.max_len:
            return FinishReason.LENGTH
        return None

    # -- state changes -----------------------------------------------------------------------
    def _preempt(self, request: Request) -> None:
        """Free everything the request holds and put it first in line; it recomputes its
        prompt and generated tokens later (prefix-cached blocks make that cheap)."""
        self.running.remove(request)
        self._release_running(request)
        request.status = RequestStatus.WAITING
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        request.needs_new_data = True
        self.waiting.appendleft(request)
        self.stats.preemptions += 1

    def _release_running(self, request: Request) -> None:
        self.blocks.free_request(request)
        self.encoder.release_all(request.request_id, [item.mm_hash for item in request.mm_items])
        if request.slot is not None:
            self.free_slots.append(request.slot)
            request.slot = None

    def _finish(self, request: Request, reason: FinishReason, error: str | None = None) -> None:
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        request.error = error
        self.requests.pop(request.request_id, None)
        self.blocks.forget_request(request.request_id)
        self._finished.append(request)

    # -- checks ------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError if any bookkeeping is inconsistent (call between steps)."""
        cfg = self.config
        assert len(self.running) <= cfg.max_num_seqs
        slots = [r.slot for r in self.running]
        assert None not in slots and len(set(slots)) == len(slots)
        assert sorted(slots + self.free_slots) == list(range(cfg.max_num_seqs))
        for request in self.running:
            assert request.status is RequestStatus.RUNNING
            assert request.num_computed_tokens <= request.num_tokens
            assert len(request.block_ids) * self.blocks.block_size >= request.num_computed_tokens
            assert request.num_tokens < self.max_len or request.is_finished
        for request in self.waiting:
            assert request.status is RequestStatus.WAITING
            assert not request.block_ids and request.slot is None
            assert request.num_computed_tokens == 0
        live = {r.request_id for r in self.running} | {r.request_id for r in self.waiting}
        assert live == set(self.requests)
        self.blocks.check_invariants(self.running)
        self.encoder.check_invariants(set())  # references live only within a step
        for request in self.running:
            for item in request.mm_items:
                if item.offset < request.num_computed_tokens < item.end:
                    raise AssertionError(f"{request.request_id}: computed tokens end inside a span")


def _span_containing(items: list[MultimodalItem], position: int) -> MultimodalItem | None:
    """The item whose span strictly contains ``position`` (items sorted by offset)."""
    index = bisect_right([item.offset for item in items], position) - 1
    if index >= 0 and items[index].offset < position < items[index].end:
        return items[index]
    return None
