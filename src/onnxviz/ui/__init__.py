"""onnxviz.ui: the Qt application (the only package that imports PySide6).

* `app.run_app` starts the window (`onnxviz [MODEL] [--screenshot OUT.png]`);
* `doc_session.DocumentSession` owns the open Document, its Presenter, Validator,
  autosave and run; `controllers/` hold the panels' controllers, each following the
  session's signals; `main_window` only assembles them with the docks, menus and
  status bar; `actions` holds menus, toolbar and shortcuts; `prompter` asks the user
  every question (tests replace it); `workers` runs opening, layout and shape
  inference off the UI thread; `log_file` is where internal errors are logged;
* `canvas/`: `scene` (QGraphicsScene of one placed `present.Scene`), `items` (node,
  group, edge items), `lod` (level of detail), `overview` (one-item drawing of big
  graphs when zoomed out), `view` (zoom, pan, keys);
* docks: `docks/properties`, `docks/outline`, `find`, `edit/diagnostics_dock`,
  `docks/run_dock` (holds `run/`'s panel), `inspector/`;
* `export` (SVG, PNG, PDF), `render` (headless, for `onnxviz render`), `theme`,
  `settings` (QSettings), `examples` (bundled models), `start_page`.
"""
