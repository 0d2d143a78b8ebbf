"""Token sampling for a batch, vectorized over requests.

Every request keeps its own random generator (seeded from ``SamplingParams.seed`` or from the
engine), and each sampled row draws exactly one uniform number from it, so a seeded request gets
the same tokens whatever else is in the batch. Greedy rows take the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.contracts import SamplingParams, TokenLogprobs


@dataclass
class SamplingState:
    """Per-request sampling state kept by the runner."""

    params: SamplingParams
    generator: np.random.Generator
    prompt_token_ids: np.ndarray  # for repetition penalty
    output_token_ids: list[int]


def _apply_penalties(logits: np.ndarray, states: list[SamplingState]) -> None:
    for row, state in enumerate(states):
        p = state.params
        if p.repetition_penalty != 1.0:
            seen = np.unique(np.concatenate([state.prompt_token_ids, state.output_token_ids]))
            seen = seen.astype(np.int64)
            values = logits[row, seen]
            logits[row, seen] = np.where(
                values > 0, values / p.repetition_penalty, values * p.repetition_penalty
            )
        if (p.presence_penalty or p.frequency_penalty) and state.output_token_ids:
            tokens, counts = np.unique(state.output_token_ids, return_counts=True)
            logits[row, tokens] -= p.frequency_penalty * counts + p.presence_penalty


def _mask_stop_tokens(logits: np.ndarray, states: list[SamplingState], eos: list[int | None]):
    for row, state in enumerate(states):
        p = state.params
        if len(state.output_token_ids) < p.min_tokens:
            banned = list(p.stop_token_ids) + ([eos[row]] if eos[row] is not None else [])
            if banned:
                logits[row, banned] = -np.inf


def sample(
    logits: np.ndarray, states: list[SamplingState], eos_token_ids: list[int | None]
) -> tuple[np.ndarray, list[TokenLogprobs | None]]:
    """Sample one token per row of ``logits [B, V]`` (float32). Returns ``(tokens [B],
    logprobs per row or None)``."""
    logits = logits.astype(np.float32, copy=True)
    _apply_penalties(logits, states)
    _mask_stop_tokens(logits, states, eos_token_ids)
    batch, vocab = logits.shape
    log_probs = logits - _logsumexp(logits)
    tokens = np.empty(batch, dtype=np.int64)
    greedy = np.array([s.params.temperature == 0.0 for s in states])
    tokens[greedy] = logits[greedy].argmax(axis=-1)
    rows = np.nonzero(~greedy)[0]
    if len(rows):
        temps = np.array([states[r].params.temperature for r in rows], dtype=np.float32)
        scaled = logits[rows] / temps[:, None]
        scaled = _filter(scaled, [states[r].params for r in rows])
        probs = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        draws = np.array([states[r].generator.random() for r in rows])
        cumulative = np.cumsum(probs, axis=-1)
        picked = (cumulative < draws[:, None] * cumulative[:, -1:]).sum(axis=-1)
        tokens[rows] = np.minimum(picked, vocab - 1)
    logprobs: list[TokenLogprobs | None] = []
    for row, state in enumerate(states):
        k = state.params.logprobs
        if k is None:
            logprobs.append(None)
            continue
        top = np.argsort(-log_probs[row])[:k] if k > 0 else np.zeros(0, dtype=np.int64)
        logprobs.append(
            TokenLogprobs(
                float(log_probs[row, tokens[row]]),
                tuple((int(t), float(log_probs[row, t])) for t in top),
            )
        )
    return tokens, logprobs


def _logsumexp(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


def _filter(scaled: np.ndarray, params: list[SamplingParams]) -> np.ndarray:
    """Apply top-k, top-p and min-p (each row its own settings) by setting logits to -inf."""
    out = scaled.copy()
    order = np.argsort(-scaled, axis=-1)
    sorted_logits = np.take_along_axis(scaled, order, axis=-1)
    probs = np.exp(sorted_logits - sorted_logits[:, :1])
    probs /= probs.sum(axis=-1, keepdims=True)
    cumulative = np.cumsum(probs, axis=-1)
    vocab = scaled.shape[-1]
    for row, p in enumerate(params):
        keep = np.ones(vocab, dtype=bool)
        if p.top_k and p.top_k > 0:
            keep[p.top_k :] = False
        if p.top_p < 1.0:
            # keep the smallest prefix whose mass reaches top_p (always the first token)
            keep &= np.concatenate([[True], cumulative[row, :-1] < p.top_p])
        if p.min_p > 0.0:
            keep &= probs[row] >= p.min_p * probs[row, 0]
        out[row, order[row, ~keep]] = -np.inf
    return out
