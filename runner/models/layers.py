"""Layers shared by every family: norms, MLPs, rotary tables and text attention."""

from __future__ import annotations

from typing import Any, Protocol

from maca_kernels import ops

paddle = ops.paddle
nn = paddle.nn
Tensor = Any


class RMSNorm(nn.Layer):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([dim], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x: Tensor) -> Tensor:
        return ops.rms_norm(x, self.weight, self.eps)


class LayerNorm(nn.Layer):
    def __init__(self, dim: int, eps: float, bias: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([dim], default_initializer=nn.initializer.Constant(1.0))
        self.bias = (
            self.create_parameter(
                [dim], is_bias=True, default_initializer=nn.initializer.Constant(0.0)
            )
            if bias
            else None
        )

    def forward(self, x: Tensor) -> Tensor:
        return ops.layer_norm(x, self.weight, self.bias, self.eps)


class GatedMLP(nn.Layer):
    """``down(act(gate(x)) * up(x))`` (SwiGLU when ``act`` is silu)."""

    def __init__(self, dim: int, hidden: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias_attr=bias)
        self.up_proj = nn.Linear(dim, hidden, bias_attr=bias)
        self.down_proj = nn.Linear(hidden, dim, bias_attr=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(ops.swiglu(self.gate_proj(x), self.up_proj(x)))


class FeedForward(nn.Layer):
    """``fc2(act(fc1(x)))`` with biases (vision encoders)."""

    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.act = act
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(ops.activation(self.act, self.fc1(x)))


ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "quick_gelu": "quick_gelu",
    "silu": "silu",
}


def activation_name(hf_name: str) -> str:
    """Our op name for a Hugging Face ``hidden_act``."""
    try:
        return ACTIVATIONS[hf_name]
    except KeyError:
        raise ValueError(f"unsupported activation {hf_name!r}") from None


def fold_pixel_normalization(
    weight: Tensor, bias: Tensor | None, mean: tuple[float, ...], std: tuple[float, ...]
) -> tuple[Tensor, Tensor]:
    """Fold ``(x / 255 - mean_c) / std_c`` into a patch projection.

    ``weight`` is ``[inputs, dim]`` with inputs ordered channel-major (each channel's pixels
    together, as in every family's patch rows). Returns ``(W', b')`` with
    ``x_uint8 @ W' + b' == ((x / 255 - mean) / std) @ W + b`` (exact in real arithmetic).
    """
    inputs = weight.shape[0]
    per_channel = inputs // len(mean)
    scale = paddle.to_tensor(
        [1.0 / (255.0 * s) for s in std for _ in range(per_channel)], dtype="float32"
    ).unsqueeze(-1)
    shift = paddle.to_tensor(
        [m / s for m, s in zip(mean, std, strict=True) for _ in range(per_channel)],
        dtype="float32",
    ).unsqueeze(-1)
    w = weight.astype("float32")
    folded_b = -(w * shift).sum(axis=0)
    if bias is not None:
        folded_b = folded_b + bias.astype("float32")
    return (w * scale).astype(weight.dtype), folded_b.astype(weight.dtype)


class PixelProjection(nn.Layer):
    """A patch projection kept in the checkpoint's layout (``[D, C, *kernel]``, a conv kernel or
    an ``[out, in]`` matrix) and applied to uint8 patch rows with the pixel normalization folded
    in by :meth:`fold_normalization` after the weights are loaded."""

    def __init__(self, shape: list[int], bias: bool) -> None:
        super().__init__()
        self.weight = self.create_parameter(shape)
        self.bias = self.create_parameter([shape[0]], is_bias=True) if bias else None
        self._folded: tuple[Tensor, Tensor] | None = None

    def fold_normalization(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        weight = self.weight.reshape([self.weight.shape[0], -1]).T
        self._folded = fold_pixel_normalization(weight, self.bias, mean, std)

    def forward(self, patches: Tensor) -> Tensor:
        if self._folded is None:
            raise RuntimeError("call fold_normalization(mean, std) after loading weights")
        weight, bias = self._folded
        return paddle.matmul(patches.astype(weight.dtype), weight) + bias


# -- rotary tables ---------------------------------------------------------------------------


def inverse_frequencies(dim: int, theta: float) -> Tensor:
    """``theta ** (-arange(0, dim, 2) / dim)`` in float32."""
    return 1.0 / (theta ** (paddle.arange(0, dim, 2, dtype="float32") / dim))


def mrope_cos_sin(
    position_ids: Tensor, head_dim: int, theta: float, section: list[int]
) -> tuple[Tensor, Tensor]:
    """Half-split multimodal rope tables ``[N, head_dim]`` for positions ``[3, N]``.

    Frequency slot ``k`` takes its position from axis t, h or w according to ``section``
    (e.g. [16, 24, 24]); both halves of the head repeat the frequencies (Qwen2-VL, PaddleOCR-VL).
    Only the given tokens' rows are computed.
    """
    inv = inverse_frequencies(head_dim, theta)  # [d/2]
    freqs = position_ids.astype("float32").unsqueeze(-1) * inv  # [3, N, d/2]
    chunks, start = [], 0
    for axis, width in enumerate(section):
        chunks.append(freqs[axis, :, start : start + width])
        start += width
    mixed = paddle.concat(chunks, axis=-1)  # [N, d/2]
    emb = paddle.concat([mixed, mixed], axis=-1)
    return paddle.cos(emb), paddle.sin(emb)


def vision_2d_cos_sin(grids: list[tuple[int, int, int]], head_dim: int, theta: float = 10000.0):
    """Half-split 2D rope tables ``[patches, head_dim]`` for raster-ordered patches.

    Each patch's frequencies are ``concat(row * inv, col * inv)`` with ``inv`` of size
    ``head_dim / 4``, repeated in both halves.
    """
    inv = inverse_frequencies(head_dim // 2, theta)
    rows, cols = [], []
    for t, h, w in grids:
        index = paddle.arange(h * w, dtype="float32")
        rows.append(paddle.tile(paddle.floor(index / w), [t]))
        cols.append(paddle.tile(index % w, [t]))
    row, col = paddle.concat(rows), paddle.concat(cols)
    freqs = paddle.concat([row.unsqueeze(-1) * inv, col.unsqueeze(-1) * inv], axis=-1)
    emb = paddle.concat([freqs, freqs], axis=-1)
    return paddle.cos(emb), paddle.sin(emb)


# -- text attention --------------------------------------------------------------------------


class AttentionBackend(Protocol):
    """How a text attention layer reads and writes context (full sequence, or a paged cache)."""

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor: ...


class FullSequenceAttention:
    """Causal attention over whole sequences packed by ``cu_seqlens`` (no cache)."""

    def __init__(self, cu_seqlens: list[int]) -> None:
        self.cu_seqlens = cu_seqlens

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return ops.varlen_attention(q, k, v, self.cu_seqlens, causal=True)


class ContiguousKVCache:
    """One sequence's keys and values per layer in growing tensors: the simplest cached
    backend (parity checks and benchmarks); the engine uses the paged cache instead."""

    def __init__(self) -> None:
        self.keys: dict[int, Tensor] = {}
        self.values: dict[int, Tensor] = {}

    @property
    def length(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        past = self.keys[layer].shape[0] if layer in self.keys else 0
        if past:
            k = paddle.concat([self.keys[layer], k])
            v = paddle.concat([self.values[layer], v])
        self.keys[layer], self.values[layer] = k, v
        if past == 0:
            return ops.varlen_attention(q, k, v, [0, k.shape[0]], causal=True)
        # queries see everything cached plus the causal part of their own chunk
        return ops.chunk_attention(q, k, v, past)


class TextAttention(nn.Layer):
    """Grouped-query self-attention with rotary positions; the backend owns the KV context.

    ``rope_op`` names the rotary op (half-split pairs by default; ERNIE-4.5-VL uses interleaved
    pairs)."""

    rope_op = "rope_half"

    def __init__(
        self, layer: int, hidden: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool
    ) -> None:
        super().__init__()
        self.layer, self.heads, self.kv_heads, self.head_dim = layer, heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias_attr=qkv_bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias_attr=qkv_bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias_attr=qkv_bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias_attr=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, backend: AttentionBackend) -> Tensor:
        n = x.shape[0]
        q = self.q_proj(x).reshape([n, self.heads, self.head_dim])
        k = self.k_proj(x).reshape([n, self.kv_heads, self.head_dim])
        v = self.v_proj(x).reshape([n, self.kv_heads, self.head_dim])
        rope = ops.op(self.rope_op)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        out = backend.attend(self.layer, q, k, v)
        return self.o_proj(out.reshape([n, self.heads * self.head_dim]))


class DecoderLayer(nn.Layer):
    """Pre-norm decoder block: RMSNorm, GQA attention with rope, RMSNorm, SwiGLU MLP."""

    def __init__(
        self,
        index: int,
        hidden: int,
        intermediate: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        eps: float,
        qkv_bias: bool,
    ) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = TextAttention(index, hidden, heads, kv_heads, head_dim, qkv_bias)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, intermediate)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, backend: AttentionBackend) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Layer):
    """Token embeddings, decoder layers and the final norm (``model.*`` in checkpoints)."""

    def __init__(
        self,
        vocab: int,
        hidden: int,
        intermediate: int,
        layers: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        eps: float,
        qkv_bias: bool,
    ) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.LayerList(
            [
                DecoderLayer(i, hidden, intermediate, heads, kv_heads, head_dim, eps, qkv_bias)
                for i in range(layers)
            ]
        )
        self.norm = RMSNorm(hidden, eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, backend: AttentionBackend) -> Tensor:
        for layer in self.layers:
            x = layer(x, cos, sin, backend)
        return self.norm(x)
