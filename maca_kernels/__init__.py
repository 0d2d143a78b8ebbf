"""The kernel layer: platform detection and setup, and every hot op behind one interface.

Import :mod:`maca_kernels.platform` (or anything from this package) before paddle: it sets the
CPU math-library environment first.
"""

from maca_kernels.platform import Platform, detect_platform, import_paddle, prepare_environment

__all__ = ["Platform", "detect_platform", "import_paddle", "prepare_environment"]
