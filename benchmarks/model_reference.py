"""Calling paddleformers' reference models' sub-parts the way their forward does."""

from __future__ import annotations

import importlib.util
import sys
import types
from functools import cache
from typing import Any

from maca_kernels.ops import paddle


def install_triton_stub() -> None:
    """Register a do-nothing ``triton`` module unless the real one can be imported.

    paddleformers' PaddleOCR-VL imports triton at import time; the stand-in's version is below
    3, so paddleformers reports its triton rope kernel as unavailable and uses plain Paddle.
    """
    if "triton" in sys.modules or importlib.util.find_spec("triton") is not None:
        return
    triton = types.ModuleType("triton")
    triton.__version__ = "0.0.0"
    triton.jit = lambda fn=None, **kwargs: fn if fn is not None else (lambda f: f)
    triton.cdiv = lambda a, b: (a + b - 1) // b
    triton.next_power_of_2 = lambda n: 1 << (int(n) - 1).bit_length()
    language = types.ModuleType("triton.language")
    language.constexpr = object
    triton.language = language
    sys.modules["triton"] = triton
    sys.modules["triton.language"] = language


@cache
def import_paddleformers() -> Any:
    """paddleformers, imported after the kernel layer's CPU setup and the triton stand-in."""
    install_triton_stub()
    import paddleformers

    return paddleformers


def paddleocr_vl_features(model: Any, pixels: Any, grid: Any) -> Any:
    """Vision encoder + projector features of paddleformers' PaddleOCR-VL."""
    f = paddle.nn.functional
    sizes = grid.prod(axis=1)
    cu = f.pad(paddle.cumsum(sizes, axis=0), (1, 0), value=0, data_format="NCL").astype("int32")
    index = paddle.repeat_interleave(paddle.arange(grid.shape[0]), sizes)
    out = model.visual(
        pixel_values=pixels.unsqueeze(0),
        image_grid_thw=grid,
        cu_seqlens=cu,
        sample_indices=index,
        vision_return_embed_list=True,
        interpolate_pos_encoding=True,
        return_pooler_output=False,
        use_rope=True,
        window_size=-1,
    )
    return model.mlp_AR(out.last_hidden_state, grid)
