"""The installed ``vlm-server`` console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def vlm_server() -> list[str]:
    exe = shutil.which("vlm-server", path=str(Path(sys.executable).parent))
    assert exe, "the vlm-server console script is not installed in this environment"
    return [exe]


def test_bench_ingest_json_last_line():
    done = subprocess.run(
        [*vlm_server(), "bench", "ingest", "--json", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("ours_images_per_s", "reference_images_per_s", "speedup", "hit_speedup"):
        assert result[key] > 0
    assert result["images"] == 6
    assert result["max_abs_diff"] <= 1e-5


def test_bench_scheduler_json_last_line():
    done = subprocess.run(
        [*vlm_server(), "bench", "scheduler", "--json", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["us_per_step"]) == {"16", "64"}
    assert all(value > 0 for value in result["us_per_step"].values())
    assert all(value > 0 for value in result["us_per_token"].values())


def test_bench_model_quick_json_last_line():
    done = subprocess.run(
        [*vlm_server(), "bench", "model", "--json", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ocr = result["paddleocr_vl"]
    for stage in ("vision", "prefill", "decode_step"):
        assert ocr[f"ours_{stage}_s"] > 0 and ocr[f"reference_{stage}_s"] > 0
        assert ocr[f"{stage}_speedup"] > 0
    assert ocr["image_tokens"] == 280
    for family in ("qwen2_5_vl", "ernie4_5_vl"):
        assert result[family]["vision_speedup"] > 0


def test_bench_engine_quick_json_last_line():
    done = subprocess.run(
        [*vlm_server(), "bench", "engine", "--json", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("engine_tokens_per_s", "baseline_tokens_per_s", "speedup", "repeat_ttft_ratio"):
        assert result[key] > 0
    assert result["requests"] == 4 and len(result["ttft_s"]) == 3


def test_serve_help_lists_the_server_options():
    done = subprocess.run([*vlm_server(), "serve", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for flag in ("--port", "--max-num-batched-tokens", "--allowed-local-media-path"):
        assert flag in done.stdout


@pytest.mark.parametrize("argv", [["bench", "nope"], []])
def test_bad_arguments_exit_with_usage(argv):
    done = subprocess.run([*vlm_server(), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "usage:" in done.stderr
