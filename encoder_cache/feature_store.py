"""Runner-side encoder outputs by ``mm_hash`` (the scheduler's encoder-cache manager decides what
is kept; the store only holds what it is told to)."""

from __future__ import annotations

from typing import Any


class FeatureStore:
    """Encoder features by media hash; ``step_only`` items vanish at :meth:`end_step`."""

    def __init__(self) -> None:
        self._features: dict[str, Any] = {}
        self._step_only: set[str] = set()

    def put(self, mm_hash: str, features: Any, keep: bool = True) -> None:
        self._features[mm_hash] = features
        if not keep:
            self._step_only.add(mm_hash)

    def get(self, mm_hash: str) -> Any:
        try:
            return self._features[mm_hash]
        except KeyError:
            raise KeyError(f"features of {mm_hash} are not in the store") from None

    def __contains__(self, mm_hash: str) -> bool:
        return mm_hash in self._features

    def __len__(self) -> int:
        return len(self._features)

    def drop(self, mm_hashes: list[str]) -> None:
        for mm_hash in mm_hashes:
            self._features.pop(mm_hash, None)

    def end_step(self, freed: list[str]) -> None:
        """Forget the step's uncached items and the hashes the scheduler evicted."""
        self.drop(list(self._step_only))
        self._step_only.clear()
        self.drop(freed)
