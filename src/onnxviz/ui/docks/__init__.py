"""Dock widgets of the main window: the outline and the properties panel."""
