"""Scheduler + model runner (paged KV, chunked prefill, encoder cache, prefix cache,
preemption) give the same greedy tokens as the plain model run one request at a time."""

from __future__ import annotations

import numpy as np
import pytest

from maca_kernels.ops import paddle
from runner.kv_cache import PagedKVCache
from runner.model_runner import ModelRunner
from runner.models import load_model
from scheduler import CacheConfig, Request, SamplingParams, Scheduler, SchedulerConfig
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt

MAX_TOKENS = 6


@pytest.fixture(scope="module")
def setup(tiny_ocr_dir, astronaut, coffee):
    model = load_model(tiny_ocr_dir, progress=False)
    config = ProcessorConfig.from_checkpoint(tiny_ocr_dir)
    small = type(config.image_resize)(28, 28 * 28 * 8, 28 * 28 * 24)
    processor = MediaProcessor(type(config)(**{**config.__dict__, "image_resize": small}))
    a = processor.process_image(astronaut[:200, :260], "astronaut")
    b = processor.process_image(coffee[:150, :300], "coffee")
    image, start, end = config.image_token_id, config.vision_start_token_id, 6
    prefix = [3, 40, 41, 42, 43, 44, 45, 46, 47, 48]
    prompts = [
        (prefix + [50, 51, 52], []),
        (prefix + [start, image, end, 60, 61], [a]),
        (prefix + [start, image, end, 62, start, image, end, 63], [a, b]),
        ([3, 70, start, image, end, 71, 72], [b]),
        (prefix + [start, image, end, 60, 61, 64], [a]),  # shares a's prefix and image
    ]
    requests = []
    for i, (ids, media) in enumerate(prompts):
        expanded, mm = expand_prompt(ids, media, processor.config)
        requests.append((f"r{i}", expanded, mm if media else None))
    return model, requests


def reference_greedy(model, ids, mm, steps, margins=None):
    """Plain model, whole sequence recomputed for every token (no cache). ``margins``, if
    given, receives the top-2 logit margin of every step."""
    features = None
    if mm is not None and mm.items:
        patches = np.concatenate([item.patches for item in mm.items])
        features = model.encode_images(
            paddle.to_tensor(patches), [tuple(item.grid_thw) for item in mm.items]
        )
    tokens = list(ids)
    n = len(ids)
    delta = mm.rope_delta if mm is not None else 0
    prompt_positions = mm.position_ids if mm is not None else np.tile(np.arange(n), (3, 1))
    out = []
    for _ in range(steps):
        extra = np.tile(np.arange(n, len(tokens)) + delta, (3, 1))
        positions = np.concatenate([prompt_positions, extra], axis=1)
        logits = model(paddle.to_tensor(tokens), paddle.to_tensor(positions), features)
        last = logits[-1].numpy()
        token = int(last.argmax())
        if margins is not None:
            top2 = np.sort(last)[-2:]
            margins.append(float(top2[1] - top2[0]))
        tokens.append(token)
        out.append(token)
    return out


def run_engine(model, requests, budget, blocks, block_size=8, encoder_tokens=None):
    config = model.config
    scheduler = Scheduler(
        SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=4, max_model_len=512),
        CacheConfig(
            num_kv_blocks=blocks, block_size=block_size, encoder_cache_tokens=encoder_tokens
        ),
    )
    cache = PagedKVCache(
        config.num_hidden_layers, blocks, block_size, config.num_key_value_heads, config.head_dim
    )
    runner = ModelRunner(model, cache)
    for rid, ids, mm in requests:
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        scheduler.add_request(Request(rid, list(ids), sampling=params, mm_inputs=mm))
    steps = 0
    while scheduler.has_unfinished():
        out = scheduler.schedule()
        scheduler.update(out, runner.execute(out))
        scheduler.check_invariants()
        steps += 1
        assert steps < 1000
    finished = {r.request_id: r for r in scheduler.take_finished()}
    return {rid: r.output_token_ids for rid, r in finished.items()}, scheduler


NEAR_TIE = 1e-4


def assert_same_greedy(got: list[int], expected: list[int], margins: list[float], what: str):
    """Equal tokens, except after a step where the reference's top-2 margin is a near-tie
    (≤ 1e-4): there the runs may diverge legitimately; that is reported, not hidden."""
    for step, (a, b) in enumerate(zip(got, expected, strict=True)):
        if a == b:
            continue
        if margins[step] <= NEAR_TIE:
            import warnings

            warnings.warn(
                f"{what}: near-tie at step {step} (margin {margins[step]:.2e}); "
                "tokens after it are not compared",
                stacklevel=2,
            )
            return
        raise AssertionError(f"{what}: step {step}: {got} != {expected} (margin {margins[step]})")


@pytest.fixture(scope="module")
def expected(setup):
    model, requests = setup
    results = {}
    with paddle.no_grad():
        for rid, ids, mm in requests:
            margins: list[float] = []
            results[rid] = (reference_greedy(model, ids, mm, MAX_TOKENS, margins), margins)
    return results


@pytest.mark.parametrize(
    ("budget", "blocks", "encoder_tokens", "what"),
    [
        (4096, 256, None, "one big batch"),
        (48, 256, None, "chunked prefill, prefix and encoder cache hits"),
        (48, 256, 40, "tiny encoder cache: evictions and re-encoding"),
        (64, 14, None, "tiny KV pool: preemption"),
    ],
)
def test_engine_matches_plain_model(setup, expected, budget, blocks, encoder_tokens, what):
    model, requests = setup
    got, scheduler = run_engine(model, requests, budget, blocks, encoder_tokens=encoder_tokens)
    for rid, (tokens, margins) in expected.items():
        assert_same_greedy(got[rid], tokens, margins, f"{what}, {rid}")
    metrics = scheduler.metrics()
    if budget == 48 and encoder_tokens is None:
        assert metrics["prefix_cache_hit_tokens"] > 0 and metrics["encoder_cache_hits"] > 0
    if blocks == 14:
        assert metrics["preemptions"] > 0
