"""Diagnostic records: problems found in a model, located, never raised.

Both the loader (codes ``L…`` and ``D…``) and the validator (`onnxviz.check`) emit
these, so the type lives in the lowest layer.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Location:
    """Where a problem is.  Every part is optional; `graph_path` uses the Document's
    graph paths (``main``, ``main/body:Loop_3``, ``function:custom:MyFn``)."""

    graph_path: str = "main"
    node: str | None = None
    value: str | None = None
    attribute: str | None = None
    field: str | None = None

    def describe(self) -> str:
        parts = [f"graph '{self.graph_path}'"]
        if self.node is not None:
            parts.append(f"node '{self.node}'")
        if self.value is not None:
            parts.append(f"value '{self.value}'")
        if self.attribute is not None:
            parts.append(f"attribute '{self.attribute}'")
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        return ", ".join(parts)


@dataclass(frozen=True)
class Diagnostic:
    code: str
    severity: Severity
    message: str
    location: Location = field(default_factory=Location)
    spec: str | None = None
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data

    def __str__(self) -> str:
        return f"{self.severity.value} {self.code}: {self.message} [{self.location.describe()}]"
