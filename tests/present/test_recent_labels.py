"""Recent-file labels (present/recent.py): a file's name, "(missing)" for a file that is
gone, and the folders that tell files of the same name apart."""

from __future__ import annotations

import os

from onnxviz.present.recent import recent_labels


def _p(*parts: str) -> str:
    return os.path.join(os.sep, *parts)


def test_names_alone_when_they_differ_folders_when_they_do_not() -> None:
    paths = [
        _p("work", "a", "models", "llama.onnx"),
        _p("work", "b", "models", "llama.onnx"),
        _p("work", "resnet.onnx"),
        _p("tmp", "c", "llama.onnx"),
    ]
    labels = recent_labels(paths, exists=lambda p: True)
    assert labels == [
        f"llama.onnx — {os.path.join('a', 'models')}",
        f"llama.onnx — {os.path.join('b', 'models')}",
        "resnet.onnx",
        "llama.onnx — c",
    ]


def test_folders_all_of_them_share_are_left_out() -> None:
    """Test runs' temporary folders: only the part that differs, the rest as "…"."""
    paths = [_p("tmp", f"pytest-{n}", "popen-gw0", "test_x", "llama.onnx") for n in (84, 70)]
    assert recent_labels(paths, exists=lambda p: True) == [
        f"llama.onnx — pytest-84{os.sep}…",
        f"llama.onnx — pytest-70{os.sep}…",
    ]


def test_a_missing_file_is_marked_and_the_same_path_twice_shows_its_whole_folder() -> None:
    same = _p("data", "m.onnx")
    labels = recent_labels([same, same, _p("x.onnx")], exists=lambda p: p != same)
    assert labels == [f"m.onnx (missing) — {_p('data')}"] * 2 + ["x.onnx"]


def test_real_files_on_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.onnx").write_bytes(b"")
    paths = [str(tmp_path / "one" / "model.onnx"), str(tmp_path / "two" / "model.onnx")]
    paths.append(str(tmp_path / "gone.onnx"))
    assert recent_labels(paths) == ["model.onnx — one", "model.onnx — two", "gone.onnx (missing)"]
