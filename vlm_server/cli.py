"""The ``vlm-server`` command line: ``serve``, ``bench`` and friends."""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks import BENCHMARKS


def _serve(args: argparse.Namespace) -> int:
    print(
        "vlm-server serve: the HTTP server is not yet available in this version "
        "(it lands with the engine and server issues).",
        file=sys.stderr,
    )
    return 2


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

    serve = commands.add_parser("serve", help="serve a model over HTTP (not yet available)")
    serve.add_argument("model", nargs="?", help="local Hugging Face-format model directory")
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
