"""The batched sampler: each rule, and per-request seeds independent of the batch."""

from __future__ import annotations

import numpy as np

from runner.sampler import SamplingState, sample
from scheduler.contracts import SamplingParams


def state(seed=0, prompt=(), outputs=(), **params):
    return SamplingState(
        SamplingParams(max_tokens=16, seed=seed, **params),
        np.random.default_rng(seed),
        np.asarray(prompt, dtype=np.int64),
        list(outputs),
    )


def logits(rows, vocab=32, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, vocab)).astype(np.float32) * 3


def test_greedy_takes_the_argmax():
    x = logits(3)
    tokens, _ = sample(x, [state(temperature=0.0) for _ in range(3)], [None] * 3)
    np.testing.assert_array_equal(tokens, x.argmax(-1))


def test_seeded_rows_do_not_depend_on_the_batch():
    x = logits(4)
    alone = [sample(x[i : i + 1], [state(seed=7 + i)], [None])[0][0] for i in range(4)]
    together, _ = sample(x, [state(seed=7 + i) for i in range(4)], [None] * 4)
    np.testing.assert_array_equal(together, alone)
    shuffled, _ = sample(x[::-1], [state(seed=7 + i) for i in reversed(range(4))], [None] * 4)
    np.testing.assert_array_equal(shuffled[::-1], alone)


def test_sampling_follows_the_distribution():
    x = np.log(np.array([[0.7, 0.2, 0.1, 1e-9]], dtype=np.float32))
    s = state(seed=1)
    draws = [sample(x, [s], [None])[0][0] for _ in range(4000)]
    freq = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(freq[:3], [0.7, 0.2, 0.1], atol=0.03)


def test_top_k_top_p_min_p_restrict_the_support():
    x = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float32))
    for params, allowed in (
        ({"top_k": 2}, {0, 1}),
        ({"top_p": 0.8}, {0, 1}),
        ({"top_p": 0.81}, {0, 1, 2}),
        ({"min_p": 0.5}, {0, 1}),
    ):
        s = state(seed=3, **params)
        seen = {int(sample(x, [s], [None])[0][0]) for _ in range(400)}
        assert seen == allowed, params


def test_penalties():
    x = np.zeros((1, 8), dtype=np.float32)
    x[0, 3] = 2.0
    x[0, 5] = 1.9
    s = state(temperature=0.0, prompt=[3], repetition_penalty=2.0)
    assert sample(x, [s], [None])[0][0] == 5  # 2.0 / 2 < 1.9
    s = state(temperature=0.0, outputs=[5, 5], frequency_penalty=0.1)
    assert sample(x, [s], [None])[0][0] == 3
    s = state(temperature=0.0, outputs=[3], presence_penalty=0.5)
    assert sample(x, [s], [None])[0][0] == 5


def test_min_tokens_masks_eos_and_stop_tokens():
    x = np.zeros((1, 8), dtype=np.float32)
    x[0, 2] = 5.0  # eos
    x[0, 4] = 4.0  # stop token
    s = state(temperature=0.0, min_tokens=2, stop_token_ids=(4,))
    assert sample(x, [s], [2])[0][0] not in (2, 4)
    s = state(temperature=0.0, min_tokens=2, outputs=[1, 1])
    assert sample(x, [s], [2])[0][0] == 2


def test_logprobs_with_alternatives():
    x = np.log(np.array([[0.6, 0.3, 0.1]], dtype=np.float32))
    _, logprobs = sample(x, [state(temperature=0.0, logprobs=2)], [None])
    assert np.isclose(logprobs[0].logprob, np.log(0.6), atol=1e-5)
    assert [t for t, _ in logprobs[0].top] == [0, 1]
