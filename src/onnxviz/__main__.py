from onnxviz.cli.main import main

raise SystemExit(main())
