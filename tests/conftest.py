"""Shared fixtures: real photographs from scikit-image (shipped with the package)."""

from __future__ import annotations

import numpy as np
import pytest


def skimage_rgb(name: str) -> np.ndarray:
    from skimage import data

    array = getattr(data, name)()
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    return np.ascontiguousarray(array[:, :, :3].astype(np.uint8))


@pytest.fixture(scope="session")
def astronaut() -> np.ndarray:
    return skimage_rgb("astronaut")


@pytest.fixture(scope="session")
def coffee() -> np.ndarray:
    return skimage_rgb("coffee")
