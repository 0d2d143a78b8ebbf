"""Adversarial tests of the step planner: aborts at awkward moments, starvation, wrong prefix hits,
preemption, and a strict fake runner that rebuilds every request's state purely from the
``SchedulerOutput`` deltas and checks it against the scheduler after every step."""

from __future__ import annotations

import contextlib
import hashlib
import random
import zlib
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import (
    CacheConfig,
    FinishReason,
    Request,
    RequestStatus,
    RunnerOutput,
    Scheduler,
    SchedulerConfig,
    SchedulerOutput,
)
from tests.scheduler.workload import FakeRunner, make_request, step
from vision.types import MultimodalItem

VOCAB = 40
EOS = 3


def token_of(request_id: str, position: int) -> int:
    """A deterministic 'model': the token sampled after ``position`` tokens of ``request_id``."""
    return zlib.crc32(f"{request_id}:{position}".encode()) % VOCAB + 8


def make_scheduler(
    budget=64,
    seqs=8,
    max_len=512,
    blocks=64,
    block_size=4,
    encoder=None,
    encoder_budget=None,
    prefix=True,
) -> Scheduler:
    return Scheduler(
        SchedulerConfig(
            max_num_batched_tokens=budget,
            max_num_seqs=seqs,
            max_model_len=max_len,
            max_num_encoder_tokens=encoder_budget,
        ),
        CacheConfig(
            num_kv_blocks=blocks,
            block_size=block_size,
            encoder_cache_tokens=encoder,
            enable_prefix_caching=prefix,
        ),
    )


def _span_tag(items: list[MultimodalItem], position: int) -> bytes:
    for item in items:
        if item.offset <= position < item.end:
            return f"{item.mm_hash}@{position - item.offset}".encode()
    return b"-"


@dataclass
class StrictRunner:
    """A runner that knows only what the ``SchedulerOutput`` deltas told it.

    It rebuilds each request's block table from ``NewRequestData`` + ``new_block_ids``, its
    tokens from ``NewRequestData`` + its own samples, and its feature store from ``EncodeItem``s
    (``cache=True``) minus ``free_mm_hashes`` (dropped after the forward). It simulates the KV
    content of every block slot as a chained digest of (token, media identity) of the whole
    prefix, so any wrong prefix hit or clobbered block shows up as a KV mismatch.
    """

    scheduler: Scheduler
    token_fn: object = token_of
    tables: dict[str, list[int]] = field(default_factory=dict)
    slots: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    items: dict[str, list[MultimodalItem]] = field(default_factory=dict)
    digests: dict[str, list[bytes]] = field(default_factory=dict)
    store: set[str] = field(default_factory=set)
    kv: dict[tuple[int, int], bytes] = field(default_factory=dict)
    steps: int = 0

    @property
    def block_size(self) -> int:
        return self.scheduler.blocks.block_size

    def _digest(self, rid: str, position: int) -> bytes:
        chain = self.digests[rid]
        tokens, items = self.tokens[rid], self.items[rid]
        while len(chain) <= position:
            p = len(chain)
            parent = chain[-1] if chain else b""
            data = parent + tokens[p].to_bytes(4, "little") + _span_tag(items, p)
            chain.append(hashlib.blake2b(data, digest_size=16).digest())
        return chain[position]

    def _drop(self, rid: str) -> None:
        for table in (self.tables, self.slots, self.tokens, self.items, self.digests):
            table.pop(rid, None)

    def execute(self, out: SchedulerOutput) -> RunnerOutput:
        self.steps += 1
        bs = self.block_size
        for rid in out.finished_ids + out.preempted_ids:
            self._drop(rid)
        for new in out.new_requests:
            assert new.request_id not in self.tables, f"{new.request_id} sent twice"
            self.tables[new.request_id] = []
            self.slots[new.request_id] = new.slot
            self.tokens[new.request_id] = list(new.token_ids)
            self.items[new.request_id] = list(new.mm_inputs.items) if new.mm_inputs else []
            self.digests[new.request_id] = []
        assert len(set(self.slots.values())) == len(self.slots), "two requests share a slot"
        assert len({c.request_id for c in out.chunks}) == len(out.chunks)

        encoded_now: set[str] = set()
        for enc in out.encode:
            assert enc.request_id in self.tables, "encode for an unknown request"
            item = self.items[enc.request_id][enc.item_index]
            assert (item.mm_hash, item.length) == (enc.mm_hash, enc.num_tokens)
            encoded_now.add(enc.mm_hash)
            if enc.cache:
                self.store.add(enc.mm_hash)

        for chunk in out.chunks:
            rid = chunk.request_id
            assert self.slots.get(rid) == chunk.slot, f"{rid}: unknown request or wrong slot"
            table = self.tables[rid]
            table.extend(chunk.new_block_ids)
            tokens = self.tokens[rid]
            assert 0 <= chunk.start < chunk.end <= len(tokens), (rid, chunk, len(tokens))
            assert chunk.sample == (chunk.end == len(tokens)), (rid, chunk, len(tokens))
            assert len(table) * bs >= chunk.end, f"{rid}: too few blocks"
            live = self.scheduler.requests.get(rid)
            if live is not None and live.status is RequestStatus.RUNNING:
                assert table == live.block_ids, f"{rid}: runner table {table} != {live.block_ids}"
            # the already-computed prefix must hold exactly this request's KV
            for p in range(chunk.start):
                got = self.kv.get((table[p // bs], p % bs))
                assert got == self._digest(rid, p), f"{rid}: wrong KV at position {p}"
            # blocks written now belong to nobody else
            written = set(table[chunk.start // bs : (chunk.end - 1) // bs + 1])
            for other, other_table in self.tables.items():
                if other != rid:
                    shared = written & set(other_table)
                    assert not shared, f"{rid} writes blocks {shared} also held by {other}"
            for item in self.items[rid]:
                if item.offset < chunk.end and item.end > chunk.start:
                    assert chunk.start <= item.offset and item.end <= chunk.end, "split span"
                    assert item.mm_hash in encoded_now or item.mm_hash in self.store, (
                        f"{rid}: features of {item.mm_hash} are missing"
                    )
        sampled = {}
        for chunk in out.chunks:
            rid, table = chunk.request_id, self.tables[chunk.request_id]
            for p in range(chunk.start, chunk.end):
                self.kv[(table[p // bs], p % bs)] = self._digest(rid, p)
            if chunk.sample:
                token = self.token_fn(rid, chunk.end)
                sampled[rid] = token
                self.tokens[rid].append(token)
        for mm_hash in out.free_mm_hashes:
            assert mm_hash in self.store, f"freeing {mm_hash}, which the runner never stored"
            self.store.discard(mm_hash)
        return RunnerOutput(sampled=sampled)

    def check_agrees(self) -> None:
        """After update(): the runner's view matches the scheduler's."""
        s = self.scheduler
        for request in s.running:
            rid = request.request_id
            assert self.tables.get(rid) == request.block_ids, f"{rid}: block tables disagree"
            assert self.tokens[rid] == request.token_ids(0, request.num_tokens)
        for request in s.waiting:
            assert request.request_id not in self.tables, "a waiting request is still known"
        missing = set(s.encoder.sizes) - self.store
        assert not missing, f"scheduler thinks {missing} are cached; the runner dropped them"


def expected_outcome(request: Request, max_len: int) -> tuple[list[int], FinishReason]:
    """What an unbatched, unpreempted run of ``request`` produces under ``token_of``."""
    params = request.sampling
    prompt = request.num_prompt_tokens
    out: list[int] = []
    while True:
        token = token_of(request.request_id, prompt + len(out))
        out.append(token)
        if len(out) >= params.min_tokens:
            if token == request.eos_token_id and not params.ignore_eos:
                return out, FinishReason.EOS
            if token in params.stop_token_ids:
                return out, FinishReason.STOP_TOKEN
        if len(out) >= params.max_tokens:
            return out, FinishReason.MAX_TOKENS
        if prompt + len(out) >= max_len:
            return out, FinishReason.LENGTH


def check_arrival_order(s: Scheduler) -> None:
    """Admission is FIFO and the victim is always the newest running request, so running then
    waiting requests stay in arrival order (a preempted request resumes before younger ones)."""
    times = [r.arrival_time for r in list(s.running) + list(s.waiting)]
    assert times == sorted(times), "requests out of arrival order"


def run_step(s: Scheduler, runner: StrictRunner) -> SchedulerOutput:
    busy = s.has_unfinished()
    out = s.schedule()
    assert out.chunks or not busy, "a step scheduled nothing while requests wait (livelock)"
    check_arrival_order(s)
    s.update(out, runner.execute(out))
    s.check_invariants()
    runner.check_agrees()
    return out


def drain_strict(s: Scheduler, runner: StrictRunner, limit: int = 1000) -> list[SchedulerOutput]:
    outs = []
    while s.has_unfinished():
        outs.append(run_step(s, runner))
        assert len(outs) < limit, "did not drain"
    return outs


def assert_all_free(s: Scheduler) -> None:
    s.check_invariants()
    assert not s.has_unfinished()
    assert s.blocks.num_free_blocks == s.blocks.num_blocks
    assert all(count == 0 for count in s.blocks.ref_counts)
    assert all(not users for users in s.encoder.refs.values())
    assert len(s.free_slots) == s.config.max_num_seqs


def finished_by_id(s: Scheduler) -> dict[str, Request]:
    return {r.request_id: r for r in s.take_finished()}


# == bugs ========================================================================================
def test_item_evicted_and_re_encoded_in_the_same_step_stays_in_the_runner_store():
    """X is evicted to make room for A's image, then re-encoded (cache=True) for B in the same
    step: free_mm_hashes must not tell the runner to drop the fresh copy."""
    s = make_scheduler(encoder=10)
    runner = StrictRunner(s)
    s.add_request(make_request("r1", [10, 11, 12], [(1, 4, "X")], max_tokens=1))
    drain_strict(s, runner)
    s.add_request(make_request("r2", [20, 21, 22], [(1, 4, "Z")], max_tokens=1))
    drain_strict(s, runner)  # cache: X, Z (4 + 4 of 10), both unreferenced, X least recent
    s.add_request(make_request("A", [30, 31, 32], [(1, 4, "Y")], max_tokens=1))
    s.add_request(make_request("B", [40, 41, 42], [(1, 4, "X")], max_tokens=1))
    out = s.schedule()
    assert [e.mm_hash for e in out.encode] == ["Y", "X"]
    s.update(out, runner.execute(out))
    # the scheduler keeps X as cached; the runner must still have its features
    assert "X" in s.encoder
    assert "X" not in out.free_mm_hashes, "X was re-encoded with cache=True this very step"


def test_empty_prompt_does_not_block_the_waiting_queue():
    s = make_scheduler()
    s.add_request(make_request("empty", [], [], max_tokens=2))
    s.add_request(make_request("b", [1, 2, 3], [], max_tokens=2))
    runner = FakeRunner(random.Random(0))
    for _ in range(20):
        if not s.has_unfinished():
            break
        step(s, runner)
    finished = finished_by_id(s)
    assert "b" in finished and finished["b"].finish_reason is FinishReason.MAX_TOKENS
    assert "empty" in finished  # it can never sample a first token: expected an error at once


def test_missing_sampled_token_leaves_the_scheduler_consistent():
    s = make_scheduler()
    s.add_request(make_request("a", [1, 2, 3], [], max_tokens=1))
    s.add_request(make_request("b", [4, 5, 6], [], max_tokens=3))
    out = s.schedule()
    with contextlib.suppress(Exception):
        s.update(out, RunnerOutput({"a": 9}))  # the runner lost b's token
    s.check_invariants()  # a (finished) must not stay in running
    assert all(r.status is RequestStatus.RUNNING for r in s.running)


def test_missing_sampled_token_does_not_hang_the_request():
    s = make_scheduler()
    s.add_request(make_request("b", [4, 5, 6], [], max_tokens=3))
    out = s.schedule()
    with contextlib.suppress(Exception):
        s.update(out, RunnerOutput({}))
    runner = FakeRunner(random.Random(0))
    for _ in range(20):
        if not s.has_unfinished():
            break
        step(s, runner)
    assert not s.has_unfinished(), "b never progresses again (computed == known tokens)"


# == randomized workloads against the strict runner ==============================================
@dataclass
class Workload:
    requests: list[tuple[str, list[int], list[tuple[int, int, str]], dict]]
    arrivals: dict[int, list[int]]  # step -> indexes of requests that arrive then
    events: list[tuple[int, str, str]]  # (step, phase, target) aborts; phase in PHASES


PHASES = ("before", "mid", "post", "after", "preempted", "readd")


def random_workload(rng: random.Random, num_events: int) -> Workload:
    num_images = rng.randrange(1, 6)
    images = [(f"img{i}", rng.randrange(1, 12)) for i in range(num_images)]
    prefixes = [[rng.randrange(8, 48) for _ in range(rng.randrange(0, 12))] for _ in range(2)]
    requests = []
    for i in range(rng.randrange(1, 11)):
        text = rng.choice(prefixes) + [rng.randrange(8, 48) for _ in range(rng.randrange(1, 10))]
        spans: list[tuple[int, int, str]] = []
        position = 0
        for _ in range(rng.randrange(0, 4)):
            mm_hash, length = rng.choice(images)
            position += rng.randrange(0, 4)
            if position > len(text) + sum(span[1] for span in spans):
                break
            spans.append((position, length, mm_hash))
            position += length
        sampling = {"max_tokens": rng.randrange(1, 10)}
        if rng.random() < 0.3:
            sampling["min_tokens"] = rng.randrange(0, sampling["max_tokens"] + 1)
        if rng.random() < 0.2:
            sampling["stop_token_ids"] = (rng.randrange(8, 48),)
        requests.append((f"r{i}", text, spans, sampling))
    arrivals: dict[int, list[int]] = {}
    for index in range(len(requests)):
        arrivals.setdefault(rng.choice([0, 0, 1, 2, 3, 5, 8, 12, 20]), []).append(index)
    events = [
        (rng.randrange(0, 25), rng.choice(PHASES), f"r{rng.randrange(len(requests) + 1)}")
        for _ in range(num_events)
    ]
    return Workload(requests, arrivals, events)


@st.composite
def workloads(draw):
    return random_workload(random.Random(draw(st.integers(0, 2**32 - 1))), draw(st.integers(0, 4)))


def drive(s: Scheduler, workload: Workload, limit: int = 1500) -> list[Request]:
    """Run ``workload`` with aborts at the requested moments; return every request object."""
    runner = StrictRunner(s)
    made: list[Request] = []

    def add(index: int) -> None:
        rid, text, spans, sampling = workload.requests[index]
        request = make_request(rid, text, spans, eos=EOS, **sampling)
        if rid in s.requests:
            with pytest.raises(ValueError):
                s.add_request(request)
            return
        s.add_request(request)
        made.append(request)
        s.check_invariants()

    def abort(rid: str, mid_step: bool = False) -> None:
        before = s.requests.get(rid)
        assert s.abort(rid) == (before is not None)
        assert not s.abort(rid)  # twice: a no-op
        if before is not None:  # everything it held is free now
            assert before.is_finished and before.finish_reason is FinishReason.ABORT
            assert not before.block_ids and before.slot is None
            assert all(rid not in users for users in s.encoder.refs.values())
        if not mid_step:  # (encoder references of scheduled chunks live until update())
            s.check_invariants()

    last_arrival = max(workload.arrivals)
    for step_index in range(limit):
        for index in workload.arrivals.get(step_index, []):
            add(index)
        events = [(phase, rid) for when, phase, rid in workload.events if when == step_index]
        for phase, rid in events:
            if phase == "before":
                abort(rid)
        if not s.has_unfinished() and step_index >= last_arrival:
            break
        busy = s.has_unfinished()
        running_before = [r.request_id for r in s.running]
        budget_overruns = s.stats.budget_overruns
        out = s.schedule()
        assert out.chunks or not busy, "a step scheduled nothing while requests wait"
        check_plan(s, out, running_before, budget_overruns)
        check_arrival_order(s)
        for phase, rid in events:
            if phase == "mid":
                abort(rid, mid_step=True)
            elif phase == "preempted" and out.preempted_ids:
                abort(out.preempted_ids[-1], mid_step=True)
        result = runner.execute(out)
        for phase, rid in events:
            if phase == "post":
                abort(rid, mid_step=True)
        s.update(out, result)
        s.check_invariants()
        runner.check_agrees()
        for phase, rid in events:
            if phase == "after":
                abort(rid)
            elif phase == "readd":  # abort, then the same id comes back as a new request
                abort(rid)
                for index, spec in enumerate(workload.requests):
                    if spec[0] == rid:
                        add(index)
        s.check_invariants()
    else:
        raise AssertionError("workload did not drain")
    assert_all_free(s)
    return made


def check_plan(s: Scheduler, out: SchedulerOutput, running_before, budget_overruns) -> None:
    """Static rules of one step's plan."""
    cfg = s.config
    remaining = cfg.max_num_batched_tokens
    overruns = 0
    for chunk in out.chunks:
        request = s.requests[chunk.request_id]
        for item in request.mm_items:
            assert not item.offset < chunk.end < item.end, "chunk ends inside a span"
            assert not item.offset < chunk.start < item.end, "chunk starts inside a span"
        if chunk.num_tokens > remaining:
            # the only overrun: one whole span, larger than the budget left, at the chunk start
            overruns += 1
            spans = [i for i in request.mm_items if i.offset == chunk.start]
            assert spans and spans[0].length > remaining, "overrun that is not a whole span"
            assert chunk.end == spans[0].end, "overrun chunk goes beyond its span"
        remaining = max(0, remaining - chunk.num_tokens)
    assert overruns <= 1
    assert s.stats.budget_overruns - budget_overruns == overruns, "overrun not counted"
    assert len(out.chunks) <= cfg.max_num_seqs
    if out.new_requests and not out.preempted_ids:  # admission kept a block per running request
        assert s.blocks.num_free_blocks >= len(s.running) - 1
    encoded = [e.num_tokens for e in out.encode]
    assert len(encoded) <= 1 or sum(encoded) <= cfg.encoder_budget, "encoder budget exceeded"
    # preemption: newest first, and they resume oldest first (front of the queue)
    k = len(out.preempted_ids)
    if k:
        assert out.preempted_ids == list(reversed(running_before))[:k]
        assert [r.request_id for r in list(s.waiting)[:k]] == out.preempted_ids[::-1]
        assert not out.new_requests, "admitted while preempting"


def check_outputs(made: list[Request], max_len: int) -> None:
    for request in made:
        assert request.is_finished
        if request.finish_reason is FinishReason.ERROR:
            assert request.num_prompt_tokens >= max_len and not request.output_token_ids
            continue
        tokens, reason = expected_outcome(request, max_len)
        if request.finish_reason is FinishReason.ABORT:
            assert request.output_token_ids == tokens[: len(request.output_token_ids)]
        else:
            assert (request.output_token_ids, request.finish_reason) == (tokens, reason)


# derandomized: the same examples every run (no flakiness, no example database)
@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    workload=workloads(),
    budget=st.sampled_from([1, 2, 3, 5, 8, 16, 40]),
    seqs=st.integers(1, 5),
    block_size=st.sampled_from([1, 2, 4, 8]),
    blocks_tokens=st.sampled_from([48, 64, 96, 400]),
    encoder=st.sampled_from([None, 0, 1, 4, 8, 11, 24]),
    encoder_budget=st.sampled_from([None, 1, 4, 11]),
    prefix=st.booleans(),
)
def test_random_workloads_against_the_strict_runner(
    workload, budget, seqs, block_size, blocks_tokens, encoder, encoder_budget, prefix
):
    max_len = 48
    s = make_scheduler(
        budget=budget,
        seqs=seqs,
        max_len=max_len,
        blocks=blocks_tokens // block_size,
        block_size=block_size,
        encoder=encoder,
        encoder_budget=encoder_budget,
        prefix=prefix,
    )
    made = drive(s, workload)
    check_outputs(made, s.max_len)


# == aborts at awkward moments ===================================================================
def test_abort_between_schedule_and_update_frees_everything_now():
    s = make_scheduler(block_size=2, encoder=16)
    runner = StrictRunner(s)
    shared = [20, 21, 22, 23]
    s.add_request(make_request("keep", shared + [30], [(2, 6, "cat")], max_tokens=4))
    s.add_request(make_request("gone", shared + [31], [(2, 6, "cat")], max_tokens=4))
    out = s.schedule()
    assert {c.request_id for c in out.chunks} == {"keep", "gone"}
    assert s.abort("gone")
    gone = s.take_finished()[0]
    assert not gone.block_ids and gone.slot is None
    assert all("gone" not in users for users in s.encoder.refs.values())
    s.update(out, runner.execute(out))
    s.check_invariants()
    runner.check_agrees()
    nxt = s.schedule()
    assert nxt.finished_ids == ["gone"]  # the runner forgets it before this step
    s.update(nxt, runner.execute(nxt))
    drain_strict(s, runner)
    assert_all_free(s)
    (keep,) = s.take_finished()
    assert (keep.output_token_ids, keep.finish_reason) == expected_outcome(keep, s.max_len)


def force_preemption(s: Scheduler, runner: StrictRunner) -> SchedulerOutput:
    for _ in range(100):
        out = s.schedule()
        if out.preempted_ids:
            return out
        s.update(out, runner.execute(out))
        s.check_invariants()
        runner.check_agrees()
    raise AssertionError("no preemption happened")


def preempting_scheduler() -> Scheduler:
    s = make_scheduler(blocks=12, block_size=2, max_len=24)
    for i in range(3):
        s.add_request(make_request(f"r{i}", [1, 2, 3, 4 + i], [(1, 2, f"im{i}")], max_tokens=12))
    return s


@pytest.mark.parametrize("when", ["before_execute", "before_update", "after_update"])
def test_abort_of_a_request_preempted_in_the_same_step(when):
    s = preempting_scheduler()
    runner = StrictRunner(s)
    out = force_preemption(s, runner)
    victim = out.preempted_ids[0]
    assert s.requests[victim].status is RequestStatus.WAITING
    if when == "before_execute":
        assert s.abort(victim)
    result = runner.execute(out)
    if when == "before_update":
        assert s.abort(victim)
    s.update(out, result)
    if when == "after_update":
        assert s.abort(victim)
    s.check_invariants()
    runner.check_agrees()
    assert not s.abort(victim)
    nxt = s.schedule()
    assert victim not in nxt.finished_ids  # the runner dropped it with preempted_ids already
    s.update(nxt, runner.execute(nxt))
    drain_strict(s, runner)
    assert_all_free(s)
    finished = finished_by_id(s)
    assert finished[victim].finish_reason is FinishReason.ABORT
    for rid, request in finished.items():
        if rid != victim:
            assert (request.output_token_ids, request.finish_reason) == expected_outcome(
                request, s.max_len
            )


def test_abort_twice_unknown_and_finished_requests_change_nothing():
    s = make_scheduler()
    runner = StrictRunner(s)
    s.add_request(make_request("a", [1, 2, 3], [(1, 2, "x")], max_tokens=2))
    drain_strict(s, runner)
    (a,) = s.take_finished()
    free, cached = s.blocks.num_free_blocks, dict(s.blocks.cached)
    assert not s.abort("a") and not s.abort("a") and not s.abort("never")
    assert a.finish_reason is FinishReason.MAX_TOKENS and not s.take_finished()
    assert s.blocks.num_free_blocks == free and s.blocks.cached == cached
    assert s.schedule().finished_ids == ["a"]  # from its own finish, reported once
    assert s.schedule().finished_ids == []
    s.check_invariants()


def test_reused_id_after_a_mid_step_abort_is_a_new_request_to_the_runner():
    s = make_scheduler(block_size=2)
    runner = StrictRunner(s)
    s.add_request(make_request("a", [1, 2, 3, 4, 5], [], max_tokens=3))
    out = s.schedule()
    assert s.abort("a")
    s.add_request(make_request("a", [1, 2, 3, 4, 5, 6], [], max_tokens=3))
    s.update(out, runner.execute(out))  # the old a's chunk must not touch the new a
    assert s.requests["a"].num_computed_tokens == 0 and not s.requests["a"].block_ids
    s.check_invariants()
    nxt = s.schedule()
    assert nxt.finished_ids == ["a"] and [n.request_id for n in nxt.new_requests] == ["a"]
    s.update(nxt, runner.execute(nxt))
    drain_strict(s, runner)
    assert_all_free(s)
    old, new = s.take_finished()
    assert old.finish_reason is FinishReason.ABORT
    assert (new.output_token_ids, new.finish_reason) == expected_outcome(new, s.max_len)


@pytest.mark.parametrize("state", ["waiting", "running"])
def test_duplicate_live_id_is_rejected_without_side_effects(state):
    s = make_scheduler(seqs=1)
    s.add_request(make_request("other", [9, 9], [], max_tokens=3))
    s.add_request(make_request("a", [1, 2, 3], [], max_tokens=3))
    if state == "running":
        s.abort("other")
        s.schedule()
    before = (list(s.waiting), list(s.running), s.blocks.num_free_blocks, list(s.free_slots))
    with pytest.raises(ValueError, match="duplicate"):
        s.add_request(make_request("a", [7, 7, 7, 7], [], max_tokens=1))
    assert (list(s.waiting), list(s.running), s.blocks.num_free_blocks, list(s.free_slots)) == (
        before
    )
    assert s.requests["a"].prompt_token_ids == [1, 2, 3]


# == prefix caching =============================================================================
def shared_blocks(a: Request, b: Request) -> set[int]:
    return set(a.block_ids) & set(b.block_ids)


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_same_tokens_different_images_share_only_blocks_before_the_image(block_size):
    s = make_scheduler(block_size=block_size, blocks=256)
    runner = StrictRunner(s)
    text = list(range(10, 22))
    s.add_request(make_request("cat", text, [(5, 8, "cat")], max_tokens=5))
    run_step(s, runner)
    s.add_request(make_request("dog", text, [(5, 8, "dog")], max_tokens=5))
    run_step(s, runner)
    cat, dog = s.requests["cat"], s.requests["dog"]
    assert dog.num_cached_tokens == 5 // block_size * block_size
    assert len(shared_blocks(cat, dog)) == 5 // block_size
    drain_strict(s, runner)
    assert_all_free(s)


def test_same_image_at_a_different_offset_is_not_a_hit():
    # identical token streams: the placeholder token equals the text token around it
    s = make_scheduler(block_size=4)
    runner = StrictRunner(s)
    ph = 7
    s.add_request(make_request("a", [ph, ph, ph, ph, 30], [(1, 4, "img")], max_tokens=1))
    drain_strict(s, runner)
    b = make_request("b", [ph, ph, ph, ph, 30], [(0, 4, "img")], max_tokens=1)
    assert b.prompt_token_ids == s.take_finished()[0].prompt_token_ids
    s.add_request(b)
    drain_strict(s, runner)
    assert b.num_cached_tokens == 0
    assert_all_free(s)


@pytest.mark.parametrize("longer_first", [True, False])
@pytest.mark.parametrize("block_size", [1, 4])
def test_prompts_that_are_exact_prefixes_of_each_other(longer_first, block_size):
    s = make_scheduler(block_size=block_size)
    runner = StrictRunner(s)
    short = list(range(10, 18))  # 8 tokens
    long = short + list(range(40, 48))
    first, second = (long, short) if longer_first else (short, long)
    s.add_request(make_request("first", first, [], max_tokens=1, ignore_eos=True))
    drain_strict(s, runner)
    s.add_request(make_request("second", second, [], max_tokens=2))
    outs = drain_strict(s, runner)
    second_req = s.take_finished()[-1]
    # the common prefix is 8 tokens; at least one prompt token is always computed
    expected = min(8, (len(second) - 1) // block_size * block_size)
    assert second_req.num_cached_tokens == expected
    assert outs[0].chunks[0].start == expected and outs[0].chunks[0].sample == (
        outs[0].chunks[0].end == len(second)
    )
    assert (second_req.output_token_ids, second_req.finish_reason) == expected_outcome(
        second_req, s.max_len
    )


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_fully_cached_prompt_still_computes_and_samples(block_size):
    s = make_scheduler(block_size=block_size)
    runner = StrictRunner(s)
    prompt = list(range(10, 18))  # a multiple of every block size
    for rid in ("a", "b"):
        s.add_request(make_request(rid, prompt, [], max_tokens=3))
        outs = drain_strict(s, runner)
        first = outs[0].chunks[0]
        assert first.end == 8 and first.sample and first.start < 8
    a, b = s.take_finished()
    assert b.num_cached_tokens == (8 - 1) // block_size * block_size
    assert len(b.output_token_ids) == 3


def test_fully_cached_prompt_ending_in_an_image_recomputes_the_image_from_the_encoder_cache():
    s = make_scheduler(block_size=1, encoder=16)
    runner = StrictRunner(s)
    for rid in ("a", "b"):
        s.add_request(make_request(rid, [10, 11, 12], [(3, 5, "img")], max_tokens=1))
        outs = drain_strict(s, runner)
    assert [(c.start, c.end) for c in outs[0].chunks] == [(3, 8)]  # back to the span start
    assert not outs[0].encode  # features still cached
    assert s.take_finished()[-1].encoder_cache_hits == 1


def test_generated_tokens_are_prefix_cached_and_reused():
    s = make_scheduler(block_size=2)
    runner = StrictRunner(s)
    s.add_request(make_request("a", [1, 2, 3, 4], [], max_tokens=6, ignore_eos=True))
    drain_strict(s, runner)
    (a,) = s.take_finished()
    s.add_request(make_request("b", a.prompt_token_ids + a.output_token_ids[:5], [], max_tokens=1))
    drain_strict(s, runner)  # the strict runner checks the reused KV digest by digest
    assert s.take_finished()[0].num_cached_tokens == 8


# == preemption ==================================================================================
def test_preempted_requests_resume_oldest_first_with_unchanged_outputs():
    s = preempting_scheduler()
    runner = StrictRunner(s)
    outs = drain_strict(s, runner)
    preempted = [rid for o in outs for rid in o.preempted_ids]
    assert preempted and preempted[0] == "r2"
    for request in s.take_finished():
        assert request.num_preemptions == preempted.count(request.request_id)
        assert (request.output_token_ids, request.finish_reason) == expected_outcome(
            request, s.max_len
        )
    assert_all_free(s)


def test_multiple_victims_in_one_step_requeue_in_admission_order():
    s = make_scheduler(blocks=12, block_size=1, max_len=12, seqs=4, budget=4)
    for i in range(4):
        prompt = [20 + i] * (1 if i else 2)
        s.add_request(make_request(f"r{i}", prompt, [], max_tokens=20, ignore_eos=True))
    runner = StrictRunner(s)
    out = force_preemption(s, runner)
    assert out.preempted_ids == ["r3", "r2"]  # newest first, two in one step
    assert [r.request_id for r in s.waiting][: len(out.preempted_ids)] == (out.preempted_ids[::-1])
    s.update(out, runner.execute(out))
    drain_strict(s, runner)
    assert_all_free(s)
    for request in s.take_finished():
        assert (request.output_token_ids, request.finish_reason) == expected_outcome(
            request, s.max_len
        )


# == length limits ===============================================================================
@pytest.mark.parametrize("block_size", [1, 4])
def test_generated_tokens_stop_exactly_at_max_model_len(block_size):
    s = make_scheduler(max_len=12, block_size=block_size, blocks=64)
    runner = StrictRunner(s)
    s.add_request(make_request("edge", list(range(10, 21)), [], max_tokens=50))  # 11 of 12
    s.add_request(make_request("grow", [1, 2, 3], [(1, 4, "x")], max_tokens=50, ignore_eos=True))
    s.add_request(make_request("full", list(range(10, 22)), [], max_tokens=1))  # 12 of 12
    drain_strict(s, runner)
    finished = finished_by_id(s)
    assert finished["full"].finish_reason is FinishReason.ERROR
    assert finished["edge"].output_token_ids == [token_of("edge", 11)]
    assert finished["edge"].finish_reason in (FinishReason.LENGTH, FinishReason.EOS)
    assert finished["grow"].finish_reason is FinishReason.LENGTH
    assert finished["grow"].num_tokens == 12
    assert_all_free(s)


@pytest.mark.parametrize("prefix", [True, False])
def test_kv_pool_exactly_max_model_len_runs_everyone_to_the_end(prefix):
    s = make_scheduler(max_len=16, blocks=16, block_size=1, seqs=3, budget=5, prefix=prefix)
    runner = StrictRunner(s)
    for i in range(4):
        prompt = [10 + i] * (6 + 2 * i)  # 9 to 15 tokens with the image
        s.add_request(make_request(f"r{i}", prompt, [(2, 3, "img")], max_tokens=30, eos=None))
    drain_strict(s, runner, limit=600)
    for request in s.take_finished():
        assert request.finish_reason is FinishReason.LENGTH and request.num_tokens == 16
        assert request.output_token_ids == expected_outcome(request, 16)[0]
    assert_all_free(s)


# == encoder cache and tiny budgets ==============================================================
def test_item_exactly_the_cache_size_waits_for_a_referenced_item_then_runs():
    s = make_scheduler(encoder=8, budget=64)
    runner = StrictRunner(s)
    s.add_request(make_request("a", [1, 2], [(1, 8, "big_a")], max_tokens=2))
    s.add_request(make_request("b", [3, 4], [(1, 8, "big_b")], max_tokens=2))
    first = run_step(s, runner)
    assert [e.mm_hash for e in first.encode] == ["big_a"] and all(e.cache for e in first.encode)
    second = run_step(s, runner)
    assert [e.mm_hash for e in second.encode] == ["big_b"] and second.free_mm_hashes == ["big_a"]
    drain_strict(s, runner)
    assert_all_free(s)


def test_many_identical_images_are_encoded_once():
    s = make_scheduler(encoder=6, budget=64, seqs=4)
    runner = StrictRunner(s)
    for i in range(10):
        spans = [(1, 6, "same"), (8, 6, "same")]
        s.add_request(make_request(f"r{i}", [i + 10, 1, 2, 3], spans, max_tokens=2))
    outs = drain_strict(s, runner)
    assert [e.mm_hash for o in outs for e in o.encode] == ["same"]
    assert_all_free(s)


@pytest.mark.parametrize("encoder", [0, 5])
def test_identical_images_larger_than_the_cache_are_encoded_per_request_never_fail(encoder):
    s = make_scheduler(encoder=encoder, budget=3, seqs=2, encoder_budget=1)
    runner = StrictRunner(s)
    for i in range(4):
        s.add_request(make_request(f"r{i}", [i + 10, 1], [(1, 6, "huge")], max_tokens=2))
    outs = drain_strict(s, runner)
    encodes = [e for o in outs for e in o.encode]
    assert encodes and not any(e.cache for e in encodes) and "huge" not in s.encoder
    assert all(len(o.encode) <= 1 for o in outs)  # encoder budget 1: one item per step
    for request in s.take_finished():
        assert request.finish_reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
    assert_all_free(s)


@pytest.mark.parametrize("seqs", [1, 3])
def test_one_token_budget_and_block_size_one_make_progress(seqs):
    s = make_scheduler(budget=1, seqs=seqs, block_size=1, blocks=40, max_len=40, encoder=4)
    runner = StrictRunner(s)
    for i in range(3):
        spans = [(1, 3, "a"), (4, 4, f"b{i}"), (9, 6, "c")]
        s.add_request(make_request(f"r{i}", [i + 10, 1, 2, 3], spans, max_tokens=3))
    outs = drain_strict(s, runner, limit=400)
    assert all(len(o.chunks) == 1 for o in outs)  # a 1-token budget runs one chunk a step
    assert {c.num_tokens for o in outs for c in o.chunks} <= {1, 3, 4, 6}
    assert s.stats.budget_overruns == sum(1 for o in outs for c in o.chunks if c.num_tokens > 1)
    for request in s.take_finished():
        assert (request.output_token_ids, request.finish_reason) == expected_outcome(
            request, s.max_len
        )
    assert_all_free(s)


def test_encoder_budget_is_kept_except_for_the_first_item_of_a_step():
    s = make_scheduler(budget=200, encoder=200, encoder_budget=5)
    runner = StrictRunner(s)
    for i in range(6):
        spans = [(1, 3, f"s{i}"), (5, 9, f"l{i}"), (15, 2, f"t{i}")]
        s.add_request(make_request(f"r{i}", [i + 10, 1, 2, 3], spans, max_tokens=1))
    outs = drain_strict(s, runner)
    for out in outs:
        sizes = [e.num_tokens for e in out.encode]
        assert len(sizes) <= 1 or sum(sizes) <= 5, sizes
    assert any(e.num_tokens == 9 for o in outs for e in o.encode)  # the big ones got through
    assert_all_free(s)


def test_cached_free_blocks_are_evicted_least_recently_used_first():
    s = make_scheduler(blocks=8, block_size=4)
    runner = StrictRunner(s)
    a, b = list(range(10, 15)), list(range(20, 25))  # one full block each
    for rid, prompt in (("a", a), ("b", b), ("a_again", a)):  # a's block is now the newest
        s.add_request(make_request(rid, prompt, [], max_tokens=1))
        drain_strict(s, runner)
    s.add_request(make_request("big", list(range(30, 58)), [], max_tokens=1))  # 7 of 8 blocks
    drain_strict(s, runner)
    for rid, prompt in (("a_last", a), ("b_last", b)):
        s.add_request(make_request(rid, prompt, [], max_tokens=1))
        drain_strict(s, runner)
    hits = {r.request_id: r.num_cached_tokens for r in s.take_finished()}
    assert hits["a_again"] == 4 and hits["a_last"] == 4  # a survived "big"
    assert hits["b_last"] == 0  # b was the least recently used cached block


def test_uncacheable_item_shared_by_two_requests_is_encoded_once_per_step():
    # encoder budget larger than the cache: both chunks fit one step; the second request reuses
    # the first one's cache=False features (the runner must make them visible to both chunks)
    s = make_scheduler(budget=64, encoder=4, encoder_budget=64)
    runner = StrictRunner(s)
    s.add_request(make_request("a", [10, 11], [(1, 6, "huge")], max_tokens=1))
    s.add_request(make_request("b", [12, 13], [(1, 6, "huge")], max_tokens=1))
    out = run_step(s, runner)
    assert {c.request_id for c in out.chunks} == {"a", "b"}
    assert [(e.request_id, e.cache) for e in out.encode] == [("a", False)]
    drain_strict(s, runner)
    assert_all_free(s)


def test_tokens_for_unsampled_chunks_or_unknown_ids_are_ignored():
    s = make_scheduler(budget=4)
    s.add_request(make_request("a", list(range(10, 20)), [], max_tokens=2))
    out = s.schedule()
    assert [c.sample for c in out.chunks] == [False]
    s.update(out, RunnerOutput({"a": 5, "ghost": 6}))
    s.check_invariants()
    assert s.requests["a"].output_token_ids == [] and s.requests["a"].num_computed_tokens == 4
