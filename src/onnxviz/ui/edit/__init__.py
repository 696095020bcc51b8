"""Editing in the GUI: the edit controller (validation, autosave, refusals), the
property editors, edit menus, the operator palette, drag wiring and the
Diagnostics dock."""
