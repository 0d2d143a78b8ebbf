"""Benchmarks run by ``vlm-server bench NAME``; each returns a dict of figures and ratios."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def _ingest(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.ingest import run
    from benchmarks.media_corpus import mixed_corpus

    corpus = mixed_corpus()
    if args.quick:
        corpus = [item for item in corpus if "phone" not in item.name][:6]
    return run(repeat=1 if args.quick else args.repeat, corpus=corpus)


def _scheduler(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.scheduler_bench import SIZES, run

    return run(sizes=SIZES[:2] if args.quick else SIZES, steps=5 if args.quick else 50)


def _model(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.model_bench import run

    return run(quick=args.quick, repeat=args.repeat if args.quick else 1)


def _engine(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.engine_bench import run, run_released

    if args.released:
        return run_released()
    if args.quick:
        return run(requests=4, output_tokens=4, turns=3)
    return run()


BENCHMARKS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "ingest": _ingest,
    "scheduler": _scheduler,
    "model": _model,
    "engine": _engine,
}
