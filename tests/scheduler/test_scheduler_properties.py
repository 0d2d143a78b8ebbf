"""Randomized workloads: invariants after every step, media spans never cut, budgets kept,
everything freed after drain, and outputs independent of preemption and caching."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import CacheConfig, FinishReason, Scheduler, SchedulerConfig
from tests.scheduler.workload import FakeRunner, make_request, step


@st.composite
def workloads(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    prefixes = [[rng.randrange(8, 40) for _ in range(rng.randrange(0, 24))] for _ in range(3)]
    images = [(f"img{i}", rng.randrange(1, 14)) for i in range(4)]
    requests = []
    for i in range(draw(st.integers(1, 10))):
        text = rng.choice(prefixes) + [rng.randrange(8, 40) for _ in range(rng.randrange(1, 20))]
        spans, offset = [], 0
        for _ in range(rng.randrange(0, 5)):
            mm_hash, length = rng.choice(images)
            offset += rng.randrange(0, 6)
            if offset > len(text) + sum(s[1] for s in spans):
                break
            spans.append((offset, length, mm_hash))
            offset += length
        requests.append((f"r{i}", text, spans, rng.randrange(1, 12)))
    aborts = {rng.randrange(0, 30): f"r{rng.randrange(len(requests))}" for _ in range(2)}
    return requests, aborts


def drive(config, cache, requests, aborts, eos=None, rng_seed=0, token_fn=None):
    scheduler = Scheduler(config, cache, max_item_tokens=16)
    runner = FakeRunner(random.Random(rng_seed))
    if token_fn is not None:
        runner.token_fn = token_fn
    for rid, text, spans, max_tokens in requests:
        scheduler.add_request(make_request(rid, text, spans, max_tokens, eos=eos))
    scheduler.check_invariants()
    finished = {r.request_id: r for r in scheduler.take_finished()}
    for step_index in range(2000):
        if not scheduler.has_unfinished():
            break
        if step_index in aborts:
            scheduler.abort(aborts[step_index])
            scheduler.check_invariants()
        overruns = scheduler.stats.budget_overruns
        out = step(scheduler, runner)
        scheduler.check_invariants()
        for chunk in out.chunks:
            request = scheduler.requests.get(chunk.request_id) or finished.get(chunk.request_id)
            for item in request.mm_items if request else []:
                assert not item.offset < chunk.end < item.end, "chunk ends inside a media span"
        if out.num_scheduled_tokens > config.max_num_batched_tokens:
            assert scheduler.stats.budget_overruns > overruns, "uncounted budget overrun"
        for request in scheduler.take_finished():
            finished[request.request_id] = request
    else:
        raise AssertionError("workload did not drain")
    for request in scheduler.take_finished():
        finished[request.request_id] = request
    # drained: nothing referenced, every slot free
    assert scheduler.blocks.num_free_blocks == cache.num_kv_blocks
    assert all(not users for users in scheduler.encoder.refs.values())
    assert len(scheduler.free_slots) == config.max_num_seqs
    return scheduler, finished


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=workloads(),
    budget=st.integers(4, 40),
    seqs=st.integers(1, 6),
    blocks=st.integers(24, 60),
    block_size=st.sampled_from([2, 4, 8]),
    encoder_tokens=st.sampled_from([None, 8, 30]),
)
def test_random_workloads_keep_invariants_and_drain(
    workload, budget, seqs, blocks, block_size, encoder_tokens
):
    requests, aborts = workload
    config = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=seqs, max_model_len=96)
    cache = CacheConfig(
        num_kv_blocks=blocks, block_size=block_size, encoder_cache_tokens=encoder_tokens
    )
    scheduler, finished = drive(config, cache, requests, aborts)
    assert set(finished) == {rid for rid, *_ in requests}
    for rid, _text, _spans, max_tokens in requests:
        request = finished[rid]
        produced = len(request.output_token_ids)
        if request.finish_reason is FinishReason.MAX_TOKENS:
            assert produced == max_tokens
        elif request.finish_reason is FinishReason.LENGTH:
            assert request.num_tokens == scheduler.max_len and produced < max_tokens
        elif request.finish_reason is FinishReason.ERROR:
            assert request.num_prompt_tokens >= scheduler.max_len and produced == 0
        else:
            assert request.finish_reason is FinishReason.ABORT


def positional_token(request, position: int) -> int:
    """A deterministic 'model': the next token depends only on the request and position."""
    return (hash(request) * 31 + position * 17) % 50


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads(), budget=st.integers(4, 40), block_size=st.sampled_from([2, 4]))
def test_outputs_do_not_depend_on_pool_size_or_prefix_caching(workload, budget, block_size):
    requests, _ = workload
    config = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=6, max_model_len=64)
    tight = CacheConfig(
        num_kv_blocks=64 // block_size, block_size=block_size, encoder_cache_tokens=8
    )
    roomy = CacheConfig(num_kv_blocks=4096, block_size=block_size, enable_prefix_caching=False)
    runs = []
    for cache in (tight, roomy):
        scheduler, finished = drive(config, cache, requests, {}, token_fn=positional_token)
        runs.append({rid: (r.output_token_ids, r.finish_reason) for rid, r in finished.items()})
    assert runs[0] == runs[1]
