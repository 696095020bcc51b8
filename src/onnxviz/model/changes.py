"""What an edit changed, so views and the validator can refresh only that."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ChangeSet:
    """The effect of one command (or its revert).

    * ``graphs``: paths of graphs whose content changed;
    * ``nodes``: (graph path, node index) of nodes touched;
    * ``names``: (graph path, value name) whose definition, uses or type changed;
    * ``structural``: graphs or functions added/removed, or node indexes shifted
      (paths with ``#index`` labels may have changed: consumers should rebuild);
    * ``model_fields``: opset_import, ir_version, metadata, producer, functions list or
      training_info changed.
    """

    graphs: frozenset[str] = frozenset()
    nodes: frozenset[tuple[str, int]] = frozenset()
    names: frozenset[tuple[str, str]] = frozenset()
    structural: bool = False
    model_fields: bool = False
    # Graphs whose index the command could not update in place: the Document re-indexes them.
    reindex: frozenset[str] = field(default=frozenset(), compare=False)
    # Graphs whose node labels changed (a node renamed) while the rest of their index holds:
    # with ``index_kept`` a structural change (labels are in paths and ids, so consumers
    # rebuild) leaves the Document's index in place but for these graphs' labels.
    relabel: frozenset[str] = field(default=frozenset(), compare=False)
    index_kept: bool = field(default=False, compare=False)

    def merge(self, other: ChangeSet) -> ChangeSet:
        return ChangeSet(
            self.graphs | other.graphs,
            self.nodes | other.nodes,
            self.names | other.names,
            self.structural or other.structural,
            self.model_fields or other.model_fields,
            self.reindex | other.reindex,
            self.relabel | other.relabel,
            # kept only if every structural part kept it
            (self.index_kept or not self.structural) and (other.index_kept or not other.structural),
        )

    @property
    def empty(self) -> bool:
        return not (self.graphs or self.nodes or self.names or self.structural or self.model_fields)
