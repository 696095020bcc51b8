"""onnxviz's bundled files: example models (examples/) and icons (icons/).

This folder is installed as the package ``onnxviz.resources`` (see pyproject.toml); read it
through ``onnxviz.bundled``, which also finds it in a source checkout."""
