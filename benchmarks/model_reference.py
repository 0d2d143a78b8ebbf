"""Calling paddleformers' reference models' sub-parts the way their forward does."""

from __future__ import annotations

import importlib.util
import sys
import types
from functools import cache
from typing import Any

from maca_kernels.ops import paddle


def install_triton_stub() -> None:
    """Register a do-nothing ``triton`` module unless the real one can be imported.

    paddleformers' PaddleOCR-VL imports triton at import time; the stand-in's version is below
    3, so paddleformers reports its triton rope kernel as unavailable and uses plain Paddle.
    """
    if "triton" in sys.modules or importlib.util.find_spec("triton") is not None:
        return
    triton = types.ModuleType("triton")
    triton.__version__ = "0.0.0"
    triton.jit = lambda fn=None, **kwargs: fn if fn is not None else (lambda f: f)
    triton.cdiv = lambda a, b: (a + b - 1) // b
    triton.next_power_of_2 = lambda n: 1 << (int(n) - 1).bit_length()
    language = types.ModuleType("triton.language")
    language.constexpr = object
    triton.language = language
    sys.modules["triton"] = triton
    sys.modules["triton.language"] = language


@cache
def import_paddleformers() -> Any:
    """paddleformers, imported after the kernel layer's CPU setup and the triton stand-in."""
    install_triton_stub()
    import paddleformers

    return paddleformers


def paddleocr_vl_features(model: Any, pixels: Any, grid: Any) -> Any:
    """Vision encoder + projector features of paddleformers' PaddleOCR-VL."""
    f = paddle.nn.functional
    sizes = grid.prod(axis=1)
    cu = f.pad(paddle.cumsum(sizes, axis=0), (1, 0), value=0, data_format="NCL").astype("int32")
    index = paddle.repeat_interleave(paddle.arange(grid.shape[0]), sizes)
    out = model.visual(
        pixel_values=pixels.unsqueeze(0),
        image_grid_thw=grid,
        cu_seqlens=cu,
        sample_indices=index,
        vision_return_embed_list=True,
        interpolate_pos_encoding=True,
        return_pooler_output=False,
        use_rope=True,
        window_size=-1,
    )
    return model.mlp_AR(out.last_hidden_state, grid)


@cache
def patch_paddleformers_ernie_for_cpu() -> None:
    """Let paddleformers' ERNIE-4.5-VL run on a CPU.

    Three of its pieces exist only as GPU kernels: the ViT attention (bf16 flash-mask), the
    asynchronous offload helpers, and MoE dispatch/combine. The first is replaced by the same
    block-diagonal attention in float32, the second by no-ops, the third by a loop over experts
    that keeps paddleformers' own routing (gate, per-modality softmax, top-k on probability plus
    correction bias, expert-id offsets); with the released expert capacity nothing is dropped,
    so the loop computes what the kernels compute. Its forward also casts pixels to bfloat16
    before the ViT; the patched version keeps float32 pixels so float32 parity is meaningful.
    """
    import_paddleformers()
    from paddleformers.transformers.ernie4_5_moe_vl.model import modeling_moe, modeling_moe_vl
    from paddleformers.transformers.ernie4_5_moe_vl.model.dfnrope import modeling as dfn
    from paddleformers.transformers.ernie4_5_moe_vl.model.moe import moe_all_gather_layer as ag

    def vision_attention(self, hidden, startend_row_indices, rotary_pos_emb=None, attn_sep=False):
        n = hidden.shape[0]
        qkv = self.qkv(hidden).reshape([n, 3, self.num_heads, -1]).transpose([1, 0, 2, 3])
        q, k, v = qkv.unbind(axis=0)
        q = dfn.apply_rotary_pos_emb_vision(q.unsqueeze(0), rotary_pos_emb).squeeze(0)
        k = dfn.apply_rotary_pos_emb_vision(k.unsqueeze(0), rotary_pos_emb).squeeze(0)
        bounds = startend_row_indices.reshape([n, 2]).astype("int64")  # per key: [end, start]
        rows = paddle.arange(n).unsqueeze(1)
        allowed = (rows < bounds[:, 0].unsqueeze(0)) & (rows >= bounds[:, 1].unsqueeze(0))
        q, k, v = (t.astype("float32").transpose([1, 0, 2]) for t in (q, k, v))
        scores = paddle.matmul(q, k, transpose_y=True) * (q.shape[-1] ** -0.5)
        scores = paddle.where(allowed.unsqueeze(0), scores, paddle.full_like(scores, float("-inf")))
        out = paddle.matmul(paddle.nn.functional.softmax(scores, axis=-1), v)
        return self.proj(out.transpose([1, 0, 2]).reshape([n, -1]).astype(hidden.dtype))

    def expand_expert_id(
        expert_id, num_expert_per_modality, group_size, modality_offset, is_group_expert
    ):
        per_modality = num_expert_per_modality  # paddleformers passes keyword arguments
        e = expert_id
        if is_group_expert:
            e = e + (paddle.arange(e.shape[1], dtype=e.dtype) * group_size).unsqueeze(0)
        if per_modality <= 0:
            return e
        rank, local = e // per_modality, e % per_modality
        return rank * (2 * per_modality) + local + modality_offset * per_modality

    def moe_forward(self, tokens, token_type_ids=None, use_dense_expert=False):
        shape = tokens.shape
        x = tokens.reshape([-1, shape[-1]])
        types = token_type_ids[:, :-1].reshape([-1]) if token_type_ids is not None else None
        logits, _, router_loss = self.gate(x, *(() if types is None else (types,)))
        multimodal = self.config.multimodel_experts and self.gate.config.multimodel_experts
        text_logits, vision_logits = logits.chunk(2, axis=-1) if multimodal else (logits, None)
        weights_and_ids, _, _ = self.fused_gate_logits_process_fused(
            text_logits, vision_logits, types
        )
        weights, expert_ids = weights_and_ids.chunk(2, axis=-1)
        expert_ids = expert_ids.astype("int64")
        if self.gate.norm_gate_logits:
            weights = weights / paddle.clip(weights.sum(-1, keepdim=True), min=1e-12)
        out = paddle.zeros_like(x)
        for expert in sorted(set(expert_ids.flatten().tolist())):
            hit = expert_ids == expert
            rows = paddle.nonzero(hit.any(-1)).flatten()
            weight = (weights * hit.astype(weights.dtype)).sum(-1)[rows].unsqueeze(-1)
            y = self.experts[expert](paddle.gather(x, rows)) * weight.astype(x.dtype)
            out = paddle.scatter_nd_add(out, rows.unsqueeze(-1), y)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out.reshape(shape), weights, router_loss, logits

    def vision_forward(self, images, image_position_ids, image_attention_mask, grid_thw):
        if self.image_preprocess is not None:
            images = self.image_preprocess.rescale_factor * images.astype("float32")
            images = (images - self.image_preprocess.image_mean_tensor) / (
                self.image_preprocess.image_std_tensor
            )
        grid_thw = grid_thw[grid_thw > 0].reshape([-1, 3])
        per_frame = paddle.repeat_interleave(grid_thw[:, 1:], grid_thw[:, 0], 0)
        per_frame = paddle.nn.functional.pad(per_frame, [0, 0, 1, 0], value=1)
        return self.vision_model.extract_feature(images.astype("float32"), per_frame)

    modeling_moe_vl.Ernie4_5_VLMoeForConditionalGeneration.vision_forward = vision_forward
    dfn.VisionFlashAttention2.forward = vision_attention
    for module in (modeling_moe, ag):
        module.get_async_loader = lambda: None
        module.async_offload = lambda x, loader: (x, None)
        module.hack_offload_wait = lambda task: None
    ag.expand_modality_expert_id = expand_expert_id
    ag.MOEAllGatherLayerV2.forward = moe_forward
