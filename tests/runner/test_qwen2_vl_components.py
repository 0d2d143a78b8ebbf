"""Qwen2-VL, which paddleformers lacks: its vision tower against a numpy float64 implementation
of the published formulas (LayerNorm blocks, quick-GELU MLP, 2D rotary, per-frame attention,
LayerNorm merger), read straight from the make-tiny checkpoint; its text side is the shared
decoder checked against paddleformers in the Qwen2.5-VL and PaddleOCR-VL tests."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors.numpy import load_file

from maca_kernels.ops import paddle
from runner.models import load_model
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt


def layer_norm(x, w, b, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def reference_vision(weights, config, pixels, grids):
    """Qwen2-VL's vision tower in numpy (float64), from the checkpoint's tensors."""
    vision = config["vision_config"]
    dim, heads = vision["embed_dim"], vision["num_heads"]
    hd = dim // heads
    w = {k: v.astype(np.float64) for k, v in weights.items() if k.startswith("visual.")}
    x = pixels @ w["visual.patch_embed.proj.weight"].reshape(dim, -1).T
    rows, cols, frames = [], [], [0]
    for t, h, wd in grids:
        r = np.arange(h * wd)
        b, j = r // 4, r % 4
        rows += [2 * (b // (wd // 2)) + j // 2] * t
        cols += [2 * (b % (wd // 2)) + j % 2] * t
        frames += [frames[-1] + h * wd * (i + 1) for i in range(t)]
    row, col = np.concatenate(rows), np.concatenate(cols)
    inv = 1.0 / 10000 ** (np.arange(0, hd // 2, 2) / (hd // 2))
    freqs = np.concatenate([np.outer(row, inv), np.outer(col, inv)], -1)
    cos, sin = np.cos(np.concatenate([freqs] * 2, -1)), np.sin(np.concatenate([freqs] * 2, -1))

    def rope(v):
        rotated = np.concatenate([-v[..., hd // 2 :], v[..., : hd // 2]], -1)
        return v * cos[:, None] + rotated * sin[:, None]

    for i in range(vision["depth"]):
        p = f"visual.blocks.{i}."
        y = layer_norm(x, w[p + "norm1.weight"], w[p + "norm1.bias"])
        qkv = (y @ w[p + "attn.qkv.weight"].T + w[p + "attn.qkv.bias"]).reshape(-1, 3, heads, hd)
        q, k, v = rope(qkv[:, 0]), rope(qkv[:, 1]), qkv[:, 2]
        out = np.zeros_like(q)
        for lo, hi in zip(frames[:-1], frames[1:], strict=True):
            s = np.einsum("qhd,khd->hqk", q[lo:hi], k[lo:hi]) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            out[lo:hi] = np.einsum("hqk,khd->qhd", s / s.sum(-1, keepdims=True), v[lo:hi])
        x = x + out.reshape(-1, dim) @ w[p + "attn.proj.weight"].T + w[p + "attn.proj.bias"]
        y = layer_norm(x, w[p + "norm2.weight"], w[p + "norm2.bias"])
        y = y @ w[p + "mlp.fc1.weight"].T + w[p + "mlp.fc1.bias"]
        y = y / (1 + np.exp(-1.702 * y))  # quick GELU
        x = x + y @ w[p + "mlp.fc2.weight"].T + w[p + "mlp.fc2.bias"]
    m = layer_norm(x, w["visual.merger.ln_q.weight"], w["visual.merger.ln_q.bias"])
    m = m.reshape(-1, 4 * dim)
    m = gelu(m @ w["visual.merger.mlp.0.weight"].T + w["visual.merger.mlp.0.bias"])
    return m @ w["visual.merger.mlp.2.weight"].T + w["visual.merger.mlp.2.bias"]


@pytest.fixture(scope="module")
def setup(tiny_qwen2_dir, astronaut, coffee):
    processor = MediaProcessor(ProcessorConfig.from_checkpoint(tiny_qwen2_dir))
    frames = np.stack([coffee[i * 8 : i * 8 + 112, :168] for i in range(4)])
    media = [
        processor.process_image(astronaut[:120, :170], "a"),
        processor.process_video(frames, 2.0, "v"),
    ]
    return load_model(tiny_qwen2_dir, progress=False), processor, media


def test_vision_tower_matches_the_formulas(tiny_qwen2_dir, setup):
    model, processor, media = setup
    patches = np.concatenate([i.patches for m in media for i in m.items])
    grids = [i.grid_thw for m in media for i in m.items]
    with paddle.no_grad():
        got = model.encode_images(paddle.to_tensor(patches), grids).numpy()
    weights = load_file(str(tiny_qwen2_dir / "model.safetensors"))
    config = json.loads((tiny_qwen2_dir / "config.json").read_text())
    expected = reference_vision(
        weights, config, processor.normalize(patches).astype(np.float64), grids
    )
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= 1e-4


def test_video_time_positions_step_by_one(setup):
    _, processor, media = setup
    assert processor.config.tokens_per_second is None
    ids = [1, processor.config.video_token_id, 2]
    _, mm = expand_prompt(ids, media[1:], processor.config)
    t_axis = mm.position_ids[0, 1:-1]
    per_chunk = media[1].items[0].num_tokens
    assert (t_axis[per_chunk:] - t_axis[:-per_chunk] == 1).all()


def test_whole_model_runs_on_images_and_video(setup):
    model, processor, media = setup
    ids = [1, processor.config.image_token_id, 3, processor.config.video_token_id, 4]
    expanded, mm = expand_prompt(ids, media, processor.config)
    patches = np.concatenate([i.patches for m in media for i in m.items])
    with paddle.no_grad():
        features = model.encode_images(
            paddle.to_tensor(patches), [i.grid_thw for m in media for i in m.items]
        )
        logits = model(paddle.to_tensor(expanded), paddle.to_tensor(mm.position_ids), features)
    assert logits.shape == [len(expanded), model.config.vocab_size]
    assert np.isfinite(logits.numpy()).all()
