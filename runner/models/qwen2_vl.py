"""Qwen2-VL and Qwen2.5-VL: a ViT with Conv3d patches and 2D rotary (Qwen2.5: RMSNorm, SwiGLU
and window attention), a 2x2 patch merger, and a Qwen2 decoder with multimodal rope."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from maca_kernels import ops
from runner.models.base import VisionLanguageModel
from runner.models.layers import (
    AttentionBackend,
    DecoderStack,
    FeedForward,
    LayerNorm,
    PixelProjection,
    RMSNorm,
    inverse_frequencies,
    mrope_cos_sin,
)

paddle = ops.paddle
nn = paddle.nn
Tensor = Any
VISION_EPS = 1e-6


@dataclass(frozen=True)
class QwenVLConfig:
    """The fields of a Qwen2-VL / Qwen2.5-VL ``config.json`` the model uses."""

    qwen25: bool
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float
    rope_theta: float
    mrope_section: tuple[int, int, int]
    tie_word_embeddings: bool
    image_token_id: int
    video_token_id: int
    vision_hidden_size: int
    vision_intermediate_size: int
    vision_depth: int
    vision_heads: int
    vision_act: str
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    window_size: int
    fullatt_block_indexes: tuple[int, ...]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> QwenVLConfig:
        text = {**config, **(config.get("text_config") or {})}
        vision = config["vision_config"]
        rope = text.get("rope_scaling") or text.get("rope_parameters") or {}
        qwen25 = config.get("model_type") == "qwen2_5_vl"
        if qwen25:
            width = vision["hidden_size"]
            inner = vision["intermediate_size"]
            act = vision.get("hidden_act", "silu")
        else:  # Qwen2-VL: embed_dim is the ViT width, hidden_size the LLM's
            width = vision.get("embed_dim", 1280)
            inner = int(width * vision.get("mlp_ratio", 4))
            act = vision.get("hidden_act", "quick_gelu")
        heads = text["num_attention_heads"]
        return cls(
            qwen25=qwen25,
            vocab_size=text["vocab_size"],
            hidden_size=text["hidden_size"],
            intermediate_size=text["intermediate_size"],
            num_hidden_layers=text["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=text.get("num_key_value_heads", heads),
            rms_norm_eps=text.get("rms_norm_eps", 1e-6),
            rope_theta=text.get("rope_theta", rope.get("rope_theta", 1000000.0)),
            mrope_section=tuple(rope.get("mrope_section", (16, 24, 24))),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            image_token_id=config.get("image_token_id", 151655),
            video_token_id=config.get("video_token_id", 151656),
            vision_hidden_size=width,
            vision_intermediate_size=inner,
            vision_depth=vision["depth"],
            vision_heads=vision["num_heads"],
            vision_act=act,
            patch_size=vision.get("patch_size", 14),
            temporal_patch_size=vision.get("temporal_patch_size", 2),
            spatial_merge_size=vision.get("spatial_merge_size", 2),
            window_size=vision.get("window_size", 0) if qwen25 else 0,
            fullatt_block_indexes=tuple(vision.get("fullatt_block_indexes", ())),
        )


# -- vision ------------------------------------------------------------------------------------


class VisionAttention(nn.Layer):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cu_seqlens: list[int]) -> Tensor:
        n = x.shape[0]
        qkv = self.qkv(x).reshape([n, 3, self.heads, self.head_dim])
        q = ops.rope_half(qkv[:, 0], cos, sin)
        k = ops.rope_half(qkv[:, 1], cos, sin)
        out = ops.varlen_attention(q, k, qkv[:, 2], cu_seqlens, causal=False)
        return self.proj(out.reshape([n, -1]))


class VisionGatedMLP(nn.Layer):
    """Qwen2.5-VL's SwiGLU with biases."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden)
        self.up_proj = nn.Linear(dim, hidden)
        self.down_proj = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(ops.swiglu(self.gate_proj(x), self.up_proj(x)))


class VisionBlock(nn.Layer):
    """A pre-norm ViT block: RMSNorm + SwiGLU (``gated``, Qwen2.5-VL) or LayerNorm + quick-GELU
    MLP (Qwen2-VL, ERNIE-4.5-VL's DFNRope ViT)."""

    def __init__(self, dim: int, heads: int, inner: int, gated: bool) -> None:
        super().__init__()
        if gated:
            self.norm1, self.norm2 = RMSNorm(dim, VISION_EPS), RMSNorm(dim, VISION_EPS)
            self.mlp = VisionGatedMLP(dim, inner)
        else:
            self.norm1, self.norm2 = LayerNorm(dim, VISION_EPS), LayerNorm(dim, VISION_EPS)
            self.mlp = FeedForward(dim, inner, "quick_gelu")
        self.attn = VisionAttention(dim, heads)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cu_seqlens: list[int]) -> Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, cu_seqlens)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Layer):
    def __init__(self, cfg: QwenVLConfig) -> None:
        super().__init__()
        dim, merged = cfg.vision_hidden_size, cfg.vision_hidden_size * cfg.spatial_merge_size**2
        self.ln_q = RMSNorm(dim, VISION_EPS) if cfg.qwen25 else LayerNorm(dim, VISION_EPS)
        self.mlp = nn.LayerList(
            [nn.Linear(merged, merged), nn.GELU(), nn.Linear(merged, cfg.hidden_size)]
        )
        self.merged = merged

    def forward(self, x: Tensor) -> Tensor:
        x = self.ln_q(x).reshape([-1, self.merged])
        return self.mlp[2](ops.activation("gelu", self.mlp[0](x)))


def block_rope_positions(grids: list[tuple[int, int, int]], merge: int) -> tuple[Tensor, Tensor]:
    """(row, col) of every patch, patches in merge-block order, frames repeated."""
    rows, cols = [], []
    for t, h, w in grids:
        r = paddle.arange(h * w)
        block, inner = r // (merge * merge), r % (merge * merge)
        rows.append(paddle.tile(merge * (block // (w // merge)) + inner // merge, [t]))
        cols.append(paddle.tile(merge * (block % (w // merge)) + inner % merge, [t]))
    return paddle.concat(rows).astype("float32"), paddle.concat(cols).astype("float32")


def merge_block_rope(
    grids: list[tuple[int, int, int]], head_dim: int, merge: int
) -> tuple[Tensor, Tensor]:
    """Half-split 2D rope tables ``[patches, head_dim]`` for patches in merge-block order."""
    row, col = block_rope_positions(grids, merge)
    inv = inverse_frequencies(head_dim // 2, 10000.0)
    freqs = paddle.concat([row.unsqueeze(-1) * inv, col.unsqueeze(-1) * inv], axis=-1)
    emb = paddle.concat([freqs, freqs], axis=-1)
    return paddle.cos(emb), paddle.sin(emb)


def frame_boundaries(grids: list[tuple[int, int, int]]) -> list[int]:
    """``cu_seqlens`` with one segment per frame (temporal slice) of every item."""
    bounds = [0]
    for t, h, w in grids:
        for _ in range(t):
            bounds.append(bounds[-1] + h * w)
    return bounds


def window_partition(grids: list[tuple[int, int, int]], window: int) -> tuple[list[int], list[int]]:
    """Merged-token permutation into window order and the windows' cumulative patch counts.

    Each frame of each item is cut into ``window x window`` squares of merged tokens (partial at
    the right and bottom edges); windows never cross frames or items.
    """
    order: list[int] = []
    cu = [0]
    offset = 0
    for t, h, w in grids:
        lh, lw = h // 2, w // 2
        for frame in range(t):
            base = offset + frame * lh * lw
            for wy in range(0, lh, window):
                for wx in range(0, lw, window):
                    members = [
                        base + y * lw + x
                        for y in range(wy, min(wy + window, lh))
                        for x in range(wx, min(wx + window, lw))
                    ]
                    order.extend(members)
                    cu.append(cu[-1] + 4 * len(members))
        offset += t * lh * lw
    return order, cu


class QwenVisionTransformer(nn.Layer):
    """``visual.*``: patch embedding, blocks, merger; returns merged features in item order."""

    def __init__(self, cfg: QwenVLConfig) -> None:
        super().__init__()
        self.cfg = cfg
        p, t = cfg.patch_size, cfg.temporal_patch_size
        self.patch_embed = nn.Layer()
        self.patch_embed.proj = PixelProjection([cfg.vision_hidden_size, 3, t, p, p], bias=False)
        self.blocks = nn.LayerList(
            [
                VisionBlock(
                    cfg.vision_hidden_size,
                    cfg.vision_heads,
                    cfg.vision_intermediate_size,
                    cfg.qwen25,
                )
                for _ in range(cfg.vision_depth)
            ]
        )
        self.merger = PatchMerger(cfg)

    def forward(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        cfg = self.cfg
        x = self.patch_embed.proj(patches)
        head_dim = cfg.vision_hidden_size // cfg.vision_heads
        row, col = block_rope_positions(grids, cfg.spatial_merge_size)
        inv = 1.0 / (
            10000.0 ** (paddle.arange(0, head_dim // 2, 2, dtype="float32") / (head_dim // 2))
        )
        freqs = paddle.concat([row.unsqueeze(-1) * inv, col.unsqueeze(-1) * inv], axis=-1)
        emb = paddle.concat([freqs, freqs], axis=-1)
        cos, sin = paddle.cos(emb), paddle.sin(emb)
        frames = [0]
        for t, h, w in grids:
            for _ in range(t):
                frames.append(frames[-1] + h * w)
        order = None
        if cfg.window_size:
            window = cfg.window_size // cfg.spatial_merge_size // cfg.patch_size
            order, windows = window_partition(grids, window)
            index = paddle.to_tensor(order)
            dim = x.shape[-1]
            x = x.reshape([-1, 4, dim])[index].reshape([-1, dim])
            cos = cos.reshape([-1, 4, cos.shape[-1]])[index].reshape([-1, cos.shape[-1]])
            sin = sin.reshape([-1, 4, sin.shape[-1]])[index].reshape([-1, sin.shape[-1]])
        for i, block in enumerate(self.blocks):
            full = order is None or i in cfg.fullatt_block_indexes
            x = block(x, cos, sin, frames if full else windows)
        merged = self.merger(x)
        if order is not None:
            merged = merged[paddle.argsort(paddle.to_tensor(order))]
        return merged


class QwenVLForConditionalGeneration(VisionLanguageModel):
    """Qwen2-VL / Qwen2.5-VL; parameter names follow the checkpoint's legacy layout."""

    def __init__(self, cfg: QwenVLConfig) -> None:
        super().__init__()
        self.config = cfg
        self.placeholder_ids = (cfg.image_token_id, cfg.video_token_id)
        self.visual = QwenVisionTransformer(cfg)
        self.model = DecoderStack(
            cfg.vocab_size,
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.num_hidden_layers,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            cfg.rms_norm_eps,
            qkv_bias=True,
        )
        self.lm_head = self.output_head(cfg.hidden_size, cfg.vocab_size, cfg.tie_word_embeddings)

    def checkpoint_name(self, name: str) -> str | None:
        """Our parameter name for a checkpoint weight (legacy or transformers-v5 layout)."""
        if name.endswith("rotary_emb.inv_freq"):
            return ""
        if self.tied_head_ignored(name):
            return ""
        name = re.sub(r"^model\.visual\.", "visual.", name)
        return re.sub(r"^model\.language_model\.", "model.", name)

    def fold_normalization(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        self.visual.patch_embed.proj.fold_normalization(mean, std)

    def encode_images(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        """Features ``[sum(t*h*w) / 4, hidden]`` of uint8 rows ``[P, 3*2*14*14]`` (images or
        video chunks) in one varlen call."""
        return self.visual(patches, grids)

    def decode(self, x: Tensor, position_ids: Tensor, backend: AttentionBackend) -> Tensor:
        cfg = self.config
        section = list(cfg.mrope_section)
        cos, sin = mrope_cos_sin(position_ids, cfg.head_dim, cfg.rope_theta, section)
        return self.model(x, cos, sin, backend)
