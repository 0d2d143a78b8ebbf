"""PaddleOCR-VL: a SigLIP-style vision encoder (learned position table interpolated per image,
2D rotary), the ``mlp_AR`` projector, and an ERNIE-4.5 decoder with multimodal rope."""

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
    activation_name,
    mrope_cos_sin,
    vision_2d_cos_sin,
)

paddle = ops.paddle
nn = paddle.nn
F = paddle.nn.functional
Tensor = Any
PROJECTOR_NORM_EPS = 1e-5


@dataclass(frozen=True)
class PaddleOCRVLConfig:
    """The fields of a PaddleOCR-VL ``config.json`` the model uses."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    mrope_section: tuple[int, int, int]
    tie_word_embeddings: bool
    use_bias: bool
    image_token_id: int
    vision_hidden_size: int
    vision_intermediate_size: int
    vision_layers: int
    vision_heads: int
    patch_size: int
    position_grid: int
    vision_eps: float
    vision_act: str
    spatial_merge_size: int

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> PaddleOCRVLConfig:
        text = {**config, **(config.get("text_config") or {})}
        vision = config["vision_config"]
        rope = text.get("rope_scaling") or text.get("rope_parameters") or {}
        heads = text["num_attention_heads"]
        return cls(
            vocab_size=text["vocab_size"],
            hidden_size=text["hidden_size"],
            intermediate_size=text["intermediate_size"],
            num_hidden_layers=text["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=text.get("num_key_value_heads", heads),
            head_dim=text.get("head_dim") or text["hidden_size"] // heads,
            rms_norm_eps=text.get("rms_norm_eps", 1e-5),
            rope_theta=text.get("rope_theta", rope.get("rope_theta", 500000.0)),
            mrope_section=tuple(rope.get("mrope_section", (16, 24, 24))),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            use_bias=bool(text.get("use_bias", False)),
            image_token_id=config.get("image_token_id", 100295),
            vision_hidden_size=vision["hidden_size"],
            vision_intermediate_size=vision["intermediate_size"],
            vision_layers=vision["num_hidden_layers"],
            vision_heads=vision["num_attention_heads"],
            patch_size=vision.get("patch_size", 14),
            position_grid=vision.get("image_size", 384) // vision.get("patch_size", 14),
            vision_eps=vision.get("layer_norm_eps", 1e-6),
            vision_act=activation_name(vision.get("hidden_act", "gelu_pytorch_tanh")),
            spatial_merge_size=vision.get("spatial_merge_size", 2),
        )


# -- vision ------------------------------------------------------------------------------------


class VisionEmbeddings(nn.Layer):
    def __init__(self, cfg: PaddleOCRVLConfig) -> None:
        super().__init__()
        self.grid = cfg.position_grid
        p = cfg.patch_size
        self.patch_embedding = PixelProjection([cfg.vision_hidden_size, 3, p, p], bias=True)
        self.position_embedding = nn.Embedding(cfg.position_grid**2, cfg.vision_hidden_size)

    def forward(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        x = self.patch_embedding(patches)
        table = self.position_embedding.weight
        table = table.reshape([1, self.grid, self.grid, -1]).transpose([0, 3, 1, 2])
        positions = []
        for t, h, w in grids:
            resized = F.interpolate(table, size=(h, w), mode="bilinear", align_corners=False)
            positions.append(paddle.tile(resized[0].reshape([table.shape[1], h * w]).T, [t, 1]))
        return x + paddle.concat(positions).astype(x.dtype)


class VisionAttention(nn.Layer):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cu_seqlens: list[int]) -> Tensor:
        n = x.shape[0]
        shape = [n, self.heads, self.head_dim]
        q = ops.rope_half(self.q_proj(x).reshape(shape), cos, sin)
        k = ops.rope_half(self.k_proj(x).reshape(shape), cos, sin)
        v = self.v_proj(x).reshape(shape)
        out = ops.varlen_attention(q, k, v, cu_seqlens, causal=False)
        return self.out_proj(out.reshape([n, -1]))


class VisionLayer(nn.Layer):
    def __init__(self, cfg: PaddleOCRVLConfig) -> None:
        super().__init__()
        dim = cfg.vision_hidden_size
        self.layer_norm1 = LayerNorm(dim, cfg.vision_eps)
        self.self_attn = VisionAttention(dim, cfg.vision_heads)
        self.layer_norm2 = LayerNorm(dim, cfg.vision_eps)
        self.mlp = FeedForward(dim, cfg.vision_intermediate_size, cfg.vision_act)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cu_seqlens: list[int]) -> Tensor:
        x = x + self.self_attn(self.layer_norm1(x), cos, sin, cu_seqlens)
        return x + self.mlp(self.layer_norm2(x))


class VisionEncoder(nn.Layer):
    def __init__(self, cfg: PaddleOCRVLConfig) -> None:
        super().__init__()
        self.layers = nn.LayerList([VisionLayer(cfg) for _ in range(cfg.vision_layers)])


class VisionTransformer(nn.Layer):
    def __init__(self, cfg: PaddleOCRVLConfig) -> None:
        super().__init__()
        self.head_dim = cfg.vision_hidden_size // cfg.vision_heads
        self.embeddings = VisionEmbeddings(cfg)
        self.encoder = VisionEncoder(cfg)
        self.post_layernorm = LayerNorm(cfg.vision_hidden_size, cfg.vision_eps)

    def forward(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        x = self.embeddings(patches, grids)
        cos, sin = vision_2d_cos_sin(grids, self.head_dim)
        cu_seqlens = [0]
        for t, h, w in grids:
            cu_seqlens.append(cu_seqlens[-1] + t * h * w)
        for layer in self.encoder.layers:
            x = layer(x, cos, sin, cu_seqlens)
        return self.post_layernorm(x)


class Visual(nn.Layer):
    def __init__(self, cfg: PaddleOCRVLConfig) -> None:
        super().__init__()
        self.vision_model = VisionTransformer(cfg)


class Projector(nn.Layer):
    """``mlp_AR``: LayerNorm, 2x2 merge of raster-ordered patches, Linear, GELU, Linear."""

    def __init__(self, cfg: PaddleOCRVLConfig) -> None:
        super().__init__()
        dim, merge = cfg.vision_hidden_size, cfg.spatial_merge_size
        self.merge = merge
        self.pre_norm = LayerNorm(dim, PROJECTOR_NORM_EPS)
        self.linear_1 = nn.Linear(dim * merge * merge, dim * merge * merge)
        self.linear_2 = nn.Linear(dim * merge * merge, cfg.hidden_size)

    def forward(self, x: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        x = self.pre_norm(x)
        m, dim = self.merge, x.shape[-1]
        merged, start = [], 0
        for t, h, w in grids:
            part = x[start : start + t * h * w].reshape([t, h // m, m, w // m, m, dim])
            merged.append(part.transpose([0, 1, 3, 2, 4, 5]).reshape([-1, m * m * dim]))
            start += t * h * w
        return self.linear_2(ops.activation("gelu", self.linear_1(paddle.concat(merged))))


# -- language model ----------------------------------------------------------------------------


class PaddleOCRVLForConditionalGeneration(VisionLanguageModel):
    """The whole model. Parameter names follow the checkpoint's legacy layout."""

    def __init__(self, cfg: PaddleOCRVLConfig) -> None:
        super().__init__()
        self.config = cfg
        self.placeholder_ids = (cfg.image_token_id,)
        self.visual = Visual(cfg)
        self.mlp_AR = Projector(cfg)  # noqa: N815 - the checkpoint's name
        self.model = DecoderStack(
            cfg.vocab_size,
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.num_hidden_layers,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            cfg.rms_norm_eps,
            qkv_bias=cfg.use_bias,
        )
        self.lm_head = self.output_head(cfg.hidden_size, cfg.vocab_size, cfg.tie_word_embeddings)

    # -- loading ---------------------------------------------------------------------------
    def checkpoint_name(self, name: str) -> str | None:
        """Our parameter name for a checkpoint weight (legacy or transformers-v5 layout);
        ``""`` for weights the reference ignores too."""
        if "packing_position_embedding" in name or ".vision_model.head." in name:
            return ""
        if self.tied_head_ignored(name):
            return ""
        name = re.sub(r"^model\.visual\.", "visual.", name)
        name = re.sub(r"^model\.projector\.", "mlp_AR.", name)
        return re.sub(r"^model\.language_model\.", "model.", name)

    def fold_normalization(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        self.visual.vision_model.embeddings.patch_embedding.fold_normalization(mean, std)

    # -- compute ---------------------------------------------------------------------------
    def encode_images(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        """Features ``[sum(t*h*w) / 4, hidden]`` of uint8 patch rows ``[P, 3*14*14]`` of images
        with the given grids, in one varlen call."""
        return self.mlp_AR(self.visual.vision_model(patches, grids), grids)

    def decode(self, x: Tensor, position_ids: Tensor, backend: AttentionBackend) -> Tensor:
        """Decoder output for embeddings ``x [N, H]`` at positions ``position_ids [3, N]``."""
        cfg = self.config
        cos, sin = mrope_cos_sin(
            position_ids, cfg.head_dim, cfg.rope_theta, list(cfg.mrope_section)
        )
        return self.model(x, cos, sin, backend)
