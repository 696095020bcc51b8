"""Dock widgets of the main window: outline, find, properties, run, and how Diagnostics
and Run share the bottom area (each module is named for what it holds)."""
