"""``vlm-server make-tiny``: small random checkpoints in the real Hugging Face format.

A directory holds ``config.json`` (real ``model_type``, ``architectures`` and field names),
``model.safetensors`` (real weight names, PyTorch ``[out, in]`` Linear layout), a real BPE
``tokenizer.json`` trained on a text the package ships with the family's special tokens,
``tokenizer_config.json`` with the family's chat template, ``preprocessor_config.json`` and
``generation_config.json``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from maca_kernels.ops import paddle
from runner.loader import linear_weight_names, save_weights
from runner.models import build_model
from runner.tiny_specs import SPECS

TOKENIZER_VOCAB = 1024


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
        elif ("norm" in name or name.endswith(("ln.weight", ".3.weight"))) and len(shape) == 1:
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("e_score_correction_bias"):
            values = 0.05 * rng.standard_normal(shape)
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
    arch: str,
    out: str | Path,
    seed: int = 0,
    max_shard_bytes: int | None = None,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny random ``arch`` checkpoint to ``out`` and return the directory.

    ``overrides`` replace top-level ``config.json`` fields (``vision_config`` as a whole), e.g.
    to write a random checkpoint at released dimensions for benchmarks.
    """
    if arch not in SPECS:
        raise ValueError(f"make-tiny supports {', '.join(sorted(SPECS))}; got {arch!r}")
    spec = SPECS[arch]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec.special_tokens)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in spec.special_tokens}
    config = _resolve_ids({**spec.config, **(overrides or {})}, ids)
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
                    t
                    for t in spec.special_tokens
                    if t not in {spec.bos, spec.eos, spec.unk, spec.pad}
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
