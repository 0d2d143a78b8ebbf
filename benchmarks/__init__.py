"""Benchmarks run by ``vlm-server bench NAME``; each returns a dict of figures and ratios."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def _ingest(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.ingest import run

    return run(repeat=args.repeat)


BENCHMARKS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "ingest": _ingest,
}
