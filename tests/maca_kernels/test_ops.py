"""The reference ops against numpy formulas, and the platform layer."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from maca_kernels import detect_platform, ops
from maca_kernels.ops import paddle

rng = np.random.default_rng(0)


def t(array):
    return paddle.to_tensor(np.asarray(array, dtype=np.float32))


def test_rms_norm():
    x, w = rng.standard_normal((5, 8)), rng.standard_normal(8)
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(ops.rms_norm(t(x), t(w), 1e-6).numpy(), expected, rtol=1e-5)


def test_layer_norm():
    x, w, b = rng.standard_normal((5, 8)), rng.standard_normal(8), rng.standard_normal(8)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    expected = (x - mu) / np.sqrt(var + 1e-5) * w + b
    np.testing.assert_allclose(
        ops.layer_norm(t(x), t(w), t(b), 1e-5).numpy(), expected, rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    ("name", "formula"),
    [
        ("gelu", lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
        (
            "gelu_tanh",
            lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        ),
        ("quick_gelu", lambda x: x / (1 + np.exp(-1.702 * x))),
        ("silu", lambda x: x / (1 + np.exp(-x))),
    ],
)
def test_activations(name, formula):
    x = rng.standard_normal((4, 6))
    np.testing.assert_allclose(ops.activation(name, t(x)).numpy(), formula(x), rtol=1e-5, atol=1e-6)


def test_rope_half_and_interleaved_rotate_the_right_pairs():
    tokens, heads, dim = 3, 2, 8
    x = rng.standard_normal((tokens, heads, dim))
    angle = rng.standard_normal((tokens, dim // 2))
    cos, sin = np.cos(angle), np.sin(angle)
    half = ops.rope_half(t(x), t(np.concatenate([cos, cos], -1)), t(np.concatenate([sin, sin], -1)))
    a, b = x[..., : dim // 2], x[..., dim // 2 :]
    c, s = cos[:, None], sin[:, None]
    np.testing.assert_allclose(
        half.numpy(), np.concatenate([a * c - b * s, a * s + b * c], -1), rtol=1e-5, atol=1e-6
    )
    inter = ops.rope_interleaved(t(x), t(cos), t(sin)).numpy()
    even, odd = x[..., 0::2], x[..., 1::2]
    np.testing.assert_allclose(inter[..., 0::2], even * c - odd * s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inter[..., 1::2], even * s + odd * c, rtol=1e-5, atol=1e-6)


def numpy_attention(q, k, v, causal):
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[0]
        scores = scores + np.triu(np.full((n, n), -np.inf), 1)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", probs, v)


@pytest.mark.parametrize("causal", [True, False])
def test_varlen_attention_with_gqa(causal):
    q = rng.standard_normal((9, 4, 8))
    k, v = rng.standard_normal((9, 2, 8)), rng.standard_normal((9, 2, 8))
    got = ops.varlen_attention(t(q), t(k), t(v), [0, 4, 9], causal).numpy()
    for lo, hi in ((0, 4), (4, 9)):
        expected = numpy_attention(q[lo:hi], k[lo:hi], v[lo:hi], causal)
        np.testing.assert_allclose(got[lo:hi], expected, rtol=1e-4, atol=1e-5)


def test_platform_dispatch_prefers_registered_kernels():
    calls = []

    def fast_silu(x):
        calls.append(1)
        return ops.silu_ref(x)

    ops.register("cpu", "silu", fast_silu)
    try:
        chosen = ops.use_platform(detect_platform())
        assert chosen["silu"].endswith("fast_silu")
        ops.activation("silu", t([1.0]))
        assert calls == [1]
    finally:
        ops._PLATFORM_KERNELS.clear()
        ops.use_platform(detect_platform())
    with pytest.raises(KeyError):
        ops.register("cpu", "no_such_op", fast_silu)


def test_cpu_platform_and_environment_set_before_paddle():
    assert detect_platform().kind == "cpu"
    with pytest.raises(RuntimeError, match="not available"):
        detect_platform("metax")
    code = (
        "import os; os.environ.pop('MKL_DEBUG_CPU_TYPE', None); import maca_kernels.ops, sys; "
        "print(os.environ['MKL_DEBUG_CPU_TYPE'], os.environ['OMP_NUM_THREADS'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    mkl, threads = done.stdout.split()[-2:]
    assert mkl == "5" and int(threads) >= 1


def test_chunk_attention_sees_the_cache_and_its_causal_prefix():
    past, n = 5, 3
    q = rng.standard_normal((n, 4, 8))
    k, v = rng.standard_normal((past + n, 2, 8)), rng.standard_normal((past + n, 2, 8))
    got = ops.chunk_attention(t(q), t(k), t(v), past).numpy()
    # equal to the last n rows of full causal attention over past + n tokens
    q_full = np.concatenate([rng.standard_normal((past, 4, 8)), q])
    expected = numpy_attention(q_full, k, v, causal=True)[past:]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_paged_attention_batches_mixed_chunks():
    from runner.kv_cache import ChunkLayout

    slots_total = 64
    key_cache = t(rng.standard_normal((slots_total, 2, 8)))
    value_cache = t(rng.standard_normal((slots_total, 2, 8)))
    perm = rng.permutation(slots_total)
    # a prefill chunk after a cached prefix, a fresh prefill, and two decodes
    specs = [(5, 4), (0, 6), (9, 1), (0, 1)]  # (past, new tokens)
    chunks, row, used = [], 0, 0
    for past, new in specs:
        slots = perm[used : used + past + new]
        used += past + new
        chunks.append(ChunkLayout(row, row + new, past, paddle.to_tensor(slots)))
        row += new
    q = rng.standard_normal((row, 4, 8))
    got = ops.paged_attention(t(q), key_cache, value_cache, chunks).numpy()
    k_all, v_all = key_cache.numpy(), value_cache.numpy()
    for chunk in chunks:
        slots = chunk.context_slots.numpy()
        q_full = np.concatenate([np.zeros((chunk.past, 4, 8)), q[chunk.row_start : chunk.row_end]])
        expected = numpy_attention(q_full, k_all[slots], v_all[slots], causal=True)[chunk.past :]
        np.testing.assert_allclose(
            got[chunk.row_start : chunk.row_end], expected, rtol=1e-4, atol=1e-5
        )
