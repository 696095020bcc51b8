"""A save killed (SIGKILL) at any point leaves the model and its data file as the old
bytes or the new bytes, never a mix, and no temporary file once the model is opened again
(model.save_commit).  The saving process is killed at the N-th file-system call of the
save (write, fsync, rename, unlink), for every N until the save completes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxviz.model.document import Document
from onnxviz.model.external import MAPPED_FILES
from onnxviz.model.tensors import to_array
from tests.model.builders import matmul_model

_CHILD = r"""
import os, signal, sys
import numpy as np
from onnx import numpy_helper
from onnxviz.model import commands as cmd
from onnxviz.model.document import Document
from onnxviz.model.external import MAPPED_FILES
from onnxviz.model.tensors import to_array
from tests.model.builders import matmul_model

path, kill_at, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
doc = Document.open(path)
new = numpy_helper.from_array(np.full((64, 64), 3.0, np.float32), "w")
doc.execute(cmd.ReplaceInitializer("main", new))
calls = [0]

def counted(fn):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args, **kwargs)
    return call

os.replace, os.fsync, os.unlink = counted(os.replace), counted(os.fsync), counted(os.unlink)
os.write = counted(os.write)
doc.save(path, external_data=mode)
print("saved", calls[0])
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _save_in(folder: Path, mode: str) -> None:
    """The starting point: the model saved by onnxviz in ``mode`` (data file or not)."""
    folder.mkdir()
    onnx.save(matmul_model(), folder / "m.onnx")
    Document.open(str(folder / "m.onnx")).save(str(folder / "m.onnx"), external_data=mode)


def _run_child(folder: Path, kill_at: int, mode: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder / "m.onnx"), str(kill_at), mode],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, -9), done.stderr.decode()[-400:]
    return done.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["external", "embed"])
def test_a_killed_save_leaves_old_or_new_files_never_a_mix(tmp_path: Path, mode: str) -> None:
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    _save_in(old_dir, mode)
    old = _files(old_dir)
    shutil.copytree(old_dir, new_dir)
    assert _run_child(new_dir, 0, mode)  # an uninterrupted save: the new files
    new = _files(new_dir)
    assert new != old and set(new) == set(old)
    outcomes = {"old": 0, "new": 0}
    for kill_at in range(1, 200):
        work = tmp_path / f"k{kill_at}"
        shutil.copytree(old_dir, work)
        if _run_child(work, kill_at, mode):
            break  # the save ran to its end before the N-th call
        doc = Document.open(str(work / "m.onnx"))  # finishes or undoes the save
        after = _files(work)
        assert after in (old, new), f"killed at call {kill_at}: {sorted(after)}"
        outcomes["old" if after == old else "new"] += 1
        # And the model it opened reads whole: its weight is all ones or all threes.
        w = to_array(doc.model.graph.initializer[0], str(work))
        assert set(np.unique(w).tolist()) in ({1.0}, {3.0})
        del doc
        MAPPED_FILES.forget()
        shutil.rmtree(work)
    else:
        pytest.fail("the save never completed")
    assert outcomes["old"] > 0  # kills before the commit point leave the old files
    if mode == "external":
        assert outcomes["new"] > 0  # kills between the renames are finished at open
