"""vlm-serve: a multimodal vision-language-model serving appliance on PaddlePaddle.

``from vlm_server import LLM, SamplingParams`` loads the engine on first use (importing this
package alone stays light: the CLI starts fast).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["LLM", "Engine", "EngineConfig", "SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "SamplingParams":
        from scheduler.contracts import SamplingParams

        return SamplingParams
    if name in ("LLM", "Engine", "EngineConfig"):
        from vlm_server import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'vlm_server' has no attribute {name!r}")
