"""Processor settings come from a checkpoint's JSON files."""

from __future__ import annotations

import json

import pytest

from vision.processor_config import ProcessorConfig
from vision.released_configs import FAMILIES, RELEASED


@pytest.mark.parametrize("family", FAMILIES)
def test_from_checkpoint_reads_both_files(tmp_path, family):
    config, preprocessor = RELEASED[family]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    loaded = ProcessorConfig.from_checkpoint(tmp_path)
    assert loaded == ProcessorConfig.from_dicts(config, preprocessor)
    assert loaded.family == family
    assert loaded.image_resize.min_pixels == preprocessor["min_pixels"]
    assert loaded.image_resize.max_pixels == preprocessor["max_pixels"]


def test_transformers_v5_size_dict_and_video_file(tmp_path):
    config, _ = RELEASED["qwen2_5_vl"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"size": {"shortest_edge": 1000, "longest_edge": 200000}})
    )
    (tmp_path / "video_preprocessor_config.json").write_text(
        json.dumps({"size": {"shortest_edge": 5000, "longest_edge": 90000}, "fps": 1.0})
    )
    loaded = ProcessorConfig.from_checkpoint(tmp_path)
    assert (loaded.image_resize.min_pixels, loaded.image_resize.max_pixels) == (1000, 200000)
    assert loaded.video_resize is not None
    assert (loaded.video_resize.min_pixels, loaded.video_resize.max_pixels) == (5000, 90000)
    assert loaded.frame_sampling is not None and loaded.frame_sampling.fps == 1.0
    assert loaded.tokens_per_second == 2


def test_settings_that_change_outputs_change_the_fingerprint():
    base = ProcessorConfig.from_dicts(*RELEASED["qwen2_vl"])
    config, preprocessor = RELEASED["qwen2_vl"]
    smaller = ProcessorConfig.from_dicts(config, {**preprocessor, "max_pixels": 500_000})
    renormalized = ProcessorConfig.from_dicts(config, {**preprocessor, "image_mean": [0, 0, 0]})
    assert base.fingerprint() != smaller.fingerprint()
    # Patches are uint8: normalization does not change them, so cached items stay valid.
    assert base.fingerprint() == renormalized.fingerprint()


def test_missing_directory_and_unknown_model_type(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        ProcessorConfig.from_checkpoint(tmp_path / "nope")
    with pytest.raises(ValueError, match="unsupported model_type 'llama'"):
        ProcessorConfig.from_dicts({"model_type": "llama"})
