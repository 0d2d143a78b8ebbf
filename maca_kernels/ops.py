"""Hot operations behind one interface, with Paddle reference implementations.

Models call these functions, never Paddle's fused kernels directly. Each op has a reference
implementation in plain Paddle that runs on any device; a platform may register faster versions
with :func:`register` (selected by :func:`use_platform`), tested against the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from maca_kernels.platform import Platform, import_paddle

paddle = import_paddle()
F = paddle.nn.functional
Tensor = Any  # paddle.Tensor

# -- reference implementations ---------------------------------------------------------------


def rms_norm_ref(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight``, computed in float32."""
    dtype = x.dtype
    x32 = x.astype("float32")
    variance = x32.pow(2).mean(axis=-1, keepdim=True)
    return (x32 * paddle.rsqrt(variance + eps)).astype(dtype) * weight


def layer_norm_ref(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], weight=weight, bias=bias, epsilon=eps)


def gelu_ref(x: Tensor) -> Tensor:
    return F.gelu(x, approximate=False)


def gelu_tanh_ref(x: Tensor) -> Tensor:
    return F.gelu(x, approximate=True)


def quick_gelu_ref(x: Tensor) -> Tensor:
    return x * F.sigmoid(1.702 * x)


def silu_ref(x: Tensor) -> Tensor:
    return F.silu(x)


def swiglu_ref(gate: Tensor, up: Tensor) -> Tensor:
    return F.silu(gate) * up


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return paddle.concat([-x[..., half:], x[..., :half]], axis=-1)


def rope_half_ref(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding with the half-split pairing ``(x[i], x[i + d/2])``.

    ``x`` is ``[tokens, heads, head_dim]``; ``cos``/``sin`` are ``[tokens, head_dim]`` (each
    frequency repeated in both halves).
    """
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (x.astype("float32") * cos + rotate_half(x.astype("float32")) * sin).astype(x.dtype)


def rope_interleaved_ref(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding with the interleaved pairing ``(x[2i], x[2i + 1])``.

    ``cos``/``sin`` are ``[tokens, head_dim / 2]`` (one value per pair).
    """
    tokens, heads, dim = x.shape
    pairs = x.astype("float32").reshape([tokens, heads, dim // 2, 2])
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rotated = paddle.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
    return rotated.reshape([tokens, heads, dim]).astype(x.dtype)


def varlen_attention_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens: list[int],
    causal: bool,
    scale: float | None = None,
) -> Tensor:
    """Attention within each sequence of a packed batch.

    ``q`` is ``[tokens, heads, dim]``, ``k``/``v`` are ``[tokens, kv_heads, dim]`` (grouped-query
    attention repeats kv heads); ``cu_seqlens`` are the sequence boundaries ``[0, ..., tokens]``.
    Softmax runs in float32.
    """
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(dim)
    if kv_heads != heads:
        k = paddle.repeat_interleave(k, heads // kv_heads, axis=1)
        v = paddle.repeat_interleave(v, heads // kv_heads, axis=1)
    outputs = []
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True):
        qs = q[start:end].transpose([1, 0, 2]).astype("float32")
        ks = k[start:end].transpose([1, 0, 2]).astype("float32")
        vs = v[start:end].transpose([1, 0, 2]).astype("float32")
        scores = paddle.matmul(qs, ks, transpose_y=True) * scale
        if causal:
            n = end - start
            mask = paddle.triu(paddle.full([n, n], float("-inf"), dtype="float32"), diagonal=1)
            scores = scores + mask
        probs = F.softmax(scores, axis=-1)
        outputs.append(paddle.matmul(probs, vs).transpose([1, 0, 2]).astype(q.dtype))
    return paddle.concat(outputs, axis=0)


def chunk_attention_ref(q: Tensor, k: Tensor, v: Tensor, past: int, scale: float | None = None):
    """Causal attention of a chunk of ``n`` new queries over ``past + n`` keys (one sequence):
    query ``i`` sees keys ``[0, past + i]``."""
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(dim)
    if kv_heads != heads:
        k = paddle.repeat_interleave(k, heads // kv_heads, axis=1)
        v = paddle.repeat_interleave(v, heads // kv_heads, axis=1)
    n, total = q.shape[0], k.shape[0]
    qs = q.transpose([1, 0, 2]).astype("float32")
    scores = paddle.matmul(qs, k.transpose([1, 0, 2]).astype("float32"), transpose_y=True) * scale
    mask = paddle.triu(paddle.full([n, total], float("-inf"), dtype="float32"), diagonal=past + 1)
    probs = F.softmax(scores + mask, axis=-1)
    out = paddle.matmul(probs, v.transpose([1, 0, 2]).astype("float32"))
    return out.transpose([1, 0, 2]).astype(q.dtype)


def paged_attention_ref(q: Tensor, key_cache: Tensor, value_cache: Tensor, chunks: list) -> Tensor:
    """Mixed-batch attention over a paged cache.

    ``q`` holds the step's query rows; each chunk (``row_start``, ``row_end``, ``past``,
    ``context_slots``) attends to the keys/values at its context slots, causally from ``past``.
    Decodes are single-row chunks.
    """
    outputs = []
    for chunk in chunks:
        keys = paddle.gather(key_cache, chunk.context_slots)
        values = paddle.gather(value_cache, chunk.context_slots)
        outputs.append(
            chunk_attention_ref(q[chunk.row_start : chunk.row_end], keys, values, chunk.past)
        )
    return paddle.concat(outputs)


# -- dispatch ----------------------------------------------------------------------------------

REFERENCE: dict[str, Callable[..., Tensor]] = {
    "rms_norm": rms_norm_ref,
    "layer_norm": layer_norm_ref,
    "gelu": gelu_ref,
    "gelu_tanh": gelu_tanh_ref,
    "quick_gelu": quick_gelu_ref,
    "silu": silu_ref,
    "swiglu": swiglu_ref,
    "rope_half": rope_half_ref,
    "rope_interleaved": rope_interleaved_ref,
    "varlen_attention": varlen_attention_ref,
    "chunk_attention": chunk_attention_ref,
    "paged_attention": paged_attention_ref,
}
_PLATFORM_KERNELS: dict[str, dict[str, Callable[..., Tensor]]] = {}
_active: dict[str, Callable[..., Tensor]] = dict(REFERENCE)


def register(platform_kind: str, name: str, fn: Callable[..., Tensor]) -> None:
    """Offer a faster ``name`` for ``platform_kind``; it must match the reference."""
    if name not in REFERENCE:
        raise KeyError(f"unknown op {name!r}")
    _PLATFORM_KERNELS.setdefault(platform_kind, {})[name] = fn


def use_platform(platform: Platform) -> dict[str, str]:
    """Select the kernels for ``platform``; returns which implementation each op uses."""
    _active.clear()
    _active.update(REFERENCE)
    _active.update(_PLATFORM_KERNELS.get(platform.kind, {}))
    return {name: fn.__module__ + "." + fn.__name__ for name, fn in _active.items()}


def op(name: str) -> Callable[..., Tensor]:
    """The active implementation of ``name``."""
    return _active[name]


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return _active["rms_norm"](x, weight, eps)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    return _active["layer_norm"](x, weight, bias, eps)


def activation(name: str, x: Tensor) -> Tensor:
    """``name`` is one of gelu, gelu_tanh, quick_gelu, silu."""
    return _active[name](x)


def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    return _active["swiglu"](gate, up)


def rope_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return _active["rope_half"](x, cos, sin)


def rope_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return _active["rope_interleaved"](x, cos, sin)


def varlen_attention(q, k, v, cu_seqlens, causal, scale=None) -> Tensor:
    return _active["varlen_attention"](q, k, v, cu_seqlens, causal, scale)


def chunk_attention(q, k, v, past, scale=None) -> Tensor:
    return _active["chunk_attention"](q, k, v, past, scale)


def paged_attention(q, key_cache, value_cache, chunks) -> Tensor:
    return _active["paged_attention"](q, key_cache, value_cache, chunks)
