"""The offline LLM API end to end, for every family's make-tiny checkpoint: greedy tokens equal
the plain model's (one request at a time, no cache), with chunking, prefix and encoder-cache
hits; seeded sampling independent of the batch; aborts; stop strings."""

from __future__ import annotations

import base64
import io

import cv2
import numpy as np
import pytest
from PIL import Image

from maca_kernels.ops import paddle
from runner.make_tiny import make_tiny
from tests.runner.test_model_runner import assert_same_greedy, reference_greedy
from vlm_server import LLM, SamplingParams

MAX_TOKENS = 5


def data_url(pixels: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def video_url(frames: np.ndarray, tmp_path) -> str:
    path = tmp_path / "clip.mp4"
    h, w = frames.shape[1:3]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 8, (w, h))
    for frame in frames:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return "data:video/mp4;base64," + base64.b64encode(path.read_bytes()).decode()


def user(*parts):
    content = []
    for part in parts:
        if isinstance(part, str) and part.startswith("data:image"):
            content.append({"type": "image_url", "image_url": {"url": part}})
        elif isinstance(part, str) and part.startswith("data:video"):
            content.append({"type": "video_url", "video_url": {"url": part}})
        else:
            content.append({"type": "text", "text": part})
    return [{"role": "user", "content": content}]


@pytest.fixture(scope="module", params=["paddleocr_vl", "qwen2_vl", "qwen2_5_vl", "ernie4_5_vl"])
def family_setup(request, tmp_path_factory, astronaut, coffee):
    family = request.param
    directory = make_tiny(family, tmp_path_factory.mktemp("engine") / family)
    llm = LLM(
        directory,
        max_num_batched_tokens=96,
        max_num_seqs=4,
        kv_cache_memory=32 << 20,
        block_size=8,
        max_model_len=1024,
    )
    a, b = data_url(astronaut[:120, :150]), data_url(coffee[:100, :180])
    c = data_url(astronaut[200:290, 100:160])
    conversations = [
        user("Hello there, what can you read?"),
        user(a, "Read the text."),
        user(a, "Read the text.", b),  # shares a prefix and an image with the previous one
        user(b, c, a, "Compare all three."),
    ]
    if llm.engine.processor_config.supports_video:
        frames = np.stack([coffee[i * 4 : i * 4 + 112, :140] for i in range(6)])
        conversations.append(user(video_url(frames, tmp_path_factory.mktemp("video")), "Why?"))
    return family, llm, conversations


def test_greedy_tokens_equal_the_plain_model(family_setup):
    family, llm, conversations = family_setup
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    outputs = llm.chat(conversations, params, use_tqdm=False)
    engine = llm.engine
    with paddle.no_grad():
        for conversation, output in zip(conversations, outputs, strict=True):
            ids, media = engine.tokenize_chat(conversation)
            expanded, mm = engine.ingestor.build_inputs(ids, media) if media else (ids, None)
            assert output.prompt_token_ids == list(expanded)
            margins: list[float] = []
            expected = reference_greedy(engine.model, expanded, mm, MAX_TOKENS, margins)
            assert_same_greedy(output.outputs[0].token_ids, expected, margins, family)
            assert output.outputs[0].finish_reason == "length"
    # the repeated image and the shared prefix were served from caches
    assert any(o.metrics.encoder_cache_hits for o in outputs)
    again = llm.chat(conversations[2], params, use_tqdm=False)[0]
    assert again.metrics.cached_tokens > 0
    assert again.outputs[0].token_ids == outputs[2].outputs[0].token_ids


def test_seeded_sampling_does_not_depend_on_the_batch(family_setup):
    _, llm, conversations = family_setup
    seeded = SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, top_p=0.9, seed=1234)
    alone = llm.chat(conversations[1], seeded, use_tqdm=False)[0].outputs[0].token_ids
    others = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8)
    batch = (
        llm.chat(conversations[:3], [others, seeded, others], use_tqdm=False)[1]
        .outputs[0]
        .token_ids
    )
    assert batch == alone


def test_abort_leaves_the_others_unaffected(family_setup):
    _, llm, conversations = family_setup
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    baseline = [o.outputs[0].token_ids for o in llm.chat(conversations[:3], params, False)]
    engine = llm.engine
    rids = [engine.add_request(*engine.tokenize_chat(c), params) for c in conversations[:3]]
    finished = {}
    engine.step()
    assert engine.abort(rids[1])
    while engine.has_work():
        for output in engine.step():
            finished[output.request_id] = output
    finished.update(
        {o.request_id: o for o in map(engine._finish, engine.scheduler.take_finished())}
    )
    assert finished[rids[0]].outputs[0].token_ids == baseline[0]
    assert finished[rids[2]].outputs[0].token_ids == baseline[2]
    assert engine.scheduler.blocks.num_free_blocks == engine.scheduler.blocks.num_blocks


def test_stop_string_cuts_the_text(family_setup):
    _, llm, conversations = family_setup
    greedy = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    full = llm.chat(conversations[0], greedy, use_tqdm=False)[0].outputs[0]
    if len(full.text) < 3:
        pytest.skip("the random model produced too little text to cut")
    stop = full.text[1:3]
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True, stop=(stop,))
    cut = llm.chat(conversations[0], params, use_tqdm=False)[0].outputs[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(stop)]


def test_preemption_with_a_tiny_kv_pool_keeps_the_tokens(family_setup):
    family, llm, conversations = family_setup
    conversations = conversations[:4]  # text and images (a long video would size the pool)
    generated = 24  # three blocks of growth per request: running requests outgrow the pool
    params = SamplingParams(max_tokens=generated, temperature=0.0, ignore_eos=True)
    roomy = [o.outputs[0].token_ids for o in llm.chat(conversations, params, use_tqdm=False)]
    engine = llm.engine
    lengths = []
    for conversation in conversations:
        ids, media = engine.tokenize_chat(conversation)
        lengths.append(len(engine.ingestor.build_inputs(ids, media)[0]) if media else len(ids))
    config = engine.model.config
    block_bytes = (
        2 * config.num_hidden_layers * 8 * config.num_key_value_heads * config.head_dim * 4
    )
    blocks = -(-(max(lengths) + generated) // 8) + 1  # the longest request fits alone
    tight = LLM(
        engine.model_dir,
        max_num_batched_tokens=96,
        max_num_seqs=4,
        kv_cache_memory=blocks * block_bytes,
        block_size=8,
        max_model_len=1024,
    )
    outputs = tight.chat(conversations, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outputs] == roomy, family
    assert sum(o.metrics.preemptions for o in outputs) > 0
