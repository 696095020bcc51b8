"""The rule registry: every diagnostic code the validator can emit, with its severity,
family, the IR-spec section it enforces, a one-line description and a default hint.

Codes are stable (docs/architecture.md §4, §9): a code is never reused for another
meaning.  Families: G graph structure, N names and scopes, T types and shapes,
O operators/opsets/attributes, F functions, D tensors and external data (D1xx belong to
the loader; ours are D2xx), M model, I inference, C checker fallback.  Spec sections are anchors of the IR spec
(``IR#graphs``), of the external-data document (``ExternalData#...``) or of the operator
documents (``Operators#<op>`` style anchors are given as ``Operators``).
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxviz.model.diagnostics import Diagnostic, Location, Severity

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO

FAMILIES = {
    "G": "graph structure",
    "N": "names and scopes",
    "T": "types and shapes",
    "O": "operators, opsets and attributes",
    "F": "functions",
    "D": "tensors and external data",
    "M": "model",
    "I": "inference",
    "C": "checker fallback",
}


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    spec: str
    description: str
    hint: str

    @property
    def family(self) -> str:
        return self.code[0]


_TABLE: list[tuple[str, Severity, str, str, str]] = [
    # --- G: graph structure -------------------------------------------------------------
    (
        "G001",
        E,
        "IR#names-within-a-graph",
        "a value name is defined more than once in a graph (SSA)",
        "give each node output a name of its own",
    ),
    (
        "G002",
        E,
        "IR#graphs",
        "a node uses a value produced by a later node (topological order)",
        "move the producing node before its consumers",
    ),
    (
        "G003",
        E,
        "IR#graphs",
        "node dependencies form a cycle",
        "break the cycle: a graph must be acyclic",
    ),
    (
        "G004",
        E,
        "IR#nodes",
        "a node input names a value that is defined nowhere in scope",
        "connect the input to a graph input, an initializer or a node output",
    ),
    (
        "G005",
        E,
        "IR#graphs",
        "a graph output is not produced by any node, input or initializer",
        "produce the output or remove it from the graph outputs",
    ),
    (
        "G006",
        E,
        "IR#optional-inputs-and-outputs",
        "an empty name stands at an input or output that the operator does not make optional",
        "only optional inputs and outputs may be left out with an empty name",
    ),
    (
        "G007",
        E,
        "IR#graphs",
        "a graph input, output, initializer or value_info has an empty name",
        "give the value a name",
    ),
    (
        "G008",
        E,
        "IR#graphs",
        "a main-graph input or output has no type",
        "declare the element type and the shape of every main-graph input and output",
    ),
    (
        "G009",
        E,
        "IR#static-tensor-shapes",
        "a main-graph tensor input or output has no shape (rank)",
        "declare a shape; unknown dimensions can be dim_param names",
    ),
    ("G010", E, "IR#graphs", "a graph has no name", "give the graph a name"),
    # --- N: names and scopes ------------------------------------------------------------
    (
        "N001",
        E,
        "IR#names-within-a-graph",
        "a subgraph input, initializer or node output reuses a name visible from an outer graph (shadowing)",
        "rename the inner value; shadowing is not allowed",
    ),
    (
        "N002",
        E,
        "IR#names-within-a-graph",
        "a name is both a subgraph input and a subgraph initializer (IR >= 4)",
        "drop the initializer or rename one of the two",
    ),
    (
        "N003",
        W,
        "IR#names-within-a-graph",
        "two nodes of the same graph share a name",
        "give each node a unique name (tools locate nodes by name)",
    ),
    (
        "N004",
        I,
        "IR#names-within-a-graph",
        "a value name is not a C90 identifier",
        "most exporters produce such names; rename if a tool needs identifiers",
    ),
    (
        "N005",
        I,
        "IR#static-tensor-shapes",
        "a dimension variable (dim_param) is not a C90 identifier",
        "use identifiers such as 'batch' or 'seq_len' for dimension variables",
    ),
    (
        "N006",
        W,
        "IR#static-tensor-shapes",
        "a dimension uses the abandoned '' or '*' dim_param forms",
        "leave both dim_value and dim_param unset for an unknown dimension",
    ),
    (
        "N007",
        E,
        "IR#graphs",
        "an initializer of the main graph is not a graph input (IR <= 3)",
        "list the initializer among the graph inputs or raise ir_version to 4 or later",
    ),
    # --- O: operators, opsets, attributes -----------------------------------------------
    (
        "N008",
        E,
        "IR#names-within-a-graph",
        "a string field (a name, op type, domain, metadata, doc string) is not UTF-8",
        "the IR spec says strings are UTF-8: re-encode the field",
    ),
    (
        "O001",
        E,
        "IR#operator-sets",
        "a node uses the default (ai.onnx) operator set, which the model does not import",
        "add an opset_import entry for domain ''",
    ),
    (
        "O002",
        E,
        "IR#operators",
        "a node uses a domain that the model does not import",
        "add the domain to opset_import",
    ),
    (
        "O003",
        E,
        "IR#operators",
        "the operator does not exist in the imported version of its domain",
        "check the op_type spelling, the domain and the opset version",
    ),
    (
        "O004",
        I,
        "IR#operators",
        "no schema is known for an operator of a custom domain",
        "the node cannot be checked against a signature",
    ),
    (
        "O005",
        W,
        "IR#operators",
        "the operator is deprecated in the imported opset",
        "replace it with its documented successor",
    ),
    (
        "O006",
        E,
        "IR#variadic-inputs-and-outputs",
        "a node has too few or too many inputs",
        "match the operator signature (optional, variadic and minimum arity)",
    ),
    (
        "O007",
        E,
        "IR#variadic-inputs-and-outputs",
        "a node has too few or too many outputs",
        "match the operator signature (optional, variadic and minimum arity)",
    ),
    (
        "O008",
        E,
        "IR#attributes",
        "a node carries an attribute the operator does not define",
        "remove the attribute or check its spelling",
    ),
    ("O009", E, "IR#attributes", "a required attribute is missing", "set the attribute"),
    (
        "O010",
        E,
        "IR#attributes",
        "an attribute's type differs from the operator schema",
        "store the value in the field the schema expects",
    ),
    (
        "O011",
        E,
        "IR#attributes",
        "an attribute does not hold exactly one value field",
        "an attribute must carry one value (or a ref_attr_name inside a function)",
    ),
    (
        "O012",
        E,
        "IR#attributes",
        "ref_attr_name is used outside a function body",
        "ref_attr_name may only appear inside a FunctionProto",
    ),
    (
        "O013",
        E,
        "IR#functions",
        "ref_attr_name names an attribute the function does not declare",
        "declare the attribute in the function's attribute or attribute_proto list",
    ),
    (
        "O014",
        E,
        "IR#attributes",
        "a node has two attributes with the same name",
        "attribute names are unique per node",
    ),
    (
        "O015",
        W,
        "IR#operator-sets",
        "an imported opset version is newer than the onnx package knows",
        "operators of that opset are checked against the newest known version",
    ),
    ("O016", E, "IR#attributes", "an attribute has no name or no type", "set both name and type"),
    (
        "O017",
        E,
        "IR#operator-set-identifiers",
        "opset_import gives one domain two different versions, or a version below 1",
        "import each domain once with a positive version",
    ),
    (
        "O020",
        W,
        "IR#operator-sets",
        "an op_type of the default domain that ONNX does not define but onnxruntime runs "
        "as an extension",
        "the model runs in onnxruntime only; for other runtimes use a standard decomposition",
    ),
    (
        "O021",
        I,
        "IR#operators",
        "an operator of onnxruntime's own domains (com.microsoft, ...): onnxruntime runs it, "
        "the model is not portable",
        "check with the onnxruntime target to check such nodes against onnxruntime's schemas",
    ),
    (
        "O022",
        E,
        "IR#operators",
        "onnxruntime has no such operator in its domain at the imported opset (onnxruntime target)",
        "check the op_type spelling, the domain and the opset version",
    ),
    (
        "O019",
        W,
        "IR#operator-set-identifiers",
        "opset_import repeats the same (domain, version) entry",
        "drop the repeated entry (the model means the same opset either way)",
    ),
    (
        "O018",
        E,
        "IR#functions",
        "a call to a model-local function has more inputs or outputs than the function",
        "match the function signature",
    ),
    # --- T: types and shapes ------------------------------------------------------------
    (
        "T001",
        E,
        "IR#tensor-element-types",
        "an element type is newer than the model's ir_version",
        "raise ir_version or use an older element type",
    ),
    (
        "T002",
        E,
        "IR#input--output-data-types",
        "a type constructor is newer than the model's ir_version",
        "sequence and map need IR 6, optional and sparse_tensor need IR 8",
    ),
    (
        "T003",
        E,
        "IR#tensor-element-types",
        "a type has no element type or an unknown one",
        "set a valid TensorProto.DataType",
    ),
    (
        "T004",
        E,
        "Operators",
        "an input or output type violates the operator's type constraints",
        "use one of the types the operator allows",
    ),
    (
        "T005",
        E,
        "IR#static-tensor-shapes",
        "a declared type contradicts the inferred one on a graph input or output, or in "
        "its element type or kind of value",
        "fix or remove the declared type",
    ),
    (
        "T009",
        W,
        "IR#static-tensor-shapes",
        "a shape declared in value_info for an intermediate value contradicts the inferred one",
        "fix or remove the value_info entry (inference overrides it)",
    ),
    (
        "T006",
        W,
        "IR#static-tensor-shapes",
        "a dimension variable is bound to different sizes",
        "a dim_param names one size across the whole model",
    ),
    (
        "T007",
        E,
        "IR#graphs",
        "an initializer's type contradicts the graph input of the same name",
        "make the input type match the initializer",
    ),
    (
        "T008",
        E,
        "IR#input--output-data-types",
        "a type has no value (neither tensor, sequence, map, optional nor sparse tensor)",
        "set the type constructor",
    ),
    # --- F: functions ---------------------------------------------------------------------
    (
        "F001",
        E,
        "IR#functions",
        "two model-local functions share (domain, name, overload)",
        "rename one of them or give it an overload",
    ),
    (
        "F002",
        E,
        "IR#functions",
        "a function or a node uses 'overload' with ir_version < 10",
        "raise ir_version to 10 or drop the overload",
    ),
    (
        "F003",
        E,
        "IR#functions",
        "a function uses attribute_proto with ir_version < 9",
        "raise ir_version to 9 or list the attribute in 'attribute'",
    ),
    (
        "F004",
        E,
        "IR#functions",
        "a function uses value_info with ir_version < 10",
        "raise ir_version to 10 or drop the value_info",
    ),
    (
        "F005",
        E,
        "IR#other-metadata",
        "metadata_props on a function, graph or node with ir_version < 10",
        "raise ir_version to 10 or move the metadata to the model",
    ),
    (
        "F006",
        E,
        "IR#functions",
        "a function imports a domain at a version incompatible with the model's",
        "import the same version the model imports",
    ),
    (
        "F007",
        E,
        "IR#functions",
        "functions call each other recursively",
        "a function body must not call itself directly or through other functions",
    ),
    (
        "F008",
        E,
        "IR#functions",
        "an attribute is declared both in 'attribute' and 'attribute_proto'",
        "declare each function attribute once",
    ),
    (
        "F009",
        E,
        "IR#model",
        "model-local functions are used with ir_version < 8",
        "raise ir_version to 8",
    ),
    # --- D: tensors and external data -----------------------------------------------------
    (
        "D201",
        E,
        "IR#tensor-definition",
        "a tensor's data length does not match its dims",
        "the number of stored elements must be the product of the dims",
    ),
    (
        "D202",
        E,
        "IR#representation",
        "a tensor stores data both in raw_data and in a typed field",
        "keep exactly one of them",
    ),
    (
        "D203",
        E,
        "ExternalData",
        "an external tensor has no 'location' entry",
        "add the file name of the data relative to the model",
    ),
    (
        "D204",
        E,
        "ExternalData",
        "an external tensor's offset or length is not a non-negative integer",
        "write offset and length as decimal integers",
    ),
    (
        "D205",
        E,
        "ExternalData",
        "an external data location is absolute or leaves the model's folder",
        "keep external data files next to the model",
    ),
    (
        "D206",
        E,
        "IR#external-tensor-data",
        "an external tensor also stores values in the model",
        "an external tensor must not use the value fields",
    ),
    (
        "D207",
        W,
        "ExternalData",
        "external_data entries on a tensor whose data_location is DEFAULT",
        "set data_location to EXTERNAL or drop the entries",
    ),
    (
        "D208",
        E,
        "IR#tensor-definition",
        "a sparse tensor index is out of range or indices are not increasing",
        "indices must address the dense shape in ascending order",
    ),
    (
        "D209",
        E,
        "IR#tensor-definition",
        "a sparse tensor's values, indices and dims do not fit together",
        "values is 1-D [NNZ]; indices are [NNZ] or [NNZ, rank] int64; dims give the dense shape",
    ),
    (
        "D210",
        E,
        "IR#tensor-element-types",
        "a tensor has no data type or an unknown one",
        "set data_type",
    ),
    (
        "D211",
        E,
        "IR#representation",
        "a string tensor uses raw_data",
        "string tensors carry their values in string_data",
    ),
    (
        "D212",
        W,
        "ExternalData",
        "an external data entry has an unknown key",
        "known keys are location, offset, length and checksum",
    ),
    ("D213", E, "IR#tensor-definition", "a tensor has a negative dimension", "dims must be >= 0"),
    # --- M: model -------------------------------------------------------------------------
    (
        "M001",
        E,
        "IR#onnx-versioning",
        "the model's ir_version is missing or unknown to the onnx package",
        "set ir_version to a published IR version",
    ),
    (
        "M002",
        E,
        "IR#optional-metadata",
        "a metadata_props key appears more than once",
        "metadata keys must be unique",
    ),
    (
        "M003",
        E,
        "IR#training-related-information",
        "a training binding key is not an initializer",
        "bind only initializers of the main graph or of the algorithm graph",
    ),
    (
        "M004",
        E,
        "IR#training-related-information",
        "a training binding value is not an output of its graph",
        "bind to an output of the initialization / algorithm graph",
    ),
    (
        "M005",
        E,
        "IR#training-related-information",
        "a training binding key appears twice",
        "each state variable is bound once",
    ),
    (
        "M006",
        E,
        "IR#training-related-information",
        "training_info is used with ir_version < 7",
        "raise ir_version to 7",
    ),
    (
        "M007",
        E,
        "IR#multi-device-configuration",
        "multi-device configuration is used with ir_version < 11",
        "raise ir_version to 11",
    ),
    (
        "M008",
        E,
        "IR#device-configurations",
        "a device configuration is malformed",
        "name it uniquely, give num_devices > 0 and list num_devices device names if any",
    ),
    (
        "M009",
        E,
        "IR#node-device-configuration",
        "a node's device configuration names no model configuration",
        "configuration_id must be the name of a DeviceConfigurationProto",
    ),
    (
        "M010",
        E,
        "IR#sharding-specification",
        "a sharding spec names a tensor that is not an input or output of the node",
        "tensor_name must be one of the node's inputs or outputs",
    ),
    (
        "M011",
        E,
        "IR#sharding-specification",
        "a sharding spec uses a device outside the configuration",
        "device ids run from 0 to num_devices - 1",
    ),
    (
        "M012",
        E,
        "IR#sharded-dimension",
        "a sharded axis is outside the tensor's rank or num_shards is not positive",
        "axis must be in [-r, r-1] and num_shards > 0",
    ),
    (
        "M013",
        E,
        "IR#nodes",
        "sparse_initializer is used with ir_version < 6",
        "raise ir_version to 6",
    ),
    # --- I: inference ---------------------------------------------------------------------
    (
        "I001",
        E,
        "Operators",
        "type and shape inference fails at a node",
        "the node's inputs or attributes do not fit the operator",
    ),
    (
        "I002",
        E,
        "Operators",
        "type and shape inference fails for the model as a whole",
        "see the message from onnx.shape_inference",
    ),
    (
        "I003",
        W,
        "Operators",
        "onnx.shape_inference fails for a reason of its own (a known gap or a crash), not the model's",
        "a known gap of the onnx package; the model follows the IR spec",
    ),
    # --- C: checker fallback --------------------------------------------------------------
    (
        "C001",
        E,
        "IR",
        "onnx.checker rejects the model for a reason no onnxviz rule reported",
        "a gap in onnxviz's rules; the checker's own message says what is wrong",
    ),
    (
        "C002",
        W,
        "IR",
        "onnx.checker complains about a model that the spec and onnxviz's rules find valid",
        "a known gap of the onnx package; the model follows the IR spec",
    ),
]

RULES: dict[str, Rule] = {
    code: Rule(code, sev, spec, desc, hint) for code, sev, spec, desc, hint in _TABLE
}
assert len(RULES) == len(_TABLE), "duplicate rule code"


def rule(code: str) -> Rule:
    return RULES[code]


def diag(
    code: str,
    message: str,
    graph_path: str = "main",
    *,
    node: str | None = None,
    value: str | None = None,
    attribute: str | None = None,
    field: str | None = None,
    hint: str | None = None,
    severity: Severity | None = None,
) -> Diagnostic:
    """A diagnostic for a registered rule (the registry supplies severity, spec and hint)."""
    r = RULES[code]
    return Diagnostic(
        code=code,
        severity=severity or r.severity,
        message=message,
        location=Location(graph_path, node, value, attribute, field),
        spec=r.spec,
        hint=hint or r.hint,
    )
