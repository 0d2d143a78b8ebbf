"""``vlm-server bench scheduler``: the cost of one ``schedule()`` + ``update()`` step.

For each size, ``running`` requests with media in their prompts are brought to steady decoding
while 1000 more wait (the batch is full, so they stay queued); then the two calls are timed over
many steps. The runner is not part of the measurement.
"""

from __future__ import annotations

import random
import time
from typing import Any

from scheduler import (
    CacheConfig,
    Request,
    RunnerOutput,
    SamplingParams,
    Scheduler,
    SchedulerConfig,
)
from vision.types import MultimodalInputs, MultimodalItem

SIZES = (16, 64, 256, 1024)
WAITING = 1000
BLOCK_SIZE = 16


def _request(rid: str, rng: random.Random) -> Request:
    """A 160-token prompt: a shared system prefix, one 64-token image, a question."""
    system = list(range(1000, 1032))
    image_hash = f"img{rng.randrange(50)}"
    question = [rng.randrange(2000, 3000) for _ in range(64)]
    ids = system + [7] * 64 + question
    item = MultimodalItem("image", image_hash, (1, 16, 16), len(system), 64)
    return Request(
        rid,
        ids,
        sampling=SamplingParams(max_tokens=100_000, ignore_eos=True),
        mm_inputs=MultimodalInputs(items=[item]),
    )


def _sampled(out) -> RunnerOutput:
    return RunnerOutput({c.request_id: 5 for c in out.chunks if c.sample})


def measure(running: int, steps: int = 50) -> dict[str, float]:
    rng = random.Random(running)
    blocks = (running + WAITING) * (160 // BLOCK_SIZE + 8)
    scheduler = Scheduler(
        SchedulerConfig(
            max_num_batched_tokens=max(4096, running * 2),
            max_num_seqs=running,
            max_model_len=100_000,
        ),
        CacheConfig(num_kv_blocks=blocks, block_size=BLOCK_SIZE, encoder_cache_tokens=64 * 64),
    )
    for i in range(running + WAITING):
        scheduler.add_request(_request(f"r{i}", rng))
    while (
        any(r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.running)
        or len(scheduler.running) < running
    ):
        out = scheduler.schedule()
        scheduler.update(out, _sampled(out))
    elapsed = 0.0
    tokens = 0
    for _ in range(steps):
        start = time.perf_counter()
        out = scheduler.schedule()
        middle = time.perf_counter()
        result = _sampled(out)
        resumed = time.perf_counter()
        scheduler.update(out, result)
        elapsed += (middle - start) + (time.perf_counter() - resumed)
        tokens += out.num_scheduled_tokens
    scheduler.check_invariants()
    return {"us_per_step": elapsed / steps * 1e6, "us_per_token": elapsed / tokens * 1e6}


def run(sizes: tuple[int, ...] = SIZES, steps: int = 50) -> dict[str, Any]:
    per_step, per_token = {}, {}
    for size in sizes:
        result = measure(size, steps)
        per_step[str(size)] = round(result["us_per_step"], 1)
        per_token[str(size)] = round(result["us_per_token"], 3)
    first, last = str(sizes[0]), str(sizes[-1])
    growth = (per_step[last] / per_step[first]) / (sizes[-1] / sizes[0])
    return {
        "us_per_step": per_step,
        "us_per_token": per_token,
        "waiting": WAITING,
        # 1.0 = exactly linear in the running count; below 1 = sub-linear
        "growth_vs_linear": round(growth, 3),
    }
