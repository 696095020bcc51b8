"""The canvas: `GraphScene` shows a placed `present.Scene` as light graphics items,
`GraphView` zooms and pans it (see docs/architecture.md §7)."""
