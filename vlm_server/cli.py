"""The ``vlm-server`` command line: ``serve``, ``bench`` and friends."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchmarks import BENCHMARKS


def default_model_dir() -> Path:
    """The model served when none is given: until the trained default model ships, a random
    make-tiny PaddleOCR-VL created on first start."""
    directory = Path(os.environ.get("VLM_SERVER_CACHE", Path.home() / ".cache" / "vlm-serve"))
    target = directory / "tiny-paddleocr_vl"
    if not (target / "config.json").is_file():
        from runner.make_tiny import make_tiny

        make_tiny("paddleocr_vl", target)
    return target


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from vision.limits import MediaLimits
    from vlm_server.api import ServerConfig, create_app
    from vlm_server.async_engine import AsyncEngine
    from vlm_server.engine import Engine, EngineConfig
    from vlm_server.settings import api_key, log_level

    model = args.model
    if model is None:
        model = default_model_dir()
        print(
            f"vlm-server: no model given; serving the RANDOM test model at {model} "
            "(its answers are noise)",
            file=sys.stderr,
        )
    limits = MediaLimits(
        max_image_pixels=args.max_image_pixels, max_video_frames=args.max_video_frames
    )
    per_prompt = tuple(
        (kind, int(count)) for kind, count in (item.split("=") for item in args.limit_mm_per_prompt)
    )
    config = EngineConfig(
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        kv_cache_memory=args.kv_cache_memory,
        allowed_local_media_path=args.allowed_local_media_path,
        allowed_media_domains=tuple(args.allowed_media_domains or ()),
        limits=limits,
        limit_mm_per_prompt=per_prompt,
    )
    engine = AsyncEngine(Engine(model, config))
    server = ServerConfig(
        api_key=args.api_key or api_key(),
        max_queued_requests=args.max_queued_requests,
        max_request_bytes=args.max_request_bytes,
    )
    app = create_app(engine, args.served_model_name or Path(model).name, server)
    uvicorn.run(app, host=args.host, port=args.port, log_level=log_level())
    engine.close()
    return 0


def _bench(args: argparse.Namespace) -> int:
    result = BENCHMARKS[args.name](args)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0


def _make_tiny(args: argparse.Namespace) -> int:
    from runner.make_tiny import make_tiny

    out = make_tiny(args.arch, args.out, seed=args.seed)
    print(f"wrote a random {args.arch} checkpoint (not a trained model) to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vlm-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a model over HTTP (OpenAI-compatible)")
    serve.add_argument("model", nargs="?", help="local Hugging Face-format model directory")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--served-model-name", help="model id in the API (default: dir name)")
    serve.add_argument("--max-num-batched-tokens", type=int, default=2048)
    serve.add_argument("--max-num-seqs", type=int, default=64)
    serve.add_argument(
        "--kv-cache-memory", type=int, default=None, help="KV cache bytes (default: 30%% free)"
    )
    serve.add_argument("--allowed-local-media-path", help="local media readable below this dir")
    serve.add_argument(
        "--allowed-media-domains", nargs="*", help="domains whose http(s) media may be fetched"
    )
    serve.add_argument("--api-key", help="required bearer key (or VLM_SERVER_API_KEY)")
    serve.add_argument("--max-queued-requests", type=int, default=256)
    serve.add_argument("--max-request-bytes", type=int, default=64 * 1024 * 1024)
    serve.add_argument("--max-image-pixels", type=int, default=64_000_000)
    serve.add_argument("--max-video-frames", type=int, default=768)
    serve.add_argument(
        "--limit-mm-per-prompt",
        nargs="*",
        default=["image=16", "video=2"],
        help="most media per prompt, e.g. image=4 video=1",
    )
    serve.set_defaults(func=_serve)

    bench = commands.add_parser("bench", help="run a benchmark against its baseline")
    bench.add_argument("name", choices=sorted(BENCHMARKS), help="benchmark to run")
    bench.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    bench.add_argument("--repeat", type=int, default=3, help="timed runs per item (best counts)")
    bench.add_argument(
        "--quick", action="store_true", help="a small workload, one run each (smoke test)"
    )
    bench.add_argument(
        "--released",
        action="store_true",
        help="engine: one page at PaddleOCR-VL's released dimensions instead of the tiny model",
    )
    bench.set_defaults(func=_bench)
    tiny = commands.add_parser(
        "make-tiny", help="write a small random checkpoint in the real Hugging Face format"
    )
    tiny.add_argument(
        "--arch",
        required=True,
        choices=["paddleocr_vl", "qwen2_vl", "qwen2_5_vl", "ernie4_5_vl"],
        help="model family",
    )
    tiny.add_argument("--out", required=True, help="output directory")
    tiny.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    tiny.set_defaults(func=_make_tiny)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
