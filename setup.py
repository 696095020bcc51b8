"""Package list for setuptools: the packages under src/, plus onnxviz.resources (and its
data folders), which pyproject.toml maps to resources/ at the top of the repository:
setuptools' find cannot reach a folder outside src/.

The compiled kernels: every ``src/onnxviz/runtime/native/_<name>.c`` is the extension
module ``onnxviz.runtime.native._<name>`` (it may #include helper files, such as
``levels.h``, the instruction-set levels all share).  They
are optional: a machine without a C compiler installs onnxviz all the same and runs the
numpy paths (onnxviz.runtime.native's docstring); ``ONNXVIZ_BUILD_NATIVE=0`` leaves them
out on purpose.  They compile in parallel, one per core."""

import glob
import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

RESOURCES = ["onnxviz.resources", "onnxviz.resources.examples", "onnxviz.resources.icons"]
NATIVE_DIR = os.path.join("src", "onnxviz", "runtime", "native")

# No -march: the modules pick their instruction sets at run time (target attributes per
# function), so one build runs on every x86-64 CPU.
if sys.platform == "win32":
    COMPILE_ARGS: list[str] = ["/O2"]
else:
    # -g0: Python's own flags (sysconfig's CFLAGS) ask for debug information, which
    # changes no instruction but took gcc a third of the build (_conv.c 44 s against 28).
    COMPILE_ARGS = [
        "-O3",
        "-g0",
        "-std=c11",
        "-fno-strict-aliasing",
        "-Wall",
        "-Wno-unused-function",
    ]


def native_modules() -> list[Extension]:
    # ONNXVIZ_BUILD_NATIVE=0: a pure-Python build (the numpy paths only), for a wheel
    # whose kernels are not wanted: the packaging test checks a wheel's files, and
    # compiling the kernels for it took a fresh checkout's test run 160-300 s.
    if os.environ.get("ONNXVIZ_BUILD_NATIVE", "1") == "0":
        return []
    return [
        Extension(
            "onnxviz.runtime.native." + os.path.basename(path)[:-2],
            [path],
            depends=glob.glob(os.path.join(NATIVE_DIR, "*.h")),  # levels.h: rebuild all
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        )
        for path in sorted(glob.glob(os.path.join(NATIVE_DIR, "_*.c")), key=_build_order)
    ]


# The modules that take longest to compile (gcc -O3, one core: _sgemm 31 s, _conv 30,
# _depthwise 23, _nbits 14, _nbits8 11; the other sixteen 1-7 s each) start first, so the
# parallel build's cores end together: in name order a 2-core build ended on _sgemm alone.
# (Each of them compiles its specialized micro-kernels as functions of their own: inlined
# into one dispatching function, as they were, _conv took 59 s, _depthwise 53 and _sgemm
# 50: gcc's passes grow faster than a function's size.)
_SLOW_FIRST = ("_sgemm.c", "_conv.c", "_depthwise.c", "_nbits.c", "_nbits8.c")


def _build_order(path: str) -> tuple[int, str]:
    name = os.path.basename(path)
    return (_SLOW_FIRST.index(name) if name in _SLOW_FIRST else len(_SLOW_FIRST), name)


class ParallelBuildExt(build_ext):
    """build_ext compiling the kernels on every core (unless --parallel says otherwise):
    one after another they took 150 s of a 2-core CI machine's setup (_sgemm.c and _conv.c
    about 30 s each), and pip's install runs that build on every setup."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


setup(
    packages=[*find_packages("src"), *RESOURCES],
    ext_modules=native_modules(),
    cmdclass={"build_ext": ParallelBuildExt},
)
