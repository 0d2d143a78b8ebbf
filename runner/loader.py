"""Loading Hugging Face-format checkpoints from local directories into our Paddle models.

Weights are read tensor by tensor from memory-mapped safetensors files (sharded with an index,
or single files), renamed from the checkpoint's names (legacy or transformers-v5 layout) to the
model's parameter names, transposed where PyTorch's ``[out, in]`` Linear layout meets Paddle's
``[in, out]``, checked for shape, and cast to the model's dtype. Anything missing, unexpected or
misshapen is one clear error naming the weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from maca_kernels.platform import import_paddle

paddle = import_paddle()

INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """The directory is not a usable checkpoint for this model; the message says why."""


def resolve_model_dir(path: str | Path) -> Path:
    """The checkpoint directory, or a clear error (hub names are not downloaded)."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise CheckpointError(
            f"model path {str(path)!r} is not a local directory. Downloads are not supported: "
            "pass a local Hugging Face-format directory (config.json, *.safetensors, tokenizer "
            "files), or create a test model with `vlm-server make-tiny`."
        )
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"{directory} has no config.json: is it a Hugging Face model?")
    return directory


def safetensors_files(directory: Path) -> list[Path]:
    """The weight files: those named by the shard index, else every ``*.safetensors``."""
    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({directory / name for name in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{index.name} lists shards that do not exist: {missing}")
        return files
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors files in {directory}")
    return files


def iter_checkpoint(directory: Path) -> Iterator[tuple[str, Any]]:
    """``(name, paddle tensor)`` for every weight, one at a time (memory-mapped reads)."""
    from safetensors import safe_open

    for file in safetensors_files(directory):
        with safe_open(str(file), framework="paddle") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, handle.get_tensor(name)


def count_tensors(directory: Path) -> int:
    from safetensors import safe_open

    total = 0
    for file in safetensors_files(directory):
        with safe_open(str(file), framework="paddle") as handle:
            total += len(list(handle.keys()))
    return total


def linear_weight_names(model: Any) -> set[str]:
    """Parameter names of ``paddle.nn.Linear`` weights (stored ``[in, out]`` in Paddle)."""
    names = set()
    for prefix, layer in model.named_sublayers():
        if isinstance(layer, paddle.nn.Linear):
            names.add(f"{prefix}.weight" if prefix else "weight")
    return names


def load_weights(
    model: Any,
    directory: Path,
    rename: Callable[[str], str | None],
    optional: set[str] | None = None,
    progress: bool = True,
) -> None:
    """Fill ``model``'s parameters from the checkpoint in ``directory``.

    ``rename`` maps a checkpoint name to a parameter name (None: a weight this model does not
    know, reported as unexpected; ``""``: a weight the family deliberately ignores). Parameters
    in ``optional`` (e.g. a tied ``lm_head``) may be absent. Raises :class:`CheckpointError`
    listing every missing, unexpected or misshapen weight.
    """
    params = dict(model.named_parameters())
    transposed = linear_weight_names(model)
    loaded: set[str] = set()
    unexpected: list[str] = []
    misshapen: list[str] = []
    bar = tqdm(
        total=count_tensors(directory), desc="loading weights", unit="tensor", disable=not progress
    )
    for name, tensor in iter_checkpoint(directory):
        bar.update(1)
        target = rename(name)
        if target == "":
            continue
        if target is None or target not in params:
            unexpected.append(name)
            continue
        param = params[target]
        if target in transposed and tensor.ndim == 2:
            tensor = tensor.T
        if list(tensor.shape) != list(param.shape):
            misshapen.append(f"{name}: checkpoint {list(tensor.shape)}, model {list(param.shape)}")
            continue
        param.set_value(tensor.astype(param.dtype))
        loaded.add(target)
    bar.close()
    missing = sorted(set(params) - loaded - (optional or set()))
    problems = []
    if missing:
        problems.append(f"missing weights: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected weights: {', '.join(sorted(unexpected))}")
    if misshapen:
        problems.append(f"wrong shapes: {'; '.join(misshapen)}")
    if problems:
        raise CheckpointError(
            f"checkpoint {directory} does not match the model: " + " | ".join(problems)
        )


def save_weights(
    named_tensors: dict[str, Any], directory: Path, max_shard_bytes: int | None = None
) -> list[Path]:
    """Write tensors (already in checkpoint naming and layout) as safetensors, sharded with an
    index when ``max_shard_bytes`` is given."""
    from safetensors.paddle import save_file

    directory.mkdir(parents=True, exist_ok=True)
    if max_shard_bytes is None:
        path = directory / "model.safetensors"
        save_file(named_tensors, str(path), metadata={"format": "pt"})
        return [path]
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, tensor in named_tensors.items():
        nbytes = tensor.numel().item() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    paths, weight_map = [], {}
    for i, shard in enumerate(shards, start=1):
        path = directory / f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(path), metadata={"format": "pt"})
        paths.append(path)
        weight_map.update({name: path.name for name in shard})
    total = sum(t.numel().item() * t.element_size() for t in named_tensors.values())
    (directory / INDEX_FILE).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    return paths
