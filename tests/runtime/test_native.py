"""The compiled-kernel layer (onnxviz.runtime.native): built where it can be, the level
the CPU really has, and ONNXVIZ_NATIVE obeyed."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sysconfig

import pytest

from onnxviz.runtime import native
from tests.runtime.native_modules import can_compile


def test_the_modules_are_built_where_a_compiler_is():
    # setup.py builds them optionally: a silent build failure would leave every user on
    # the numpy paths.  Where this machine can compile, the install must have built them.
    if not can_compile():
        pytest.skip("no C compiler or Python headers here: the numpy paths run")
    assert native.built("cpu")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def test_the_cpu_level_is_what_the_cpu_offers():
    flags = _cpu_flags()
    if not flags or not native.built("cpu"):
        pytest.skip("no /proc/cpuinfo flags (not Linux x86) or _cpu not built")
    # Linux lists a flag only when the OS saves its registers too (as XGETBV says).
    expected = native.GENERIC
    if {"avx2", "fma"} <= flags:
        expected = native.AVX2
        if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
            expected = native.AVX512
            if "avx512_vnni" in flags:
                expected = native.AVX512_VNNI
    assert native.cpu_level() == expected
    assert native.levels() == list(range(expected + 1))


@pytest.mark.parametrize(
    ("raw", "want"),
    [("off", None), ("OFF", None), ("generic", 0), ("0", 0), ("avx2", 1), ("1", 1)],
)
def test_the_environment_caps_the_level(monkeypatch, raw, want):
    monkeypatch.setenv("ONNXVIZ_NATIVE", raw)
    expected = want if want is None else min(want, native.cpu_level())
    assert native.requested_level() == expected


def test_auto_is_the_cpu_level(monkeypatch):
    monkeypatch.delenv("ONNXVIZ_NATIVE", raising=False)
    assert native.requested_level() == native.cpu_level()
    monkeypatch.setenv("ONNXVIZ_NATIVE", "auto")
    assert native.requested_level() == native.cpu_level()


def test_a_wrong_value_says_what_is_accepted(monkeypatch):
    monkeypatch.setenv("ONNXVIZ_NATIVE", "fast")
    with pytest.raises(ValueError, match="ONNXVIZ_NATIVE='fast': expected off, auto"):
        native.requested_level()


def test_off_loads_nothing(monkeypatch):
    monkeypatch.setattr(native, "_LEVEL", None)
    assert native.load("cpu") is None
    assert native.level() is None


def test_a_kept_module_is_still_set_to_the_current_level(monkeypatch):
    """`load` keeps the modules it imported; each call still sets the process's level
    (tests force levels by setting native._LEVEL) and answers None when the kernels are
    off, and a module that is not there is never kept as missing."""
    if not native.built("conv"):
        pytest.skip("_conv was not built here")
    best = native.cpu_level()
    saved = native._LEVEL
    monkeypatch.setattr(native, "_LEVEL", best)  # (ONNXVIZ_NATIVE=off too)
    first = native.load("conv")
    assert first is not None and native.load("conv") is first
    try:
        for level in native.levels():
            monkeypatch.setattr(native, "_LEVEL", level)
            module = native.load("conv")
            assert module is first and module.level() == level
        monkeypatch.setattr(native, "_LEVEL", None)
        assert native.load("conv") is None
    finally:
        first.set_level(best if saved is None else saved)
    monkeypatch.setattr(native, "_LEVEL", best)
    assert native.load("no_such_kernel") is None
    assert "no_such_kernel" not in native._IMPORTED


KERNEL_MODULES = (
    "nbits",
    "nbits8",
    "pointwise",
    "int8",
    "depthwise",
    "activation",
    "resize",
    "channels",
    "topk",
)


@pytest.mark.parametrize("name", KERNEL_MODULES)
def test_no_kernel_module_runs_above_the_cpu_level(name):
    """A level above the CPU's would execute instructions it lacks (the process dies):
    every module refuses it or keeps to the CPU's level, whatever its caller asks."""
    if not native.built(name):
        pytest.skip(f"_{name} was not built here")
    import importlib

    module = importlib.import_module(f"onnxviz.runtime.native._{name}")
    before = module.level()
    best = native.cpu_level()
    try:
        for asked in range(best + 1, 6):
            with contextlib.suppress(ValueError):  # (refused, or kept to the CPU's)
                module.set_level(asked)
            assert module.level() <= best
        module.set_level(best)
        assert module.level() == best
    finally:
        module.set_level(before)


_NATIVE_DIR = os.path.dirname(native.__file__)
_SOURCES = sorted(f for f in os.listdir(_NATIVE_DIR) if f.startswith("_") and f.endswith(".c"))


@pytest.mark.parametrize("source", _SOURCES)
def test_every_module_compiles_where_the_cpu_is_not_x86(source, tmp_path):
    # The wheels' users on ARM (a Mac, a Graviton server) build the modules without the
    # x86 levels: a symbol the portable code reads but only the x86 block defines fails
    # that build, silently (the modules are optional), and leaves the numpy paths there,
    # as _depthwise's MAX_KW and _int8's interleave did.  The module compiled with the
    # x86 predefines taken away after Python's headers, with warnings as errors.
    if not can_compile():
        pytest.skip("no C compiler or Python headers here")
    unit = tmp_path / "portable.c"
    unit.write_text(
        "#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n"
        "#undef __x86_64__\n#undef __i386__\n#undef __SSE2__\n"
        f'#include "{source}"\n'
    )
    include = sysconfig.get_paths()["include"]
    done = subprocess.run(
        [
            "cc",
            "-fsyntax-only",
            "-std=c11",
            "-Wall",
            "-Werror",
            "-Wno-unused-function",
            f"-I{include}",
            f"-I{_NATIVE_DIR}",
            str(unit),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
