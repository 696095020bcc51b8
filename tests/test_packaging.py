"""The installed package carries its resources (not only a checkout does).

The bundled files live in resources/ at the top of the repository; pyproject.toml and
setup.py map them into the wheel as the package onnxviz.resources, and onnxviz.bundled
finds them through importlib.resources there."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile

import onnx
import pytest

from onnxviz import bundled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bundled_examples_are_valid_models():
    examples = bundled.root() / "examples"
    names = sorted(p.name for p in examples.iterdir() if p.name.endswith(".onnx"))
    assert {"small_cnn.onnx", "loop_with_if.onnx", "with_functions.onnx"} <= set(names)
    for name in names:
        onnx.checker.check_model(
            onnx.load_from_string((examples / name).read_bytes()), full_check=True
        )


# Run in a separate interpreter whose path holds the installed wheel and not src/: it
# prints where the package and its files came from, then loads the example and the icon.
_PROBE = textwrap.dedent(
    """
    import sys
    import onnx
    import onnxviz
    from onnxviz import bundled
    from onnxviz.ui.examples import example_names, example_path

    print(onnxviz.__file__)
    print(bundled.root())
    model = onnx.load(example_path())
    print(len(model.graph.node), ",".join(example_names()))
    print(len((bundled.root() / "icons" / "onnxviz.svg").read_bytes()))
    """
)


@pytest.mark.slow
def test_installed_wheel_finds_its_resources(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), ROOT]
    # Without the compiled kernels (ONNXVIZ_BUILD_NATIVE=0): this test is about the wheel's
    # files, and compiling every kernel again took a fresh checkout's run 160-300 s
    # (tests/runtime/test_native.py checks that the install built them).
    quick = {**os.environ, "ONNXVIZ_BUILD_NATIVE": "0"}
    subprocess.run([*pip, *build], check=True, capture_output=True, timeout=300, env=quick)
    (wheel,) = [p for p in os.listdir(wheels) if p.endswith(".whl")]
    with zipfile.ZipFile(wheels / wheel) as zf:
        names = set(zf.namelist())
    assert "onnxviz/resources/examples/small_cnn.onnx" in names
    assert "onnxviz/resources/icons/onnxviz.svg" in names
    assert "onnxviz/cli/main.py" in names
    assert any(n.startswith("onnxviz-") and n.endswith("entry_points.txt") for n in names)

    install = ["install", "--no-deps", "--no-index", "-q", "--target", str(site)]
    subprocess.run([*pip, *install, str(wheels / wheel)], check=True, capture_output=True)
    # PYTHONPATH comes before the venv's own entries (an editable install of this checkout).
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    package_file, resource_root, nodes_and_names, icon_size = out
    assert package_file.startswith(str(site))
    assert resource_root.startswith(str(site / "onnxviz" / "resources"))
    nodes, names_seen = nodes_and_names.split(" ")
    assert int(nodes) > 0 and "small_cnn.onnx" in names_seen.split(",")
    icon = (bundled.root() / "icons" / "onnxviz.svg").read_bytes()
    assert int(icon_size) == len(icon)
