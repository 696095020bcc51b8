"""Synthetic ONNX-shaped graphs for layout tests and benchmarks.

Shapes follow what exporters produce: node names are name scopes
(``/model/layers.7/self_attn/q_proj/MatMul``), every node lists its inputs in ONNX input
order, Constants and Shape chains feed Reshapes, residual Adds take the skip connection
as one input, and the transformer shares a rotary cache (cos/sin) and an attention mask
across all layers.  No onnx import: the generators only produce names, op types and
edges ``(producer, consumer, output index, input index)``.
"""

from __future__ import annotations

import dataclasses

Port = tuple[int, int]  # (node index, output index)


@dataclasses.dataclass
class SyntheticGraph:
    names: list[str] = dataclasses.field(default_factory=list)
    ops: list[str] = dataclasses.field(default_factory=list)
    edges: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)

    def add(self, name: str, op: str, inputs: list[Port] | tuple[Port, ...] = ()) -> int:
        index = len(self.names)
        self.names.append(name)
        self.ops.append(op)
        for port, (src, out) in enumerate(inputs):
            self.edges.append((src, index, out, port))
        return index

    def __len__(self) -> int:
        return len(self.names)

    def node_size(self, index: int) -> tuple[float, float]:
        return (24.0 + 7.0 * len(self.ops[index]), 36.0)


def resnet(target_nodes: int) -> SyntheticGraph:
    """A ResNet-like chain of basic blocks; Add(main, skip) with the main path input 0."""
    g = SyntheticGraph()
    x = g.add("input", "Input")
    x = g.add("/stem/conv/Conv", "Conv", [(x, 0)])
    x = g.add("/stem/bn/BatchNormalization", "BatchNormalization", [(x, 0)])
    x = g.add("/stem/relu/Relu", "Relu", [(x, 0)])
    x = g.add("/stem/pool/MaxPool", "MaxPool", [(x, 0)])
    block = 0
    while len(g) < target_nodes - 2:
        stage, idx = divmod(block, 4)
        p = f"/layer{stage}/block.{idx}"
        h = g.add(f"{p}/conv1/Conv", "Conv", [(x, 0)])
        h = g.add(f"{p}/bn1/BatchNormalization", "BatchNormalization", [(h, 0)])
        h = g.add(f"{p}/relu1/Relu", "Relu", [(h, 0)])
        h = g.add(f"{p}/conv2/Conv", "Conv", [(h, 0)])
        h = g.add(f"{p}/bn2/BatchNormalization", "BatchNormalization", [(h, 0)])
        skip = x
        if idx == 0:
            skip = g.add(f"{p}/downsample/conv/Conv", "Conv", [(x, 0)])
            skip = g.add(f"{p}/downsample/bn/BatchNormalization", "BatchNormalization", [(skip, 0)])
        s = g.add(f"{p}/Add", "Add", [(h, 0), (skip, 0)])
        x = g.add(f"{p}/relu/Relu", "Relu", [(s, 0)])
        block += 1
    x = g.add("/head/GlobalAveragePool", "GlobalAveragePool", [(x, 0)])
    g.add("/head/fc/Gemm", "Gemm", [(x, 0)])
    return g


def _rms_norm(g: SyntheticGraph, p: str, x: int) -> int:
    two = g.add(f"{p}/Constant", "Constant")
    pw = g.add(f"{p}/Pow", "Pow", [(x, 0), (two, 0)])
    mean = g.add(f"{p}/ReduceMean", "ReduceMean", [(pw, 0)])
    eps = g.add(f"{p}/Constant_1", "Constant")
    add = g.add(f"{p}/Add", "Add", [(mean, 0), (eps, 0)])
    sq = g.add(f"{p}/Sqrt", "Sqrt", [(add, 0)])
    div = g.add(f"{p}/Div", "Div", [(x, 0), (sq, 0)])
    return g.add(f"{p}/Mul", "Mul", [(div, 0)])


def _reshape(g: SyntheticGraph, p: str, x: int, shape_of: int) -> int:
    """x reshaped with a shape computed from ``shape_of`` by a Shape chain."""
    shp = g.add(f"{p}/Shape", "Shape", [(shape_of, 0)])
    idx = g.add(f"{p}/Constant", "Constant")
    gat = g.add(f"{p}/Gather", "Gather", [(shp, 0), (idx, 0)])
    uns = g.add(f"{p}/Unsqueeze", "Unsqueeze", [(gat, 0)])
    c1 = g.add(f"{p}/Constant_1", "Constant")
    c2 = g.add(f"{p}/Constant_2", "Constant")
    cat = g.add(f"{p}/Concat", "Concat", [(uns, 0), (c1, 0), (c2, 0)])
    return g.add(f"{p}/Reshape", "Reshape", [(x, 0), (cat, 0)])


def _rotary(g: SyntheticGraph, p: str, x: int, cos: int, sin: int) -> int:
    m1 = g.add(f"{p}/Mul", "Mul", [(x, 0), (cos, 0)])
    s1 = g.add(f"{p}/Slice", "Slice", [(x, 0)])
    s2 = g.add(f"{p}/Slice_1", "Slice", [(x, 0)])
    neg = g.add(f"{p}/Neg", "Neg", [(s2, 0)])
    cat = g.add(f"{p}/Concat", "Concat", [(neg, 0), (s1, 0)])
    m2 = g.add(f"{p}/Mul_1", "Mul", [(cat, 0), (sin, 0)])
    return g.add(f"{p}/Add", "Add", [(m1, 0), (m2, 0)])


def transformer(target_nodes: int, mask_every_layer: bool = False) -> SyntheticGraph:
    """A Llama-like decoder.  The rotary cos/sin cache feeds every layer; with
    ``mask_every_layer`` the attention mask graph input feeds every layer's score Add
    directly, otherwise a causal-mask chain is built from it once and shared."""
    g = SyntheticGraph()
    ids = g.add("input_ids", "Input")
    mask_in = g.add("attention_mask", "Input")
    pos_ids = g.add("position_ids", "Input")
    x = g.add("/model/embed_tokens/Gather", "Gather", [(ids, 0)])
    if mask_every_layer:
        mask = mask_in
    else:
        m = g.add("/model/Unsqueeze", "Unsqueeze", [(mask_in, 0)])
        m = g.add("/model/Cast", "Cast", [(m, 0)])
        one = g.add("/model/Constant", "Constant")
        m = g.add("/model/Sub", "Sub", [(one, 0), (m, 0)])
        big = g.add("/model/Constant_1", "Constant")
        mask = g.add("/model/Mul", "Mul", [(m, 0), (big, 0)])
    inv = g.add("/model/rotary_emb/Constant", "Constant")
    pe = g.add("/model/rotary_emb/Unsqueeze", "Unsqueeze", [(pos_ids, 0)])
    fr = g.add("/model/rotary_emb/MatMul", "MatMul", [(inv, 0), (pe, 0)])
    emb = g.add("/model/rotary_emb/Concat", "Concat", [(fr, 0), (fr, 0)])
    cos = g.add("/model/rotary_emb/Cos", "Cos", [(emb, 0)])
    sin = g.add("/model/rotary_emb/Sin", "Sin", [(emb, 0)])
    layer = 0
    while len(g) < target_nodes - 12:
        p = f"/model/layers.{layer}"
        h = _rms_norm(g, f"{p}/input_layernorm", x)
        a = f"{p}/self_attn"
        heads = []
        for proj in ("q_proj", "k_proj", "v_proj"):
            mm = g.add(f"{a}/{proj}/MatMul", "MatMul", [(h, 0)])
            r = _reshape(g, f"{a}/{proj}_view", mm, h)
            heads.append(g.add(f"{a}/{proj}_view/Transpose", "Transpose", [(r, 0)]))
        q = _rotary(g, f"{a}/q_rot", heads[0], cos, sin)
        k = _rotary(g, f"{a}/k_rot", heads[1], cos, sin)
        kt = g.add(f"{a}/Transpose", "Transpose", [(k, 0)])
        sc = g.add(f"{a}/MatMul", "MatMul", [(q, 0), (kt, 0)])
        d = g.add(f"{a}/Constant", "Constant")
        sc = g.add(f"{a}/Div", "Div", [(sc, 0), (d, 0)])
        sc = g.add(f"{a}/Add", "Add", [(sc, 0), (mask, 0)])
        sm = g.add(f"{a}/Softmax", "Softmax", [(sc, 0)])
        ctx = g.add(f"{a}/MatMul_1", "MatMul", [(sm, 0), (heads[2], 0)])
        ctx = g.add(f"{a}/Transpose_1", "Transpose", [(ctx, 0)])
        ctx = _reshape(g, f"{a}/out_view", ctx, h)
        o = g.add(f"{a}/o_proj/MatMul", "MatMul", [(ctx, 0)])
        x = g.add(f"{p}/Add", "Add", [(x, 0), (o, 0)])
        h = _rms_norm(g, f"{p}/post_attention_layernorm", x)
        mlp = f"{p}/mlp"
        gate = g.add(f"{mlp}/gate_proj/MatMul", "MatMul", [(h, 0)])
        up = g.add(f"{mlp}/up_proj/MatMul", "MatMul", [(h, 0)])
        sg = g.add(f"{mlp}/act_fn/Sigmoid", "Sigmoid", [(gate, 0)])
        act = g.add(f"{mlp}/act_fn/Mul", "Mul", [(gate, 0), (sg, 0)])
        mul = g.add(f"{mlp}/Mul", "Mul", [(act, 0), (up, 0)])
        down = g.add(f"{mlp}/down_proj/MatMul", "MatMul", [(mul, 0)])
        x = g.add(f"{p}/Add_1", "Add", [(x, 0), (down, 0)])
        layer += 1
    x = _rms_norm(g, "/model/norm", x)
    g.add("/lm_head/MatMul", "MatMul", [(x, 0)])
    return g


GENERATORS = {
    "resnet": resnet,
    "transformer": transformer,
    "transformer_mask": lambda n: transformer(n, mask_every_layer=True),
}
