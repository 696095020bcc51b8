"""The files onnxviz ships besides its code: example models and icons.

They live in resources/ at the top of the repository.  An installed wheel carries them as
the package ``onnxviz.resources`` (pyproject.toml / setup.py map resources/ there), found
through importlib.resources, zipped or not.  A source checkout run with only src/ on the
path (``PYTHONPATH=src``, or an editable install that adds src/ to sys.path) has no such
package; the files are then read from resources/ next to src/.
"""

from __future__ import annotations

import atexit
import contextlib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

PACKAGE = "onnxviz.resources"
CHECKOUT = Path(__file__).resolve().parent.parent.parent / "resources"
_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def root() -> Traversable:
    """The folder holding examples/ and icons/."""
    try:
        return resources.files(PACKAGE)
    except ModuleNotFoundError:
        if CHECKOUT.is_dir():
            return CHECKOUT
        raise FileNotFoundError(
            f"onnxviz's bundled files are missing: no package {PACKAGE} (an installed wheel)"
            f" and no folder {CHECKOUT} (a source checkout)"
        ) from None


def as_path(*parts: str) -> str:
    """A file system path to a bundled file (extracted for the process's lifetime when the
    package is zipped)."""
    ref = root().joinpath(*parts)
    return str(_extracted.enter_context(resources.as_file(ref)))
