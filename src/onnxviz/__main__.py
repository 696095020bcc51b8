"""`python -m onnxviz`: the same program as the `onnxviz` command (cli/main.py)."""

from onnxviz.cli.main import main

raise SystemExit(main())
