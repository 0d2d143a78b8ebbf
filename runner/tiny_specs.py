"""What ``make-tiny`` writes for each family: special tokens, a small ``config.json`` (token ids
given as special-token names), ``preprocessor_config.json`` and the chat template."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vision.processor_config import CLIP_MEAN, CLIP_STD


def _image_processor(kind: str, mean, std, **fields: Any) -> dict[str, Any]:
    """A ``preprocessor_config.json`` with the fields every family's image processor shares."""
    return {
        "image_processor_type": kind,
        "do_resize": True,
        "resample": 3,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(mean),
        "image_std": list(std),
        "do_convert_rgb": True,
        "patch_size": 14,
        "merge_size": 2,
        **fields,
    }


@dataclass(frozen=True)
class TinySpec:
    """What a family's tiny checkpoint needs besides its weights."""

    special_tokens: tuple[str, ...]
    config: dict[str, Any]  # config.json with token ids given as special-token names
    preprocessor: dict[str, Any]
    chat_template: str
    bos: str | None
    eos: str
    pad: str
    unk: str
    named_tokens: tuple[tuple[str, str], ...] = ()  # e.g. ("image_token", "<|IMAGE_PLACEHOLDER|>")
    # weights real checkpoints carry that the model never uses: name -> shape from config
    unused_weights: tuple[tuple[str, Any], ...] = ()


PADDLEOCR_VL_TEMPLATE = (
    "{%- if not add_generation_prompt is defined -%}{%- set add_generation_prompt = true -%}"
    "{%- endif -%}"
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    '{%- if message["role"] == "user" -%}{{- "User: " -}}'
    '{%- if message["content"] is string -%}{{- message["content"] -}}{%- else -%}'
    '{%- for content in message["content"] -%}{%- if content["type"] == "image" -%}'
    '{{- "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>" -}}{%- endif -%}{%- endfor -%}'
    '{%- for content in message["content"] -%}{%- if content["type"] == "text" -%}'
    '{{- content["text"] -}}{%- endif -%}{%- endfor -%}{%- endif -%}{{- "\\n" -}}'
    '{%- elif message["role"] == "assistant" -%}{{- "Assistant:\\n" -}}'
    '{%- if message["content"] is string -%}{{- message["content"] -}}{%- else -%}'
    '{%- for content in message["content"] -%}{%- if content["type"] == "text" -%}'
    '{{- content["text"] -}}{%- endif -%}{%- endfor -%}{%- endif -%}{{- eos_token -}}'
    '{%- elif message["role"] == "system" -%}'
    '{%- if message["content"] is string -%}{{- message["content"] + "\\n" -}}{%- else -%}'
    '{%- for content in message["content"] -%}{%- if content["type"] == "text" -%}'
    '{{- content["text"] + "\\n" -}}{%- endif -%}{%- endfor -%}{%- endif -%}'
    "{%- endif -%}{%- endfor -%}"
    '{%- if add_generation_prompt -%}{{- "Assistant:\\n" -}}{%- endif -%}'
)

QWEN_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
QWEN_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 4096,
    "max_window_layers": 2,
    "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "sliding_window": 32768,
    "torch_dtype": "float32",
    "bos_token_id": "<|endoftext|>",
    "eos_token_id": "<|im_end|>",
    "pad_token_id": "<|endoftext|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
    "vision_token_id": "<|vision_pad|>",
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
}
QWEN_PREPROCESSOR = _image_processor(
    "Qwen2VLImageProcessor",
    CLIP_MEAN,
    CLIP_STD,
    min_pixels=3136,
    max_pixels=12845056,
    temporal_patch_size=2,
)


def _qwen_spec(qwen25: bool) -> TinySpec:
    if qwen25:
        arch, model_type = "Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl"
        vision = {
            "depth": 3,
            "hidden_act": "silu",
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_heads": 2,
            "in_chans": 3,
            "in_channels": 3,
            "out_hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "window_size": 56,
            "fullatt_block_indexes": [1],
            "tokens_per_second": 2,
            "temporal_patch_size": 2,
        }
    else:
        arch, model_type = "Qwen2VLForConditionalGeneration", "qwen2_vl"
        vision = {
            "depth": 2,
            "embed_dim": 32,
            "mlp_ratio": 2,
            "num_heads": 2,
            "in_chans": 3,
            "hidden_size": 64,
            "hidden_act": "quick_gelu",
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "temporal_patch_size": 2,
        }
    processor = "Qwen2_5_VLProcessor" if qwen25 else "Qwen2VLProcessor"
    return TinySpec(
        special_tokens=QWEN_SPECIAL_TOKENS,
        config={
            "architectures": [arch],
            "model_type": model_type,
            **QWEN_TEXT,
            "vision_config": vision,
        },
        preprocessor={**QWEN_PREPROCESSOR, "processor_class": processor},
        chat_template=QWEN_VL_TEMPLATE,
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        unk="<|endoftext|>",
        named_tokens=(("image_token", "<|image_pad|>"), ("video_token", "<|video_pad|>")),
    )


ERNIE_VL_TEMPLATE = (
    "{%- set image_count = namespace(value=0) -%}{%- set video_count = namespace(value=0) -%}"
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{- message['content'] + '\n' -}}"
    "{%- elif message['role'] == 'user' -%}{{- 'User: ' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- else -%}"
    "{%- for content in message['content'] -%}"
    "{%- if content['type'] == 'image' -%}{%- set image_count.value = image_count.value + 1 -%}"
    "{{- 'Picture ' ~ image_count.value ~ ':<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' -}}"
    "{%- elif content['type'] == 'video' -%}{%- set video_count.value = video_count.value + 1 -%}"
    "{{- 'Video ' ~ video_count.value ~ ':<|VIDEO_START|><|VIDEO_PLACEHOLDER|><|VIDEO_END|>' -}}"
    "{%- elif content['type'] == 'text' -%}{{- content['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}{{- '\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}{{- 'Assistant: ' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- else -%}"
    "{%- for content in message['content'] -%}{%- if content['type'] == 'text' -%}"
    "{{- content['text'] -}}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|end_of_sentence|>' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%}"
)

ERNIE_VL_SPEC = TinySpec(
    special_tokens=(
        "<unk>",
        "<s>",
        "</s>",
        "<|begin_of_sentence|>",
        "<|end_of_sentence|>",
        "<|IMAGE_PLACEHOLDER|>",
        "<|IMAGE_START|>",
        "<|IMAGE_END|>",
        "<|VIDEO_START|>",
        "<|VIDEO_END|>",
        "<|VIDEO_PLACEHOLDER|>",
        "<think>",
        "</think>",
    ),
    config={
        "architectures": ["Ernie4_5_VLMoeForConditionalGeneration"],
        "model_type": "ernie4_5_moe_vl",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "freq_allocation": 2,
        "rope_3d": True,
        "max_position_embeddings": 4096,
        "use_bias": False,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "pad_token_id": "<unk>",
        "bos_token_id": "<s>",
        "eos_token_id": "</s>",
        "moe_num_experts": [4, 4],
        "moe_intermediate_size": [32, 16],
        "moe_k": 2,
        "moe_num_shared_experts": 2,
        "moe_layer_start_index": [1, 1],
        "moe_layer_end_index": [2, 2],
        "moe_layer_interval": 1,
        "moe_capacity": [128, 128, 128],
        "moe_gate": "topk",
        "moe_use_aux_free": True,
        "moe_use_hard_gate": True,
        "moe_multimodal_dispatch_use_allgather": "v2-alltoall-unpad-text",
        "moe_norm_gate_logits": True,
        "im_patch_id": "<|IMAGE_PLACEHOLDER|>",
        "video_token_id": "<|VIDEO_PLACEHOLDER|>",
        "image_start_token_id": "<|IMAGE_START|>",
        "image_end_token_id": "<|IMAGE_END|>",
        "video_start_token_id": "<|VIDEO_START|>",
        "video_end_token_id": "<|VIDEO_END|>",
        "pixel_hidden_size": 32,
        "spatial_conv_size": 2,
        "temporal_conv_size": 2,
        "vision_config": {
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": 32,
            "hidden_act": "quick_gelu",
            "mlp_ratio": 2,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
        },
    },
    preprocessor=_image_processor(
        "Ernie4_5_VLImageProcessor",
        CLIP_MEAN,
        CLIP_STD,
        min_pixels=3136,
        max_pixels=28 * 28 * 6177,
        temporal_conv_size=2,
        video_min_pixels=299 * 28 * 28,
        video_max_pixels=1196 * 28 * 28,
        video_fps=2,
        video_min_frames=16,
        video_max_frames=180,
    ),
    chat_template=ERNIE_VL_TEMPLATE,
    bos="<|begin_of_sentence|>",
    eos="</s>",
    pad="<unk>",
    unk="<unk>",
    named_tokens=(
        ("image_token", "<|IMAGE_PLACEHOLDER|>"),
        ("video_token", "<|VIDEO_PLACEHOLDER|>"),
    ),
)

SPECS: dict[str, TinySpec] = {
    "ernie4_5_vl": ERNIE_VL_SPEC,
    "qwen2_vl": _qwen_spec(qwen25=False),
    "qwen2_5_vl": _qwen_spec(qwen25=True),
    "paddleocr_vl": TinySpec(
        special_tokens=(
            "<unk>",
            "<s>",
            "</s>",
            "<|begin_of_sentence|>",
            "<|end_of_sentence|>",
            "<|IMAGE_PLACEHOLDER|>",
            "<|IMAGE_START|>",
            "<|IMAGE_END|>",
            "<|video_pad|>",
        ),
        config={
            "architectures": ["PaddleOCRVLForConditionalGeneration"],
            "model_type": "paddleocr_vl",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0,
            "rope_scaling": {"mrope_section": [2, 3, 3], "rope_type": "default", "type": "default"},
            "max_position_embeddings": 4096,
            "use_bias": False,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "pad_token_id": "<unk>",
            "bos_token_id": "<s>",
            "eos_token_id": "</s>",
            "image_token_id": "<|IMAGE_PLACEHOLDER|>",
            "video_token_id": "<|video_pad|>",
            "vision_start_token_id": "<|IMAGE_START|>",
            "vision_end_token_id": "<|IMAGE_END|>",
            "vision_config": {
                "model_type": "paddleocr_vl",
                "architectures": ["PaddleOCRVisionModel"],
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_channels": 3,
                "image_size": 384,
                "patch_size": 14,
                "hidden_act": "gelu_pytorch_tanh",
                "layer_norm_eps": 1e-6,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "tokens_per_second": 2,
            },
        },
        preprocessor=_image_processor(
            "PaddleOCRVLImageProcessor",
            (0.5, 0.5, 0.5),
            (0.5, 0.5, 0.5),
            processor_class="PaddleOCRVLProcessor",
            min_pixels=112896,
            max_pixels=1003520,
            temporal_patch_size=1,
        ),
        chat_template=PADDLEOCR_VL_TEMPLATE,
        bos="<|begin_of_sentence|>",
        eos="</s>",
        pad="<unk>",
        unk="<unk>",
        named_tokens=(("image_token", "<|IMAGE_PLACEHOLDER|>"),),
        unused_weights=(
            (
                "visual.vision_model.embeddings.packing_position_embedding.weight",
                lambda config: [32768, config["vision_config"]["hidden_size"]],
            ),
        ),
    ),
}
