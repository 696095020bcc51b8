"""LLM-scale files through the CLI in bounded memory (issue 19): a 1 GiB single-file
model with embedded weights and a 20 GB, 5,000-node Llama-shaped model with external
data.  The weights are holes in sparse files, so the test costs neither disk nor time to
write; each command runs in its own process, whose peak RSS (with its workers') is
measured by the benchmark's harness (which starts it from a lean launcher, so the test
runner's own RSS is not counted)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from benchmarks.bench_bigmodels import measure, write_llama_external, write_single_file

pytestmark = pytest.mark.slow


def test_one_gib_single_file_opens_and_checks_in_bounded_memory(tmp_path: Path) -> None:
    path = write_single_file(str(tmp_path / "single.onnx"), 2**30, sparse=True)
    assert os.path.getsize(path) > 2**30
    opened = measure("onnxviz open", path)
    assert opened["peak_rss_mb"] < 300, opened
    info = measure("onnxviz info", path)
    assert info["exit"] == 0 and info["peak_rss_mb"] < 300, info
    checked = measure("onnxviz check", path)
    assert checked["exit"] == 0 and checked["peak_rss_mb"] < 400, checked
    assert "no problems found" in checked["tail"]
    with_workers = measure("onnxviz validate (workers' RSS)", path)
    assert with_workers["errors"] == 0 and with_workers["peak_rss_mb"] < 400, with_workers


def test_twenty_gb_llama_with_external_data_opens_and_checks(tmp_path: Path) -> None:
    path = write_llama_external(str(tmp_path), 20.0, 5000)
    assert os.path.getsize(tmp_path / "llama.onnx.data") > 19e9
    opened = measure("onnxviz open + index", path)
    assert opened["peak_rss_mb"] < 300, opened
    checked = measure("onnxviz check --target onnxruntime", path)
    assert checked["exit"] == 0 and checked["peak_rss_mb"] < 300, checked
    with_workers = measure("onnxviz validate (workers' RSS)", path)
    assert with_workers["errors"] == 0 and with_workers["peak_rss_mb"] < 300, with_workers


def test_twenty_gb_llama_is_drawn_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`onnxviz MODEL --screenshot` opens, lays out and draws the 5,000-node model (Qt
    included) under the 300 MB goal: no weight is read to draw it."""
    # The app in the child process keeps its settings (recent files) in the test's
    # folder, not in the user's: each suite run left the model in their recent files.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = write_llama_external(str(tmp_path), 20.0, 5000)
    shot = measure("onnxviz --screenshot", path)
    assert shot["exit"] == 0 and shot["peak_rss_mb"] < 300, shot
    assert (tmp_path / "llama.onnx.png").stat().st_size > 10_000
