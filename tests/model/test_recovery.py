"""Unsaved edits survive a crash: snapshot, list, restore, discard."""

from __future__ import annotations

import os

from onnxviz.model import commands as c
from onnxviz.model import recovery
from onnxviz.model.document import Document
from tests.model.builders import simple_model, with_external


def test_snapshot_only_while_modified_and_restore_after_crash(tmp_path):
    folder = str(tmp_path / "recovery")
    src = tmp_path / "m.onnx"
    src.write_bytes(simple_model().SerializeToString())
    doc = Document.open(str(src))
    saver = recovery.Autosaver(doc, folder)
    assert saver.save_now() is False and recovery.pending(folder) == []
    doc.rename_value("r", "relu_out")
    assert saver.save_now() is True
    # The process dies here; the next start finds the snapshot.
    (entry,) = recovery.pending(folder)
    assert entry.source == str(src) and entry.last_edit == "Rename 'r' → 'relu_out'"
    restored = entry.restore()
    assert restored.model.SerializeToString() == doc.model.SerializeToString()
    assert restored.is_modified and restored.path == str(src)
    # The original file was never touched.
    assert Document.open(str(src)).model.graph.node[0].output[0] == "r"
    entry.discard()
    assert recovery.pending(folder) == []


def test_clean_save_discards_the_snapshot(tmp_path):
    folder = str(tmp_path / "recovery")
    src = tmp_path / "m.onnx"
    src.write_bytes(simple_model().SerializeToString())
    doc = Document.open(str(src))
    saver = recovery.Autosaver(doc, folder)
    doc.rename_value("r", "q")
    saver.save_now()
    doc.save()
    saver.save_now()  # not modified any more: the snapshot goes away
    assert os.listdir(folder) == []


def test_restored_snapshot_still_reads_external_data(tmp_path):
    path = with_external(str(tmp_path / "m"))
    doc = Document.open(path)
    saver = recovery.Autosaver(doc, str(tmp_path / "rec"))
    doc.rename_value("y", "out")
    saver.save_now()
    restored = recovery.pending(str(tmp_path / "rec"))[0].restore()
    assert restored.diagnostics == []
    assert restored.tensor_array(restored.model.graph.initializer[0]).sum() == 15.0


def test_broken_records_are_ignored(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    (tmp_path / "y.json").write_text('{"source": "a"}')  # no snapshot beside it
    assert recovery.pending(str(tmp_path)) == []


_KILLED_EDITOR = r"""
import os, signal, sys
from onnxviz.model import commands as c
from onnxviz.model import recovery
from onnxviz.model.document import Document

src, folder = sys.argv[1], sys.argv[2]
doc = Document.open(src)
saver = recovery.Autosaver(doc, folder)
doc.rename_value("r", "relu_out")
assert saver.save_now()
sys.stdout.buffer.write(doc.model.SerializeToString())
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)  # the app dies with the edit unsaved
"""


def test_an_editor_killed_with_unsaved_edits_is_restored_byte_for_byte(tmp_path):
    import subprocess
    import sys

    folder = str(tmp_path / "recovery")
    src = tmp_path / "m.onnx"
    original = simple_model().SerializeToString()
    src.write_bytes(original)
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_EDITOR, str(src), folder],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, done.stderr.decode()[-400:]
    edited = done.stdout
    # The next start finds the snapshot; restoring gives the edited model back exactly,
    # and the file on disk is still the original.
    (entry,) = recovery.pending(folder)
    restored = entry.restore()
    assert restored.model.SerializeToString() == edited != original
    assert restored.is_modified and src.read_bytes() == original


def test_a_snapshot_written_in_the_background_is_the_same_and_never_outlives_a_discard(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    """The window writes snapshots from a thread; a clean save or close (discard) waits
    for one in flight, so no stale snapshot is offered after a clean exit."""
    import threading

    from onnxviz.model import recovery as rec

    doc = Document.from_model(simple_model(), str(tmp_path / "m.onnx"))
    doc.execute(c.SetNodeField("main", 0, "name", "edited"))
    folder = str(tmp_path / "rec")
    saver = rec.Autosaver(doc, folder)
    release = threading.Event()
    real = rec._atomic_write

    def slow_write(path, write):  # type: ignore[no-untyped-def]
        release.wait(10)
        return real(path, write)

    errors: list[Exception] = []
    rec._atomic_write = slow_write  # type: ignore[assignment]
    try:
        assert saver.save_in_background(errors.append)
        assert rec.pending(folder) == []  # still being written
        threading.Timer(0.2, release.set).start()
        saver.discard()  # waits for the writer, then removes what it wrote
        assert rec.pending(folder) == []
        release.clear()
        release.set()
        assert saver.save_in_background(errors.append)
        saver.flush()
    finally:
        rec._atomic_write = real  # type: ignore[assignment]
    entries = rec.pending(folder)
    assert errors == [] and len(entries) == 1
    assert entries[0].restore().model.SerializeToString() == doc.model.SerializeToString()
