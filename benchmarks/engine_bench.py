"""``vlm-server bench engine``: the engine against paddleformers' ``generate()`` one request at a
time, on a make-tiny PaddleOCR-VL checkpoint (random weights, fixed output lengths), and the
time to first token of a conversation that re-sends the same image every turn."""

from __future__ import annotations

import base64
import io
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from maca_kernels.ops import paddle
from scheduler.contracts import SamplingParams


def _image_url(seed: int) -> str:
    from benchmarks.media_corpus import load_photo

    photos = ("astronaut", "coffee", "chelsea", "rocket")
    photo = np.asarray(load_photo(photos[seed % len(photos)]).convert("RGB"))
    rng = np.random.default_rng(seed)
    y, x = rng.integers(0, 100), rng.integers(0, 100)
    crop = photo[y : y + 200 + 20 * (seed % 3), x : x + 260]
    buf = io.BytesIO()
    Image.fromarray(crop).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _conversation(url: str, text: str) -> list[dict[str, Any]]:
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]
    return [{"role": "user", "content": content}]


def _reference(directory: Path):
    from benchmarks.model_reference import import_paddleformers

    import_paddleformers()
    from paddleformers.transformers.paddleocr_vl.modeling import (
        PaddleOCRVLForConditionalGeneration,
    )

    copy = Path(tempfile.mkdtemp()) / "reference"
    shutil.copytree(directory, copy)
    model = PaddleOCRVLForConditionalGeneration.from_pretrained(
        str(copy), dtype="float32", convert_from_hf=True
    )
    model.config.fuse_rms_norm = False
    model.config.vision_config.fuse_rms_norm = False
    model.eval()
    return model


def released_overrides() -> dict[str, Any]:
    """PaddleOCR-VL's released dimensions (the tokenizer, and so the vocabulary, stays tiny)."""
    from benchmarks.model_bench import PADDLEOCR_VL_RELEASED

    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rope_theta",
        "rope_scaling",
        "vision_config",
    )
    return {key: PADDLEOCR_VL_RELEASED[key] for key in keys}


def run_released(output_tokens: int = 8) -> dict[str, Any]:
    """One page-sized image at PaddleOCR-VL's released dimensions: the engine's whole request
    against paddleformers' ``generate()``."""
    from runner.make_tiny import make_tiny
    from vlm_server.engine import LLM

    directory = make_tiny(
        "paddleocr_vl", Path(tempfile.mkdtemp()) / "released", overrides=released_overrides()
    )
    llm = LLM(directory, kv_cache_memory=512 << 20)
    page = np.random.default_rng(0).integers(0, 256, (560, 392, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(page).save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    conversation = _conversation(url, "OCR:")
    params = SamplingParams(max_tokens=output_tokens, temperature=0.0, ignore_eos=True)
    llm.chat(_conversation(_image_url(1), "warm up"), SamplingParams(max_tokens=1), False)
    start = time.perf_counter()
    out = llm.chat(conversation, params, use_tqdm=False)[0]
    engine_s = time.perf_counter() - start
    reference = _reference(directory)
    engine = llm.engine
    ids, media = engine.tokenize_chat(conversation)
    expanded, mm = engine.ingestor.build_inputs(ids, media)
    patches = mm.items[0].patches
    start = time.perf_counter()
    with paddle.no_grad():
        reference.generate(
            input_ids=paddle.to_tensor([expanded]),
            pixel_values=paddle.to_tensor(
                engine.ingestor.processor.normalize(patches).reshape(-1, 3, 14, 14)
            ),
            image_grid_thw=paddle.to_tensor([list(mm.items[0].grid_thw)], "int64"),
            max_new_tokens=output_tokens,
            min_new_tokens=output_tokens,
            decode_strategy="greedy_search",
            use_cache=True,
        )
    baseline_s = time.perf_counter() - start
    return {
        "dimensions": "released (vocabulary: make-tiny's)",
        "image_tokens": mm.items[0].length,
        "output_tokens": output_tokens,
        "engine_s": round(engine_s, 2),
        "engine_ttft_s": round(out.metrics.ttft, 2),
        "baseline_s": round(baseline_s, 2),
        "speedup": round(baseline_s / engine_s, 2),
    }


def run(requests: int = 32, output_tokens: int = 16, turns: int = 4) -> dict[str, Any]:
    from runner.make_tiny import make_tiny
    from vlm_server.engine import LLM

    directory = make_tiny("paddleocr_vl", Path(tempfile.mkdtemp()) / "paddleocr_vl")
    llm = LLM(directory, max_num_batched_tokens=4096, max_num_seqs=64, kv_cache_memory=256 << 20)
    conversations = [_conversation(_image_url(i), f"OCR: page {i}") for i in range(requests)]
    params = SamplingParams(max_tokens=output_tokens, temperature=0.0, ignore_eos=True)
    llm.chat(conversations[:2], params, use_tqdm=False)  # warm-up (JIT kernels, caches off)

    start = time.perf_counter()
    outputs = llm.chat(conversations, params, use_tqdm=False)
    engine_s = time.perf_counter() - start
    engine_tokens = sum(len(o.outputs[0].token_ids) for o in outputs)

    # paddleformers' generate(), one request at a time, same prompts and lengths
    reference = _reference(directory)
    engine = llm.engine
    baseline_tokens = 0
    start = time.perf_counter()
    with paddle.no_grad():
        for conversation in conversations:
            ids, media = engine.tokenize_chat(conversation)
            expanded, mm = engine.ingestor.build_inputs(ids, media)
            patches = np.concatenate([item.patches for item in mm.items])
            processor = engine.ingestor.processor
            generated, _ = reference.generate(
                input_ids=paddle.to_tensor([expanded]),
                pixel_values=paddle.to_tensor(processor.normalize(patches).reshape(-1, 3, 14, 14)),
                image_grid_thw=paddle.to_tensor([list(i.grid_thw) for i in mm.items], "int64"),
                max_new_tokens=output_tokens,
                min_new_tokens=output_tokens,
                decode_strategy="greedy_search",
                use_cache=True,
            )
            baseline_tokens += int(generated.shape[-1])
    baseline_s = time.perf_counter() - start

    # multi-turn: the same image in every turn; TTFT of later turns relative to the first
    url = _image_url(999)
    history = _conversation(url, "OCR:")
    ttfts = []
    for turn in range(turns):
        out = llm.chat(history, params, use_tqdm=False)[0]
        ttfts.append(out.metrics.ttft)
        history = history + [
            {"role": "assistant", "content": out.outputs[0].text},
            {"role": "user", "content": [{"type": "text", "text": f"And line {turn + 2}?"}]},
        ]
    return {
        "requests": requests,
        "output_tokens_per_request": output_tokens,
        "engine_tokens_per_s": round(engine_tokens / engine_s, 1),
        "engine_requests_per_s": round(requests / engine_s, 2),
        "baseline_tokens_per_s": round(baseline_tokens / baseline_s, 1),
        "baseline_requests_per_s": round(requests / baseline_s, 3),
        "speedup": round((engine_tokens / engine_s) / (baseline_tokens / baseline_s), 1),
        "ttft_s": [round(t, 4) for t in ttfts],
        "repeat_ttft_ratio": round(float(np.mean(ttfts[1:]) / ttfts[0]), 3),
        "baseline": "paddleformers PaddleOCR-VL generate(), one request at a time, same weights",
    }
