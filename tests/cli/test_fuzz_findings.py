"""Mutants the byte-mutation fuzzer (tools/fuzz_mutate.py) found, replayed: each run
ends as the command line promises (exit 0, 1 or 2, a sentence or JSON, no traceback and
no "internal error").  Most hold strings that are not UTF-8, which protobuf hands over as
bytes (sorting them among str names, JSON keys, schema look-ups, canvas titles)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onnxviz.cli.main import main

FOLDER = Path(__file__).resolve().parents[1] / "data" / "fuzz"
FINDINGS = sorted(FOLDER.glob("*.onnx"))


def _verb(path: Path) -> str:
    return path.name.split("-", 1)[0]


def test_the_findings_are_there() -> None:
    assert len(FINDINGS) >= 10
    assert {_verb(p) for p in FINDINGS} >= {"check", "run", "info", "render"}


@pytest.mark.parametrize("path", FINDINGS, ids=[p.stem for p in FINDINGS])
def test_fuzz_finding_ends_cleanly(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verb = _verb(path)
    extra = {
        "info": ["--json"],
        "check": ["--json"],
        "run": ["--random-inputs", "--json"],
        "render": ["-o", str(tmp_path / "out.svg")],
    }[verb]
    code = main([verb, str(path), *extra])
    out, err = capsys.readouterr()
    assert code in (0, 1, 2)
    assert "internal error" not in err and "Traceback" not in err, err[-300:]
    if code == 2:
        assert err.startswith("onnxviz: ") and str(path.name) in err or err.strip()
    elif verb != "render":
        json.loads(out)  # one JSON document, whatever the strings held
