"""onnxviz.ui: the Qt application (the only package that imports PySide6).

* `app.run_app` starts the window (`onnxviz [MODEL] [--screenshot OUT.png]`);
* `main_window` glues a Document, a `present.Presenter` and the canvas; `actions` holds
  menus, toolbar and shortcuts; `workers` runs opening, layout and shape inference off
  the UI thread;
* `canvas/`: `scene` (QGraphicsScene of one placed `present.Scene`), `items` (node,
  group, edge items), `lod` (level of detail), `overview` (one-item drawing of big
  graphs when zoomed out), `view` (zoom, pan, keys);
* docks: `docks/properties`, `docks/outline`, `find`, `docks/placeholders`
  (diagnostics and run: extension points for the next issues);
* `export` (SVG, PNG, PDF), `render` (headless, for `onnxviz render`), `theme`,
  `settings` (QSettings), `examples` (bundled models), `start_page`.
"""
