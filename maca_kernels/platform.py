"""Platform detection and process setup for the kernel layer.

``prepare_environment()`` must run before the first ``import paddle``: on CPUs it selects MKL's
fast code path on AMD processors and the thread count (Paddle's bundled MKL otherwise takes a
slow generic path, single threaded). Every module that needs paddle gets it through
:func:`import_paddle`, which does this once.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cache
from types import ModuleType

_CPU_ENV = {
    # MKL picks its AVX2 kernels on AMD only when told it runs on an Intel-like CPU type.
    "MKL_DEBUG_CPU_TYPE": "5",
}


def prepare_environment(num_threads: int | None = None) -> None:
    """Set the CPU math-library environment; values the user already set are kept."""
    threads = str(num_threads or os.cpu_count() or 1)
    for key, value in {**_CPU_ENV, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}.items():
        os.environ.setdefault(key, value)
    if "paddle" in sys.modules:
        import warnings

        warnings.warn(
            "paddle was imported before maca_kernels.prepare_environment(): CPU math settings "
            "may not apply (import vlm-serve modules first)",
            stacklevel=2,
        )


@cache
def import_paddle() -> ModuleType:
    """``import paddle`` after :func:`prepare_environment`."""
    prepare_environment()
    import paddle

    return paddle


@dataclass(frozen=True)
class Platform:
    """Where the models run.

    Attributes:
        kind: ``cpu``, ``gpu`` (CUDA) or ``metax`` (MetaX MACA through Paddle's ``metax_gpu``
            custom device).
        device: the string for ``paddle.set_device``.
    """

    kind: str
    device: str

    @property
    def is_accelerator(self) -> bool:
        return self.kind != "cpu"


@cache
def detect_platform(preferred: str | None = None) -> Platform:
    """The best available platform, or ``preferred`` (``cpu``/``gpu``/``metax``) if available."""
    paddle = import_paddle()
    available = {"cpu": Platform("cpu", "cpu")}
    try:
        custom = set(paddle.device.get_all_custom_device_type() or [])
    except Exception:  # noqa: BLE001 - builds without custom-device support
        custom = set()
    if "metax_gpu" in custom:
        available["metax"] = Platform("metax", "metax_gpu:0")
    if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        available["gpu"] = Platform("gpu", "gpu:0")
    if preferred is not None:
        if preferred not in available:
            raise RuntimeError(
                f"platform {preferred!r} is not available here (found: {', '.join(available)})"
            )
        return available[preferred]
    for kind in ("metax", "gpu", "cpu"):
        if kind in available:
            return available[kind]
    raise AssertionError("unreachable")
