"""The real HTTP server on 127.0.0.1 with the real ``openai`` client: chat with image data URLs,
streamed and not, usage counted, errors in OpenAI's shape."""

from __future__ import annotations

import base64
import io
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from PIL import Image

from runner.make_tiny import make_tiny
from vlm_server.api import ServerConfig, create_app
from vlm_server.async_engine import AsyncEngine
from vlm_server.engine import Engine, EngineConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(directory, server_config=None, **engine_args):
    """A real uvicorn server on 127.0.0.1 in a thread; returns (base URL, engine, server,
    thread)."""
    engine = AsyncEngine(
        Engine(
            directory,
            EngineConfig(max_num_batched_tokens=256, kv_cache_memory=32 << 20, **engine_args),
        )
    )
    port = free_port()
    app = create_app(engine, "tiny", server_config)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error")
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    return base, engine, instance, thread


def stop_server(handle):
    _, engine, instance, thread = handle
    instance.should_exit = True
    thread.join(timeout=10)
    engine.close()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny("paddleocr_vl", tmp_path_factory.mktemp("serve") / "tiny")


@pytest.fixture(scope="module")
def server(tiny_dir):
    handle = start_server(tiny_dir)
    yield handle[0], handle[1]
    stop_server(handle)


@pytest.fixture(scope="module")
def image_url(astronaut):
    buf = io.BytesIO()
    Image.fromarray(astronaut[:180, :240]).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def messages(url: str, text: str = "OCR:"):
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": text},
            ],
        }
    ]


def test_chat_with_an_image_through_the_openai_client(server, image_url):
    import openai

    base, _ = server
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
    reply = client.chat.completions.create(
        model="tiny", messages=messages(image_url), max_tokens=6, temperature=0
    )
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens == 6 or reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens > 20  # the image's placeholders are counted
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    again = client.chat.completions.create(
        model="tiny", messages=messages(image_url), max_tokens=6, temperature=0
    )
    assert again.choices[0].message.content == reply.choices[0].message.content


def test_streaming_gives_the_same_text_and_usage(server, image_url):
    import openai

    base, _ = server
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
    plain = client.chat.completions.create(
        model="tiny", messages=messages(image_url, "Read it."), max_tokens=8, temperature=0
    )
    stream = client.chat.completions.create(
        model="tiny",
        messages=messages(image_url, "Read it."),
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == plain.choices[0].message.content
    assert usage.completion_tokens == plain.usage.completion_tokens
    assert finish == plain.choices[0].finish_reason


def test_bad_media_is_a_4xx_and_the_server_keeps_serving(server, image_url):
    base, _ = server
    body = {"model": "tiny", "messages": messages("data:image/png;base64,AAAA"), "max_tokens": 2}
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code in (415, 422)
    error = response.json()["error"]
    assert error["message"] and error["code"] == response.status_code
    ok = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "tiny", "messages": messages(image_url), "max_tokens": 2},
        timeout=60,
    )
    assert ok.status_code == 200


def test_unknown_model_and_bad_body(server):
    base, _ = server
    missing = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"
    empty = httpx.post(f"{base}/v1/chat/completions", json={"model": "tiny"}, timeout=30)
    assert empty.status_code == 400
    assert httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]["id"] == "tiny"


def test_concurrent_requests_are_batched(server, image_url):
    import concurrent.futures

    base, _ = server

    def ask(i: int) -> int:
        body = {
            "model": "tiny",
            "messages": messages(image_url, f"question {i}"),
            "max_tokens": 4,
            "temperature": 0,
        }
        return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(ask, range(8))) == [200] * 8


def test_metrics_are_scraped_and_parsed(server, image_url):
    base, _ = server
    httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "tiny", "messages": messages(image_url), "max_tokens": 3},
        timeout=60,
    )
    text = httpx.get(f"{base}/metrics", timeout=30).text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    assert values["vlm_num_running"] >= 0 and 0 <= values["vlm_kv_usage"] <= 1
    assert values["vlm_time_to_first_token_seconds_count"] >= 1
    assert values['vlm_requests_total{status="ok"}'] >= 1
    assert "vlm_encoder_cache_hit_rate" in values and "vlm_processor_cache_hit_rate" in values
    assert values['vlm_e2e_request_latency_seconds_bucket{le="+Inf"}'] >= 1


def test_api_key_and_limits(tiny_dir, image_url):
    handle = start_server(
        tiny_dir,
        ServerConfig(api_key="secret", max_request_bytes=200_000),
        limit_mm_per_prompt=(("image", 1), ("video", 0)),
    )
    base = handle[0]
    try:
        body = {"model": "tiny", "messages": messages(image_url), "max_tokens": 2}
        assert httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30).status_code == 401
        assert httpx.get(f"{base}/health", timeout=30).status_code == 200  # public
        auth = {"Authorization": "Bearer secret"}
        ok = httpx.post(f"{base}/v1/chat/completions", json=body, headers=auth, timeout=60)
        assert ok.status_code == 200
        two = {"model": "tiny", "messages": messages(image_url) + messages(image_url)}
        many = httpx.post(f"{base}/v1/chat/completions", json=two, headers=auth, timeout=30)
        assert many.status_code == 400 and "at most 1" in many.json()["error"]["message"]
        big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 300_000}]}
        large = httpx.post(f"{base}/v1/chat/completions", json=big, headers=auth, timeout=30)
        assert large.status_code == 413
    finally:
        stop_server(handle)


def test_full_queue_answers_429(tiny_dir, image_url):
    handle = start_server(tiny_dir, ServerConfig(max_queued_requests=0))
    try:
        body = {"model": "tiny", "messages": messages(image_url), "max_tokens": 2}
        busy = httpx.post(f"{handle[0]}/v1/chat/completions", json=body, timeout=30)
        assert busy.status_code == 429 and busy.json()["error"]["type"] == "rate_limit_error"
    finally:
        stop_server(handle)


@pytest.fixture(scope="module")
def png_bytes(image_url):
    return base64.b64decode(image_url.split(",", 1)[1])


def test_multipart_chat_with_an_attachment(server, image_url, png_bytes):
    import json

    base, _ = server
    request = {
        "model": "tiny",
        "messages": messages("attachment://scan"),
        "max_tokens": 4,
        "temperature": 0,
    }
    multipart = httpx.post(
        f"{base}/v1/chat/completions",
        data={"request": json.dumps(request)},
        files={"scan": ("scan.png", png_bytes, "image/png")},
        timeout=60,
    )
    inline = httpx.post(
        f"{base}/v1/chat/completions",
        json={**request, "messages": messages(image_url)},
        timeout=60,
    )
    assert multipart.status_code == 200 and inline.status_code == 200
    assert (
        multipart.json()["choices"][0]["message"]["content"]
        == inline.json()["choices"][0]["message"]["content"]
    )
    missing = httpx.post(
        f"{base}/v1/chat/completions",
        data={"request": json.dumps({**request, "messages": messages("attachment://nope")})},
        files={"scan": ("scan.png", png_bytes, "image/png")},
        timeout=60,
    )
    assert missing.status_code == 400 and "nope" in missing.json()["error"]["message"]


def test_generate_endpoint_and_ocr_pages(server, png_bytes, coffee):
    base, _ = server
    reply = httpx.post(
        f"{base}/v1/generate",
        data={"prompt": "OCR:", "max_tokens": "3", "temperature": "0"},
        files=[("image", ("a.png", png_bytes, "image/png"))],
        timeout=60,
    )
    assert reply.status_code == 200
    assert reply.json()["usage"]["completion_tokens"] <= 3
    buf = io.BytesIO()
    Image.fromarray(coffee[:160, :220]).save(buf, "JPEG")
    pages = [
        ("page", ("1.png", png_bytes, "image/png")),
        ("page", ("2.jpg", buf.getvalue(), "image/jpeg")),
    ]
    ocr = httpx.post(
        f"{base}/v1/ocr", data={"task": "table", "max_tokens": "3"}, files=pages, timeout=120
    )
    assert ocr.status_code == 200
    body = ocr.json()
    assert body["task"] == "table" and [p["page"] for p in body["pages"]] == [0, 1]
    bad = httpx.post(f"{base}/v1/ocr", data={"task": "poem"}, files=pages[:1], timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "task"


def test_ocr_renders_pdf_pages(server, astronaut, coffee):
    base, _ = server
    images = [Image.fromarray(astronaut[:200, :150]), Image.fromarray(coffee[:180, :240])]
    buf = io.BytesIO()
    images[0].save(buf, "PDF", save_all=True, append_images=images[1:])
    reply = httpx.post(
        f"{base}/v1/ocr",
        data={"max_tokens": "2"},
        files=[("page", ("doc.pdf", buf.getvalue(), "application/pdf"))],
        timeout=120,
    )
    assert reply.status_code == 200
    assert [p["page"] for p in reply.json()["pages"]] == [0, 1]
    broken = httpx.post(
        f"{base}/v1/ocr",
        files=[("page", ("bad.pdf", b"%PDF-1.4 nonsense", "application/pdf"))],
        timeout=60,
    )
    assert broken.status_code == 422
