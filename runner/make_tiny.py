"""``vlm-server make-tiny``: small random checkpoints in the real Hugging Face format.

A directory holds ``config.json`` (real ``model_type``, ``architectures`` and field names),
``model.safetensors`` (real weight names, PyTorch ``[out, in]`` Linear layout), a real BPE
``tokenizer.json`` trained on a text the package ships with the family's special tokens,
``tokenizer_config.json`` with the family's chat template, ``preprocessor_config.json`` and
``generation_config.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from maca_kernels.ops import paddle
from runner.loader import linear_weight_names, save_weights
from runner.models import build_model

TOKENIZER_VOCAB = 1024


@dataclass(frozen=True)
class TinySpec:
    """What a family's tiny checkpoint needs besides its weights."""

    special_tokens: tuple[str, ...]
    config: dict[str, Any]  # config.json with token ids given as special-token names
    preprocessor: dict[str, Any]
    chat_template: str
    bos: str
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

SPECS: dict[str, TinySpec] = {
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
        preprocessor={
            "image_processor_type": "PaddleOCRVLImageProcessor",
            "processor_class": "PaddleOCRVLProcessor",
            "do_resize": True,
            "resample": 3,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "do_convert_rgb": True,
            "min_pixels": 112896,
            "max_pixels": 1003520,
            "patch_size": 14,
            "temporal_patch_size": 1,
            "merge_size": 2,
        },
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


def train_tokenizer(special_tokens: tuple[str, ...], vocab_size: int = TOKENIZER_VOCAB):
    """A byte-level BPE tokenizer trained on the shipped corpus; specials get ids 0..k-1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = resources.files("runner").joinpath("data/tiny_corpus.txt").read_text()
    tokenizer = Tokenizer(models.BPE(unk_token=special_tokens[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(text.splitlines(), trainer)
    return tokenizer


def _resolve_ids(value: Any, ids: dict[str, int]) -> Any:
    if isinstance(value, dict):
        return {k: _resolve_ids(v, ids) for k, v in value.items()}
    if isinstance(value, str) and value in ids:
        return ids[value]
    return value


def _randomize(model: Any, seed: int) -> None:
    """Non-degenerate random weights: small normal weights, biases and norm scales near their
    defaults but not equal to them (so parity tests see every parameter)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for name, param in model.named_parameters():
        shape = list(param.shape)
        if name.endswith("bias"):
            values = 0.05 * rng.standard_normal(shape)
        elif "norm" in name and len(shape) == 1:
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            values = 0.08 * rng.standard_normal(shape)
        param.set_value(paddle.to_tensor(values.astype("float32")))


def checkpoint_tensors(model: Any) -> dict[str, Any]:
    """The model's parameters under their checkpoint names, Linear weights as ``[out, in]``."""
    transposed = linear_weight_names(model)
    tensors = {}
    for name, param in model.named_parameters():
        value = param.detach()
        tensors[name] = value.T.contiguous() if name in transposed else value
    return tensors


def make_tiny(
    arch: str, out: str | Path, seed: int = 0, max_shard_bytes: int | None = None
) -> Path:
    """Write a tiny random ``arch`` checkpoint to ``out`` and return the directory."""
    if arch not in SPECS:
        raise ValueError(f"make-tiny supports {', '.join(sorted(SPECS))}; got {arch!r}")
    spec = SPECS[arch]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec.special_tokens)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in spec.special_tokens}
    config = _resolve_ids(spec.config, ids)
    config["vocab_size"] = tokenizer.get_vocab_size()
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(spec.preprocessor, indent=2))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": spec.bos,
                "eos_token": spec.eos,
                "pad_token": spec.pad,
                "unk_token": spec.unk,
                "additional_special_tokens": [
                    t for t in spec.special_tokens if t not in {spec.bos, spec.eos, spec.unk}
                ],
                "model_max_length": config.get("max_position_embeddings", 4096),
                "chat_template": spec.chat_template,
                **dict(spec.named_tokens),
            },
            indent=2,
        )
    )
    (out / "generation_config.json").write_text(
        json.dumps(
            {
                "bos_token_id": config.get("bos_token_id"),
                "eos_token_id": config.get("eos_token_id"),
                "pad_token_id": config.get("pad_token_id"),
            },
            indent=2,
        )
    )
    paddle.seed(seed)
    model = build_model(config)
    _randomize(model, seed)
    tensors = checkpoint_tensors(model)
    for name, shape in spec.unused_weights:
        tensors[name] = paddle.zeros(shape(config), dtype="float32")
    save_weights(tensors, out, max_shard_bytes)
    return out
