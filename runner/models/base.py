"""What every family's top-level model shares: embeddings, the (possibly tied) output head,
feature merging and the whole-sequence forward used by parity tests."""

from __future__ import annotations

from typing import Any

from maca_kernels import ops
from runner.models.layers import AttentionBackend, FullSequenceAttention

paddle = ops.paddle
nn = paddle.nn
Tensor = Any


class VisionLanguageModel(nn.Layer):
    """Base of the family models. Subclasses build ``self.model`` (with ``embed_tokens``) and
    ``self.lm_head`` (None when tied), set ``placeholder_ids`` and implement ``encode_images``,
    ``decode``, ``fold_normalization`` and ``checkpoint_name``."""

    placeholder_ids: tuple[int, ...] = ()

    @staticmethod
    def output_head(hidden: int, vocab: int, tied: bool) -> Any:
        return None if tied else nn.Linear(hidden, vocab, bias_attr=False)

    def tied_head_ignored(self, name: str) -> bool:
        """A tied model ignores a stored ``lm_head.weight`` (the embeddings serve as the head)."""
        return name == "lm_head.weight" and self.lm_head is None

    def optional_weights(self) -> set[str]:
        return set()

    def embed(self, input_ids: Tensor) -> Tensor:
        return self.model.embed_tokens(input_ids)

    def decode(self, x: Tensor, position_ids: Tensor, backend: AttentionBackend) -> Tensor:
        raise NotImplementedError

    def run_decoder(
        self, input_ids: Tensor, x: Tensor, position_ids: Tensor, backend: AttentionBackend
    ) -> Tensor:
        """The decoder over a batch of token rows (the runner's uniform entry point)."""
        return self.decode(x, position_ids, backend)

    def logits(self, hidden: Tensor) -> Tensor:
        if self.lm_head is None:
            return paddle.matmul(hidden, self.model.embed_tokens.weight, transpose_y=True)
        return self.lm_head(hidden)

    def forward(
        self, input_ids: Tensor, position_ids: Tensor, features: Tensor | None = None
    ) -> Tensor:
        """Logits ``[N, vocab]`` of one whole sequence (no cache); ``features`` replace the
        media placeholders in order."""
        x = self.embed(input_ids)
        if features is not None:
            ids = paddle.to_tensor(list(self.placeholder_ids), dtype=input_ids.dtype)
            rows = paddle.isin(input_ids, ids).nonzero().flatten()
            x = paddle.scatter(x, rows, features.astype(x.dtype))
        backend = FullSequenceAttention([0, input_ids.shape[0]])
        return self.logits(self.run_decoder(input_ids, x, position_ids, backend))
