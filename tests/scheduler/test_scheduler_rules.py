"""One test per scheduling rule."""

from __future__ import annotations

import random

import pytest

from scheduler import (
    CacheConfig,
    FinishReason,
    KVBlockManager,
    RequestStatus,
    RunnerOutput,
    Scheduler,
    SchedulerConfig,
    revert_to_media_boundary,
)
from tests.scheduler.workload import FakeRunner, make_request, step
from vision.types import MultimodalItem


def items(*spans: tuple[int, int]) -> list[MultimodalItem]:
    return [MultimodalItem("image", f"h{i}", (1, 2, 2), o, n) for i, (o, n) in enumerate(spans)]


def scheduler(budget=64, seqs=8, max_len=512, blocks=64, block_size=4, encoder=None):
    return Scheduler(
        SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=seqs, max_model_len=max_len),
        CacheConfig(num_kv_blocks=blocks, block_size=block_size, encoder_cache_tokens=encoder),
    )


def drain(s: Scheduler, runner: FakeRunner | None = None, limit: int = 500):
    runner = runner or FakeRunner(random.Random(0))
    outs = []
    while s.has_unfinished():
        outs.append(step(s, runner))
        s.check_invariants()
        assert len(outs) < limit
    return outs


# -- prefix revert (FastDeploy's revert_chunked_mm_input cases) ---------------------------------
@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([(40, 100), (200, 80)], 192),
        ([(100, 100), (200, 80)], 64),
        ([(60, 100), (180, 100)], 0),
        ([(5, 10), (200, 56)], 256),
    ],
)
def test_cached_prefix_ending_inside_a_span_is_cut_back(spans, expected):
    assert revert_to_media_boundary(256, items(*spans), 64) == expected


# -- prefix caching --------------------------------------------------------------------------
def test_same_placeholders_with_different_images_never_share_blocks():
    s = scheduler(block_size=4)
    text = list(range(10, 30))
    s.add_request(make_request("a", text, [(4, 8, "cat")], max_tokens=1))
    drain(s)
    s.add_request(make_request("b", text, [(4, 8, "dog")], max_tokens=1))
    s.add_request(make_request("c", text, [(4, 8, "cat")], max_tokens=1))
    drain(s)
    finished = {r.request_id: r for r in s.take_finished()}
    assert finished["b"].num_cached_tokens == 4  # only the block before the image
    assert finished["c"].num_cached_tokens == 24  # 28 tokens; at least one is recomputed


def test_unused_cached_blocks_stay_reusable_until_evicted():
    s = scheduler(blocks=8, block_size=4)
    prompt = list(range(100, 117))  # 17 tokens: 4 full blocks
    s.add_request(make_request("a", prompt, [], max_tokens=1))
    drain(s)
    assert s.blocks.num_free_blocks == 8 and len(s.blocks.cached) == 4
    s.add_request(make_request("b", prompt, [], max_tokens=1))
    drain(s)
    assert s.take_finished()[-1].num_cached_tokens == 16
    s.add_request(make_request("filler", list(range(200, 231)), [], max_tokens=1))  # 8 blocks
    drain(s)
    s.add_request(make_request("c", prompt, [], max_tokens=1))
    drain(s)
    assert s.take_finished()[-1].num_cached_tokens == 0


def test_prefix_hit_is_cut_back_to_before_an_image():
    s = scheduler(block_size=4)
    text = list(range(10, 40))
    s.add_request(make_request("a", text, [(6, 8, "img")], max_tokens=1))
    drain(s)
    # Same image, but the token right after it differs: blocks [0, 12) match, and 12 falls
    # inside the span [6, 14), so the hit is cut back to the block boundary before 6.
    other = list(text)
    other[6] = 99  # prompt position 14 (the image's 8 tokens are inserted at 6)
    s.add_request(make_request("b", other, [(6, 8, "img")], max_tokens=1))
    outs = drain(s)
    (b,) = s.take_finished()[-1:]
    assert b.num_cached_tokens == 4
    assert outs[0].chunks[0].start == 4


# -- chunking --------------------------------------------------------------------------------
def test_chunk_stops_at_a_span_start_and_takes_whole_spans():
    s = scheduler(budget=10)
    s.add_request(make_request("a", list(range(10, 30)), [(6, 12, "img")], max_tokens=1))
    first = s.schedule()
    assert [(c.start, c.end) for c in first.chunks] == [(0, 6)]
    s.update(first, RunnerOutput())
    second = s.schedule()
    # the 12-token span is larger than the whole budget: taken whole, counted as an overrun
    assert [(c.start, c.end) for c in second.chunks] == [(6, 18)]
    assert s.stats.budget_overruns == 1


def test_decodes_go_before_new_prefills():
    s = scheduler(budget=8)
    s.add_request(make_request("a", list(range(10, 16)), [], max_tokens=3))
    step(s, FakeRunner(random.Random(0)))
    s.add_request(make_request("b", list(range(20, 40)), [], max_tokens=1))
    out = s.schedule()
    assert [(c.request_id, c.end - c.start) for c in out.chunks] == [("a", 1), ("b", 7)]


def test_max_num_seqs_and_slots():
    s = scheduler(seqs=2)
    for i in range(4):
        s.add_request(make_request(f"r{i}", [5, 6, 7], [], max_tokens=2))
    runner = FakeRunner(random.Random(0))
    first = step(s, runner)
    assert {c.request_id for c in first.chunks} == {"r0", "r1"}
    assert sorted(c.slot for c in first.chunks) == [0, 1]
    outs = drain(s, runner)
    assert max(len(o.chunks) for o in outs) <= 2
    assert {c.slot for o in outs for c in o.chunks} == {0, 1}  # slots are reused


# -- admission, preemption, abort, impossible requests ---------------------------------------
def test_admission_keeps_a_block_per_running_request():
    s = scheduler(blocks=6, block_size=4)
    s.add_request(make_request("a", list(range(10, 18)), [], max_tokens=8))  # 2 blocks + decode
    step(s, FakeRunner(random.Random(0)))
    # b needs 4 blocks; 4 are free but one must stay for a's decodes
    s.add_request(make_request("b", list(range(20, 35)), [], max_tokens=1))
    out = s.schedule()
    assert [c.request_id for c in out.chunks] == ["a"]


def test_preemption_takes_the_newest_and_output_is_unchanged():
    def token(rid, position):
        return (len(rid) * 7 + position * 3) % 23 + 30

    def run(blocks):
        s = scheduler(blocks=blocks, block_size=2, max_len=40)
        for i in range(3):
            s.add_request(make_request(f"r{i}", [1, 2, 3, 4 + i], [], max_tokens=12))
        runner = FakeRunner(random.Random(0))
        runner.token_fn = token
        outs = drain(s, runner)
        preempted = [rid for o in outs for rid in o.preempted_ids]
        return {r.request_id: r.output_token_ids for r in s.take_finished()}, preempted

    roomy, none = run(blocks=100)
    tight, preempted = run(blocks=20)
    assert not none and preempted and preempted[0] == "r2"
    assert tight == roomy


def test_abort_frees_everything_in_any_state():
    s = scheduler(seqs=1)
    s.add_request(make_request("run", list(range(10, 30)), [(2, 6, "img")], max_tokens=5))
    s.add_request(make_request("wait", [1, 2, 3], [], max_tokens=5))
    step(s, FakeRunner(random.Random(0)))
    assert s.abort("wait") and s.abort("run") and not s.abort("nope")
    s.check_invariants()
    assert s.blocks.num_free_blocks == 64 and not s.has_unfinished()
    assert {r.request_id: r.finish_reason for r in s.take_finished()} == {
        "wait": FinishReason.ABORT,
        "run": FinishReason.ABORT,
    }
    assert s.schedule().finished_ids == ["run"]  # the runner forgets it next step


def test_requests_that_can_never_fit_fail_at_once():
    s = scheduler(max_len=32, blocks=64)
    s.add_request(make_request("long", list(range(40)), [], max_tokens=1))
    small_pool = scheduler(max_len=512, blocks=4, block_size=4)
    small_pool.add_request(make_request("big", list(range(20)), [], max_tokens=1))
    for sched, rid, needle in ((s, "long", "max_model_len"), (small_pool, "big", "KV cache")):
        (request,) = sched.take_finished()
        assert request.request_id == rid and request.finish_reason is FinishReason.ERROR
        assert needle in request.error
        assert not sched.has_unfinished()


# -- stop conditions -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sampling", "tokens", "reason", "length"),
    [
        ({}, [5, 9, 5], FinishReason.EOS, 2),
        ({"min_tokens": 3}, [9, 9, 9], FinishReason.EOS, 3),
        ({"min_tokens": 3}, [9, 9, 5, 9], FinishReason.EOS, 4),
        ({"ignore_eos": True}, [9] * 6, FinishReason.MAX_TOKENS, 6),
        ({"stop_token_ids": (11,)}, [5, 11], FinishReason.STOP_TOKEN, 2),
        ({}, [5] * 6, FinishReason.MAX_TOKENS, 6),
    ],
)
def test_stop_reasons(sampling, tokens, reason, length):
    s = scheduler()
    s.add_request(make_request("a", [1, 2, 3], [], max_tokens=6, eos=9, **sampling))
    feed = iter(tokens + [5] * 10)
    while s.has_unfinished():
        out = s.schedule()
        s.update(out, RunnerOutput({c.request_id: next(feed) for c in out.chunks if c.sample}))
    (request,) = s.take_finished()
    assert request.finish_reason is reason and len(request.output_token_ids) == length


def test_length_limit_finishes_with_length():
    s = scheduler(max_len=8)
    s.add_request(make_request("a", [1, 2, 3, 4, 5], [], max_tokens=100))
    drain(s)
    (request,) = s.take_finished()
    assert request.finish_reason is FinishReason.LENGTH and request.num_tokens == 8


# -- encoder cache ---------------------------------------------------------------------------
def test_item_larger_than_the_encoder_cache_is_encoded_uncached():
    s = scheduler(encoder=8)
    s.add_request(make_request("a", list(range(10, 20)), [(2, 20, "huge")], max_tokens=1))
    outs = drain(s)
    (encode,) = [e for o in outs for e in o.encode]
    assert encode.mm_hash == "huge" and not encode.cache
    assert "huge" not in s.encoder
    assert s.take_finished()[0].finish_reason is FinishReason.MAX_TOKENS


def test_repeated_image_hits_the_encoder_cache_and_evictions_reach_the_runner():
    s = scheduler(encoder=10)
    s.add_request(make_request("a", list(range(10, 20)), [(2, 6, "cat")], max_tokens=1))
    drain(s)
    s.add_request(make_request("b", list(range(30, 40)), [(3, 6, "cat")], max_tokens=1))
    outs = drain(s)
    assert not [e for o in outs for e in o.encode]
    assert s.take_finished()[-1].encoder_cache_hits == 1
    s.add_request(make_request("c", list(range(50, 60)), [(1, 8, "dog")], max_tokens=1))
    outs = drain(s)
    assert [e.mm_hash for o in outs for e in o.encode] == ["dog"]
    assert [h for o in outs for h in o.free_mm_hashes] == ["cat"]


def test_item_in_use_is_never_evicted():
    s = scheduler(budget=40, encoder=10)
    s.add_request(make_request("a", list(range(10, 20)), [(2, 6, "cat")], max_tokens=1))
    s.add_request(make_request("b", list(range(30, 40)), [(2, 6, "dog")], max_tokens=1))
    out = s.schedule()
    # both fit the token budget, but "cat" is referenced: "dog" waits for the next step
    assert [e.mm_hash for e in out.encode] == ["cat"]
    assert [(c.request_id, c.end) for c in out.chunks] == [("a", 16), ("b", 2)]
    s.update(out, RunnerOutput({"a": 1}))
    out = s.schedule()
    assert [e.mm_hash for e in out.encode] == ["dog"] and out.free_mm_hashes == ["cat"]


def test_encoder_compute_budget_per_step():
    s = Scheduler(
        SchedulerConfig(max_num_batched_tokens=64, max_num_encoder_tokens=8),
        CacheConfig(num_kv_blocks=64, block_size=4, encoder_cache_tokens=64),
    )
    s.add_request(make_request("a", list(range(10, 14)), [(0, 6, "x"), (7, 6, "y")], max_tokens=1))
    out = s.schedule()
    assert [e.mm_hash for e in out.encode] == ["x"] and out.chunks[0].end == 7


def test_kv_manager_rejects_inconsistent_tables():
    kv = KVBlockManager(4, 2)
    request = make_request("a", [1, 2, 3], [], max_tokens=1)
    kv.allocate(request, 3)
    with pytest.raises(AssertionError):
        kv.check_invariants([request, request])
    assert request.status is RequestStatus.WAITING
