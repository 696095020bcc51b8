"""Labels for a list of recent files: each file's name, with as much of its folder as it
takes to tell files of the same name apart ("llama.onnx — a/models", "llama.onnx —
b/models"), and "(missing)" when the file is gone."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence


def _parts(path: str) -> list[str]:
    """The folders of ``path`` from the nearest up (its name excluded)."""
    head = os.path.dirname(os.path.normpath(path))
    parts: list[str] = []
    while head and head != os.path.dirname(head):
        head, tail = os.path.split(head)
        parts.append(tail)
    if head:
        parts.append(head)  # the root ("/", or a drive)
    return parts


def recent_labels(
    paths: Sequence[str], exists: Callable[[str], bool] = os.path.exists
) -> list[str]:
    """One label per path, in order: the file name, " (missing)" for a path ``exists``
    says is gone, then, for names shared by several paths, the folders that tell them
    apart: the fewest nearest ones that make every label distinct, those all of the
    same-named paths share left out as "…" ("llama.onnx — run-84/…" for
    /tmp/run-84/test/llama.onnx beside /tmp/run-70/test/llama.onnx; all of them for
    paths that are the same but for their spelling)."""
    names = [os.path.basename(os.path.normpath(p)) or p for p in paths]
    parts = [_parts(p) for p in paths]
    depth = [0] * len(paths)
    while True:
        keys = [(name, tuple(part[:d])) for name, part, d in zip(names, parts, depth)]
        seen: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        for i, key in enumerate(keys):
            seen.setdefault(key, []).append(i)
        grew = False
        for same in seen.values():
            if len(same) < 2:
                continue
            for i in same:
                if depth[i] < len(parts[i]):
                    depth[i] += 1
                    grew = True
        if not grew:
            break
    labels = []
    for i, path in enumerate(paths):
        label = names[i] + ("" if exists(path) else " (missing)")
        if depth[i]:
            group = [j for j in range(len(paths)) if names[j] == names[i]]
            shared = 0  # nearest folders every path of this name has in common
            while all(
                len(parts[j]) > shared and parts[j][shared] == parts[i][shared] for j in group
            ):
                shared += 1
            if shared >= depth[i]:  # the same folder spelled twice: all of it
                shared = 0
            shown = os.path.join(*reversed(parts[i][shared : depth[i]]))
            label += f" — {shown}{os.sep}…" if shared else f" — {shown}"
        labels.append(label)
    return labels
