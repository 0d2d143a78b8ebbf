"""ERNIE-4.5-VL: a DFNRope ViT, the spatial/temporal resampler, and an ERNIE-4.5 MoE decoder
with modality-isolated experts (text tokens to text experts, vision tokens to vision experts),
shared experts, and 3D rope with ``freq_allocation`` on interleaved pairs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maca_kernels import ops
from runner.models.base import VisionLanguageModel
from runner.models.layers import (
    AttentionBackend,
    GatedMLP,
    LayerNorm,
    PixelProjection,
    RMSNorm,
    TextAttention,
    inverse_frequencies,
)
from runner.models.qwen2_vl import VISION_EPS, VisionBlock, frame_boundaries, merge_block_rope

paddle = ops.paddle
nn = paddle.nn
Tensor = Any


def _pair(value: Any) -> tuple[int, int]:
    return (value[0], value[1]) if isinstance(value, (list, tuple)) else (value, value)


@dataclass(frozen=True)
class Ernie45VLConfig:
    """The fields of an ERNIE-4.5-VL ``config.json`` (legacy flat layout) the model uses."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    freq_allocation: int
    tie_word_embeddings: bool
    moe_layers: tuple[int, ...]
    experts: int  # per modality
    moe_k: int
    expert_sizes: tuple[int, int]  # text, vision intermediate sizes
    shared_experts: int
    vision_token_ids: tuple[int, ...]  # routed to vision experts (placeholders and markers)
    placeholder_ids: tuple[int, ...]  # replaced by vision features
    vision_dim: int
    vision_depth: int
    vision_heads: int
    vision_inner: int
    spatial_merge_size: int

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> Ernie45VLConfig:
        vision = config["vision_config"]
        heads = config["num_attention_heads"]
        layers = config["num_hidden_layers"]
        start = min(_pair(config.get("moe_layer_start_index", 1)))
        end = max(_pair(config.get("moe_layer_end_index", layers - 1)))
        end = layers - 1 if end < 0 else end
        interval = config.get("moe_layer_interval", 1)
        experts = _pair(config.get("moe_num_experts", 64))
        if experts[0] != experts[1]:
            raise ValueError("ERNIE-4.5-VL needs as many text experts as vision experts")
        patch = config.get("im_patch_id", 100295)
        ids = {
            "image_start": config.get("image_start_token_id", 101304),
            "image_end": config.get("image_end_token_id", 101305),
            "video_start": config.get("video_start_token_id", 101306),
            "video_end": config.get("video_end_token_id", 101307),
        }
        video = config.get("video_token_id", patch)
        dim = vision.get("embed_dim", vision.get("hidden_size"))
        return cls(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=config.get("num_key_value_heads", heads),
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            rms_norm_eps=config.get("rms_norm_eps", 1e-5),
            rope_theta=config.get("rope_theta", 500000.0),
            freq_allocation=config.get("freq_allocation", 20),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
            moe_layers=tuple(
                i for i in range(layers) if (i + 1) % interval == 0 and start <= i <= end
            ),
            experts=experts[0],
            moe_k=config.get("moe_k", 6),
            expert_sizes=_pair(config.get("moe_intermediate_size", 1536)),
            shared_experts=config.get("moe_num_shared_experts", 0),
            vision_token_ids=tuple(sorted({patch, video, *ids.values()})),
            placeholder_ids=tuple(sorted({patch, video})),
            vision_dim=dim,
            vision_depth=vision["depth"],
            vision_heads=vision["num_heads"],
            vision_inner=int(dim * vision.get("mlp_ratio", 4)),
            spatial_merge_size=config.get("spatial_conv_size", 2),
        )


# -- vision ------------------------------------------------------------------------------------


class DFNRopeVisionTransformer(nn.Layer):
    """``vision_model.*``: per-frame attention, LayerNorm blocks with quick-GELU, final ``ln``."""

    def __init__(self, cfg: Ernie45VLConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embed = nn.Layer()
        self.patch_embed.proj = PixelProjection([cfg.vision_dim, 3 * 14 * 14], bias=False)
        self.blocks = nn.LayerList(
            [
                VisionBlock(cfg.vision_dim, cfg.vision_heads, cfg.vision_inner, gated=False)
                for _ in range(cfg.vision_depth)
            ]
        )
        self.ln = LayerNorm(cfg.vision_dim, VISION_EPS)

    def forward(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        cfg = self.cfg
        x = self.patch_embed.proj(patches)
        cos, sin = merge_block_rope(
            grids, cfg.vision_dim // cfg.vision_heads, cfg.spatial_merge_size
        )
        frames = frame_boundaries(grids)
        for block in self.blocks:
            x = block(x, cos, sin, frames)
        return self.ln(x)


class Resampler(nn.Layer):
    """``model.resampler_model``: 2x2 spatial merge MLP, frame-pair temporal MLP (an image pairs
    with itself), projection to the text width, RMSNorm."""

    def __init__(self, cfg: Ernie45VLConfig) -> None:
        super().__init__()
        wide = cfg.vision_dim * cfg.spatial_merge_size**2
        self.wide = wide
        self.spatial_linear = nn.LayerList(
            [nn.Linear(wide, wide), nn.GELU(), nn.Linear(wide, wide), LayerNorm(wide, VISION_EPS)]
        )
        self.temporal_linear = nn.LayerList(
            [
                nn.Linear(2 * wide, wide),
                nn.GELU(),
                nn.Linear(wide, wide),
                LayerNorm(wide, VISION_EPS),
            ]
        )
        self.mlp = nn.Linear(wide, cfg.hidden_size)
        self.after_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    @staticmethod
    def _mlp(layers: Any, x: Tensor) -> Tensor:
        return layers[3](layers[2](ops.activation("gelu", layers[0](x))))

    def forward(self, x: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        x = self._mlp(self.spatial_linear, x.reshape([-1, self.wide]))
        firsts, seconds, start = [], [], 0
        for t, h, w in grids:
            per_frame = h * w // 4
            frames = [x[start + f * per_frame : start + (f + 1) * per_frame] for f in range(t)]
            pairs = (
                [(frames[0], frames[0])]
                if t == 1
                else list(zip(frames[::2], frames[1::2], strict=True))
            )
            firsts.extend(a for a, _ in pairs)
            seconds.extend(b for _, b in pairs)
            start += t * per_frame
        merged = paddle.concat([paddle.concat(firsts), paddle.concat(seconds)], axis=-1)
        return self.after_norm(self.mlp(self._mlp(self.temporal_linear, merged)))


# -- language model ----------------------------------------------------------------------------


def ernie_3d_cos_sin(position_ids: Tensor, head_dim: int, theta: float, freq_allocation: int):
    """Interleaved 3D rope tables ``[N, head_dim / 2]``: the last ``freq_allocation`` frequency
    slots take the temporal position, the others alternate height (even) and width (odd)."""
    half = head_dim // 2
    inv = inverse_frequencies(head_dim, theta)  # [half]
    slot = paddle.arange(half)
    axis = paddle.where(
        slot >= half - freq_allocation, paddle.zeros_like(slot), 1 + (slot % 2)
    )  # 0 t, 1 h, 2 w
    positions = position_ids.astype("float32").T  # [N, 3]
    chosen = paddle.index_select(positions, axis, axis=1)  # [N, half]
    angles = chosen * inv
    return paddle.cos(angles), paddle.sin(angles)


class ModalityExperts(nn.Layer):
    """The MoE block of one layer: a router per modality, experts (text then vision), shared
    experts. Parameter names follow the legacy checkpoint (``gate.weight`` is [hidden, experts]
    for text, ``gate.weight_1`` for vision; not Linear layers, so not transposed on load)."""

    def __init__(self, cfg: Ernie45VLConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hidden, n = cfg.hidden_size, cfg.experts
        self.gate = nn.Layer()
        self.gate.weight = self.gate.create_parameter([hidden, n], dtype="float32")
        self.gate.weight_1 = self.gate.create_parameter([hidden, n], dtype="float32")
        self.moe_statics = nn.Layer()
        self.moe_statics.e_score_correction_bias = self.moe_statics.create_parameter(
            [2, n], dtype="float32", default_initializer=nn.initializer.Constant(0.0)
        )
        self.experts = nn.LayerList(
            [GatedMLP(hidden, cfg.expert_sizes[0]) for _ in range(n)]
            + [GatedMLP(hidden, cfg.expert_sizes[1]) for _ in range(n)]
        )
        self.shared_experts = (
            GatedMLP(hidden, cfg.expert_sizes[0] * cfg.shared_experts)
            if cfg.shared_experts
            else None
        )

    def forward(self, x: Tensor, is_vision: Tensor) -> Tensor:
        out = paddle.zeros_like(x)
        n, k = self.cfg.experts, self.cfg.moe_k
        routers = (self.gate.weight, self.gate.weight_1)
        for modality in (0, 1):
            rows = (is_vision == bool(modality)).nonzero().flatten()
            if rows.shape[0] == 0:
                continue
            tokens = paddle.gather(x, rows)
            probs = paddle.nn.functional.softmax(
                paddle.matmul(tokens.astype("float32"), routers[modality]), axis=-1
            )
            bias = self.moe_statics.e_score_correction_bias[modality]
            _, chosen = paddle.topk(probs + bias, k, axis=-1)
            weights = paddle.take_along_axis(probs, chosen, axis=-1)
            weights = weights / paddle.clip(weights.sum(-1, keepdim=True), min=1e-12)
            for expert in sorted(set(chosen.flatten().tolist())):
                hit = chosen == expert
                routed = hit.any(-1).nonzero().flatten()
                weight = (weights * hit.astype("float32")).sum(-1)[routed].unsqueeze(-1)
                y = self.experts[expert + modality * n](paddle.gather(tokens, routed))
                out = paddle.scatter_nd_add(
                    out, rows[routed].unsqueeze(-1), (y * weight.astype(y.dtype))
                )
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out


class ErnieDecoderLayer(nn.Layer):
    def __init__(self, cfg: Ernie45VLConfig, index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = InterleavedRopeAttention(
            index,
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            qkv_bias=False,
        )
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.is_moe = index in cfg.moe_layers
        self.mlp = (
            ModalityExperts(cfg)
            if self.is_moe
            else GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        )

    def forward(self, x, cos, sin, backend, is_vision) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, backend)
        y = self.post_attention_layernorm(x)
        return x + (self.mlp(y, is_vision) if self.is_moe else self.mlp(y))


class InterleavedRopeAttention(TextAttention):
    """Text attention with ERNIE's interleaved-pair rotary embedding."""

    rope_op = "rope_interleaved"


class ErnieTextModel(nn.Layer):
    def __init__(self, cfg: Ernie45VLConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.LayerList(
            [ErnieDecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.resampler_model = Resampler(cfg)


class Ernie45VLForConditionalGeneration(VisionLanguageModel):
    """ERNIE-4.5-VL (MoE); parameter names follow the legacy checkpoint layout."""

    def __init__(self, cfg: Ernie45VLConfig) -> None:
        super().__init__()
        self.config = cfg
        self.placeholder_ids = cfg.placeholder_ids
        self.vision_model = DFNRopeVisionTransformer(cfg)
        self.model = ErnieTextModel(cfg)
        self.lm_head = self.output_head(cfg.hidden_size, cfg.vocab_size, cfg.tie_word_embeddings)

    def checkpoint_name(self, name: str) -> str | None:
        """Our parameter name for a checkpoint weight (legacy layout); a tied model ignores a
        stored ``lm_head.weight``."""
        return "" if self.tied_head_ignored(name) else name

    def fold_normalization(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        self.vision_model.patch_embed.proj.fold_normalization(mean, std)

    def encode_images(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> Tensor:
        """Features of uint8 rows ``[P, 3*14*14]`` for images ``(1, h, w)`` and video chunks
        ``(2k, h, w)``: ``h*w/4`` rows per image or frame pair."""
        return self.model.resampler_model(self.vision_model(patches, grids), grids)

    def is_vision_token(self, input_ids: Tensor) -> Tensor:
        """Tokens routed to the vision experts: placeholders and the start/end markers."""
        ids = paddle.to_tensor(list(self.config.vision_token_ids), dtype=input_ids.dtype)
        return paddle.isin(input_ids, ids)

    def decode(
        self, x: Tensor, position_ids: Tensor, backend: AttentionBackend, is_vision: Tensor
    ) -> Tensor:
        cfg = self.config
        cos, sin = ernie_3d_cos_sin(position_ids, cfg.head_dim, cfg.rope_theta, cfg.freq_allocation)
        for layer in self.model.layers:
            x = layer(x, cos, sin, backend, is_vision)
        return self.model.norm(x)

    def run_decoder(
        self, input_ids: Tensor, x: Tensor, position_ids: Tensor, backend: AttentionBackend
    ) -> Tensor:
        """The decoder over a batch of token rows (the runner's uniform entry point)."""
        return self.decode(x, position_ids, backend, self.is_vision_token(input_ids))
