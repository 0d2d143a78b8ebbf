"""Checkpoint loading: layouts, sharding, dtypes, and clear errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors import safe_open

from maca_kernels.ops import paddle
from runner.loader import CheckpointError, save_weights
from runner.models import load_model


def read_all(directory):
    tensors = {}
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(str(file), framework="paddle") as handle:
            for name in handle.keys():  # noqa: SIM118
                tensors[name] = handle.get_tensor(name)
    return tensors


def rewrite(src, dst, tensors, max_shard_bytes=None, config_patch=None):
    shutil.copytree(src, dst)
    for f in dst.glob("model*.safetensors"):
        f.unlink()
    save_weights(tensors, dst, max_shard_bytes)
    if config_patch:
        config = json.loads((dst / "config.json").read_text())
        config.update(config_patch)
        (dst / "config.json").write_text(json.dumps(config))
    return dst


def params(model):
    return {name: p.numpy() for name, p in model.named_parameters()}


@pytest.fixture(scope="module")
def reference(tiny_ocr_dir):
    return params(load_model(tiny_ocr_dir, progress=False))


def assert_same(model, reference):
    got = params(model)
    assert got.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_sharded_checkpoint_with_index(tiny_ocr_dir, tmp_path, reference):
    directory = rewrite(tiny_ocr_dir, tmp_path / "sharded", read_all(tiny_ocr_dir), 200_000)
    assert len(list(directory.glob("model-*.safetensors"))) > 3
    assert (directory / "model.safetensors.index.json").is_file()
    assert_same(load_model(directory, progress=False), reference)


def test_transformers_v5_names(tiny_ocr_dir, tmp_path, reference):
    renamed = {}
    for name, tensor in read_all(tiny_ocr_dir).items():
        if name.startswith("visual."):
            name = "model." + name
        elif name.startswith("mlp_AR."):
            name = "model.projector." + name[len("mlp_AR.") :]
        elif name.startswith("model."):
            name = "model.language_model." + name[len("model.") :]
        renamed[name] = tensor
    directory = rewrite(tiny_ocr_dir, tmp_path / "v5", renamed)
    assert_same(load_model(directory, progress=False), reference)


def test_bfloat16_checkpoint_loads_as_float32(tiny_ocr_dir, tmp_path, reference):
    halves = {k: v.astype("bfloat16") for k, v in read_all(tiny_ocr_dir).items()}
    directory = rewrite(tiny_ocr_dir, tmp_path / "bf16", halves)
    model = load_model(directory, progress=False)
    weight = model.model.embed_tokens.weight
    assert weight.dtype == paddle.float32
    expected = paddle.to_tensor(reference["model.embed_tokens.weight"]).astype("bfloat16")
    np.testing.assert_array_equal(weight.numpy(), expected.astype("float32").numpy())


def test_tied_embeddings_use_the_embedding_matrix(tiny_ocr_dir, tmp_path, reference):
    tensors = read_all(tiny_ocr_dir)
    del tensors["lm_head.weight"]
    directory = rewrite(
        tiny_ocr_dir, tmp_path / "tied", tensors, config_patch={"tie_word_embeddings": True}
    )
    model = load_model(directory, progress=False)
    hidden = paddle.to_tensor(np.random.default_rng(0).standard_normal((3, 64)).astype("float32"))
    expected = hidden.numpy() @ reference["model.embed_tokens.weight"].T
    np.testing.assert_allclose(model.logits(hidden).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_missing_weight_is_named(tiny_ocr_dir, tmp_path):
    tensors = read_all(tiny_ocr_dir)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    directory = rewrite(tiny_ocr_dir, tmp_path / "missing", tensors)
    with pytest.raises(CheckpointError, match=r"missing weights: model\.layers\.1\.mlp\.up_proj"):
        load_model(directory, progress=False)


def test_unexpected_weight_is_named(tiny_ocr_dir, tmp_path):
    tensors = read_all(tiny_ocr_dir)
    tensors["model.layers.9.mlp.extra.weight"] = paddle.zeros([2, 2])
    directory = rewrite(tiny_ocr_dir, tmp_path / "unexpected", tensors)
    with pytest.raises(CheckpointError, match=r"unexpected weights: model\.layers\.9\.mlp\.extra"):
        load_model(directory, progress=False)


def test_wrong_shape_is_named(tiny_ocr_dir, tmp_path):
    tensors = read_all(tiny_ocr_dir)
    tensors["model.norm.weight"] = paddle.zeros([65])
    directory = rewrite(tiny_ocr_dir, tmp_path / "shape", tensors)
    with pytest.raises(
        CheckpointError, match=r"model\.norm\.weight: checkpoint \[65\], model \[64\]"
    ):
        load_model(directory, progress=False)


def test_hub_name_is_not_downloaded():
    with pytest.raises(CheckpointError, match="Downloads are not supported"):
        load_model("PaddlePaddle/PaddleOCR-VL")


def test_directory_without_weights(tmp_path, tiny_ocr_dir):
    shutil.copy(tiny_ocr_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="no \\*.safetensors files"):
        load_model(tmp_path)


def test_missing_shard_listed_in_index(tiny_ocr_dir, tmp_path):
    directory = rewrite(tiny_ocr_dir, tmp_path / "broken", read_all(tiny_ocr_dir), 200_000)
    next(directory.glob("model-00002-*.safetensors")).unlink()
    with pytest.raises(CheckpointError, match="shards that do not exist"):
        load_model(directory, progress=False)


def test_save_file_round_trip_keeps_checkpoint_layout(tiny_ocr_dir):
    tensors = read_all(tiny_ocr_dir)
    # PyTorch layout on disk: q_proj is [out, in] = [heads * head_dim, hidden]
    assert list(tensors["model.layers.0.self_attn.q_proj.weight"].shape) == [64, 64]
    assert list(tensors["model.layers.0.self_attn.k_proj.weight"].shape) == [32, 64]
    assert list(tensors["lm_head.weight"].shape)[1] == 64


def test_dtype_policy():
    from runner.models import default_dtype

    assert default_dtype({"torch_dtype": "bfloat16"}, on_accelerator=False) == "float32"
    assert default_dtype({"torch_dtype": "bfloat16"}, on_accelerator=True) == "bfloat16"
    assert default_dtype({"torch_dtype": "float16"}, on_accelerator=True) == "float16"
    assert default_dtype({}, on_accelerator=True) == "bfloat16"
