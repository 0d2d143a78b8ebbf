"""The model runner: executes one ``SchedulerOutput`` — encodes the listed media, merges cached
features into the chunks that need them, runs the decoder over the paged KV cache for all
chunks at once, and samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from encoder_cache.feature_store import FeatureStore
from maca_kernels import ops
from runner.kv_cache import ChunkLayout, PagedAttention, PagedKVCache
from runner.sampler import SamplingState, sample
from scheduler.contracts import NewRequestData, RunnerOutput, SchedulerOutput
from vision.types import MultimodalInputs

paddle = ops.paddle


@dataclass
class RunnerRequest:
    """What the runner keeps about a request between steps."""

    token_ids: list[int]
    prompt_len: int
    mm_inputs: MultimodalInputs | None
    sampling: SamplingState
    eos_token_id: int | None
    block_ids: list[int] = field(default_factory=list)

    def positions(self, start: int, end: int) -> np.ndarray:
        """3D rope positions ``[3, end - start]``: the prompt's own, then decode positions."""
        out = np.empty((3, end - start), dtype=np.int64)
        prompt_end = min(end, self.prompt_len)
        if start < prompt_end:
            if self.mm_inputs is not None and self.mm_inputs.position_ids is not None:
                out[:, : prompt_end - start] = self.mm_inputs.position_ids[:, start:prompt_end]
            else:
                out[:, : prompt_end - start] = np.arange(start, prompt_end)
        if end > self.prompt_len:
            first = max(start, self.prompt_len)
            delta = self.mm_inputs.rope_delta if self.mm_inputs is not None else 0
            out[:, first - start :] = np.arange(first, end) + delta
        return out


class ModelRunner:
    """Runs steps planned by the scheduler on one model."""

    def __init__(
        self, model: Any, cache: PagedKVCache, eos_token_id: int | None = None, seed: int = 0
    ) -> None:
        self.model, self.cache, self.eos_token_id = model, cache, eos_token_id
        self.features = FeatureStore()
        self.requests: dict[str, RunnerRequest] = {}
        self._seeds = np.random.default_rng(seed)

    def _add(self, new: NewRequestData) -> None:
        params = new.sampling
        seed = params.seed if params.seed is not None else int(self._seeds.integers(2**63))
        prompt_len = new.num_prompt_tokens
        self.requests[new.request_id] = RunnerRequest(
            token_ids=list(new.token_ids),
            prompt_len=prompt_len,
            mm_inputs=new.mm_inputs,
            sampling=SamplingState(
                params,
                np.random.default_rng(seed),
                np.asarray(new.token_ids[:prompt_len], dtype=np.int64),
                list(new.token_ids[prompt_len:]),
            ),
            eos_token_id=self.eos_token_id,
        )

    def _encode(self, out: SchedulerOutput) -> None:
        if not out.encode:
            return
        patches, grids = [], []
        for item in out.encode:
            mm = self.requests[item.request_id].mm_inputs.items[item.item_index]
            if mm.patches is None:
                raise RuntimeError(f"no pixels for media item {item.mm_hash} to encode")
            patches.append(mm.patches)
            grids.append(tuple(mm.grid_thw))
        features = self.model.encode_images(paddle.to_tensor(np.concatenate(patches)), grids)
        start = 0
        for item in out.encode:
            self.features.put(item.mm_hash, features[start : start + item.num_tokens], item.cache)
            start += item.num_tokens

    def execute(self, out: SchedulerOutput) -> RunnerOutput:
        """Run one step; returns the sampled tokens of chunks with ``sample=True``."""
        for rid in out.finished_ids + out.preempted_ids:
            self.requests.pop(rid, None)
        for new in out.new_requests:
            self._add(new)
        if not out.chunks:
            self.features.end_step(out.free_mm_hashes)
            return RunnerOutput()
        with paddle.no_grad():
            self._encode(out)
            result = self._forward(out)
        self.features.end_step(out.free_mm_hashes)
        return result

    def _forward(self, out: SchedulerOutput) -> RunnerOutput:
        ids, positions, slots, layouts = [], [], [], []
        merges: list[tuple[int, Any]] = []  # (row, features) per media piece
        row = 0
        for chunk in out.chunks:
            request = self.requests[chunk.request_id]
            request.block_ids.extend(chunk.new_block_ids)
            ids.extend(request.token_ids[chunk.start : chunk.end])
            positions.append(request.positions(chunk.start, chunk.end))
            slots.append(self.cache.slots(request.block_ids, chunk.start, chunk.end))
            context = self.cache.slots(request.block_ids, 0, chunk.end)
            layouts.append(
                ChunkLayout(row, row + chunk.num_tokens, chunk.start, paddle.to_tensor(context))
            )
            for item in request.mm_inputs.items if request.mm_inputs is not None else []:
                lo, hi = max(chunk.start, item.offset), min(chunk.end, item.end)
                if lo < hi:
                    part = self.features.get(item.mm_hash)[lo - item.offset : hi - item.offset]
                    merges.append((row + lo - chunk.start, part))
            row += chunk.num_tokens
        input_ids = paddle.to_tensor(ids, dtype="int64")
        x = self.model.embed(input_ids)
        if merges:
            rows = np.concatenate([np.arange(r, r + f.shape[0]) for r, f in merges])
            feats = paddle.concat([f for _, f in merges]).astype(x.dtype)
            x = paddle.scatter(x, paddle.to_tensor(rows), feats)
        backend = PagedAttention(self.cache, layouts, paddle.to_tensor(np.concatenate(slots)))
        hidden = self.model.run_decoder(
            input_ids, x, paddle.to_tensor(np.concatenate(positions, axis=1)), backend
        )
        sampled_chunks = [c for c in out.chunks if c.sample]
        if not sampled_chunks:
            return RunnerOutput()
        last_rows = [
            layout.row_end - 1 for c, layout in zip(out.chunks, layouts, strict=True) if c.sample
        ]
        logits = self.model.logits(paddle.gather(hidden, paddle.to_tensor(last_rows)))
        states = [self.requests[c.request_id].sampling for c in sampled_chunks]
        eos = [self.requests[c.request_id].eos_token_id for c in sampled_chunks]
        tokens, logprobs = sample(logits.astype("float32").numpy(), states, eos)
        result = RunnerOutput()
        for chunk, token, logprob in zip(sampled_chunks, tokens.tolist(), logprobs, strict=True):
            request = self.requests[chunk.request_id]
            request.token_ids.append(token)
            request.sampling.output_token_ids.append(token)
            result.sampled[chunk.request_id] = token
            if logprob is not None:
                result.logprobs[chunk.request_id] = logprob
        return result
