"""Random workloads and a fake runner that drive the scheduler like an engine would."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from scheduler import Request, RunnerOutput, SamplingParams, Scheduler, SchedulerOutput
from vision.types import MultimodalInputs, MultimodalItem

PLACEHOLDER = 7


def make_request(
    rid: str,
    text: list[int],
    spans: list[tuple[int, int, str]],
    max_tokens: int,
    eos: int | None = None,
    **sampling,
) -> Request:
    """A prompt of ``text`` tokens with media spans ``(offset, length, mm_hash)`` inserted as
    placeholder runs at those offsets (offsets index the final prompt)."""
    ids = list(text)
    items = []
    for offset, length, mm_hash in sorted(spans):
        ids[offset:offset] = [PLACEHOLDER] * length
        items.append(MultimodalItem("image", mm_hash, (1, 2, 2 * length), offset, length))
    mm = MultimodalInputs(items=items) if items else None
    params = SamplingParams(max_tokens=max_tokens, **sampling)
    return Request(rid, ids, sampling=params, eos_token_id=eos, mm_inputs=mm)


@dataclass
class FakeRunner:
    """Returns random tokens; checks the plan against what a real runner needs."""

    rng: random.Random
    vocab: int = 50
    known: dict[str, int] = field(default_factory=dict)  # request id -> slot
    features: set[str] = field(default_factory=set)
    token_fn: object = None  # (request_id, position) -> token; None: random tokens

    def execute(self, out: SchedulerOutput) -> RunnerOutput:
        for rid in out.finished_ids + out.preempted_ids:
            self.known.pop(rid, None)
        for new in out.new_requests:
            self.known[new.request_id] = new.slot
        for item in out.encode:
            if item.cache:
                self.features.add(item.mm_hash)
        sampled = {}
        for chunk in out.chunks:
            assert self.known.get(chunk.request_id) == chunk.slot, "unknown request or slot"
            if chunk.sample:
                if self.token_fn is not None:
                    token = self.token_fn(chunk.request_id, chunk.end)
                else:
                    token = self.rng.randrange(self.vocab)
                sampled[chunk.request_id] = token
        for mm_hash in out.free_mm_hashes:
            self.features.discard(mm_hash)
        return RunnerOutput(sampled=sampled)


def step(scheduler: Scheduler, runner: FakeRunner) -> SchedulerOutput:
    out = scheduler.schedule()
    scheduler.update(out, runner.execute(out))
    return out
