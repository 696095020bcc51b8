"""Diff one pair of graphs: match their nodes (matching.py), map their values, compare
every matched pair (attributes, input wiring, declared types, weights), find fused
groups (groups.py), and recurse into the subgraphs of matched nodes, so a change inside
a Loop body shows on the Loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from operator import and_, attrgetter, is_not, itemgetter

import numpy as np
from onnx import AttributeProto, TensorProto, ValueInfoProto, helper

from onnxviz.model.diff.bulk import Flat
from onnxviz.model.diff.groups import find_groups
from onnxviz.model.diff.index import GraphIndex, LiteNode, index_graph, subgraph_attrs
from onnxviz.model.diff.matching import Matcher, _op
from onnxviz.model.diff.results import Detail, GraphDiff, NodeChange, NodeRef, TensorDiff
from onnxviz.model.diff.weights import compare_arrays, compare_tensors, dequantized
from onnxviz.model.tensors import to_array
from onnxviz.model.text import as_text

_TEXT_LIMIT = 120
_INPUT = attrgetter("input")
_OUTPUT = attrgetter("output")


def _attr_text(attr: AttributeProto) -> str:
    try:
        value = helper.get_attribute_value(attr)
    except Exception:
        return "?"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif hasattr(value, "dims") and hasattr(value, "data_type"):
        from onnxviz.model.tensors import describe_tensor

        return describe_tensor(value)
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


def _type_text(vi: ValueInfoProto | None) -> str:
    if vi is None or not vi.HasField("type"):
        return ""
    try:
        from onnxviz.model.types import type_to_text

        return type_to_text(vi.type)
    except Exception:
        return "?"


class GraphDiffer:
    def __init__(
        self,
        a: GraphIndex,
        b: GraphIndex,
        base_a: str | None,
        base_b: str | None,
        outer_map: Mapping[str, str],
        anchors: Sequence[tuple[str, str]] = (),
        compare_values: bool = True,
    ) -> None:
        self.a, self.b = a, b
        self.base_a, self.base_b = base_a, base_b
        self.outer_map = outer_map
        self.anchors = anchors
        self.compare_values = compare_values
        self.result = GraphDiff(a.path, b.path)
        self._tensor_pairs: dict[str, str] = {}
        self._tensor_owner: dict[str, int] = {}  # initializer of a -> node that reads it
        self._matched_a: set[int] = set()
        self._matched_b_set: set[int] = set()
        self.value_map: dict[str, str] = {}

    def ref_a(self, i: int) -> NodeRef:
        return NodeRef(self.a.path, self.a.labels[i], self.a.nodes[i].op_type, i)

    def ref_b(self, i: int) -> NodeRef:
        return NodeRef(self.b.path, self.b.labels[i], self.b.nodes[i].op_type, i)

    def run(self) -> GraphDiff:
        a, b = self.a, self.b
        matcher = Matcher(a, b, self.outer_map, self.anchors)
        matches = matcher.run()
        self._sig_a, self._sig_b = matcher.sig_a, matcher.sig_b
        self._nested_a = set(matcher.nested_a)
        self._map_values(matches)
        ias, ibs, ins = self._inputs
        wired = ins.agrees(self.value_map)
        plain = not a.alias and not b.alias
        groups = find_groups(
            a,
            b,
            matches,
            self.value_map,
            self._pair_differs,
            # pairs whose every input corresponds: nothing to group behind them
            set(compress(ias, wired.tolist())) if plain else set(),
        )
        for ga, _gb in groups:
            for ia in ga:
                matches.pop(ia, None)
        grouped_a = {i for ga, _ in groups for i in ga}
        grouped_b = {i for _, gb in groups for i in gb}
        matched_b = set(matches.values())
        res = self.result
        in_order = sorted(matches)  # (ints sort faster than pairs)
        res.matches = list(zip(in_order, map(matches.__getitem__, in_order)))
        self._matched_a = set(matches)
        self._matched_b_set = matched_b
        from onnxviz.model.diff.results import FusedGroup

        res.fused = [
            FusedGroup([self.ref_a(i) for i in sorted(ga)], [self.ref_b(i) for i in sorted(gb)])
            for ga, gb in groups
        ]
        res.removed = [
            self.ref_a(i)
            for i in range(len(a.nodes))
            if i not in matches and i not in grouped_a and i not in a.qdq_nodes
        ]
        res.added = [
            self.ref_b(i)
            for i in range(len(b.nodes))
            if i not in matched_b and i not in grouped_b and i not in b.qdq_nodes
        ]
        res.value_map = self.value_map
        if groups:  # their outputs now map: the wiring of the pairs behind them changed
            wired = ins.agrees(self.value_map)
        for ia, ib in self._unequal(ias, ibs, wired, matches):
            details = self._compare_nodes(ia, ib)
            if details:
                res.changed.append(NodeChange(self.ref_a(ia), self.ref_b(ib), details))
        res.io = self._compare_io()
        if self.compare_values:
            for name_a, name_b in self._tensor_pairs.items():
                if self._tensor_owner.get(name_a) in grouped_a and name_a != name_b:
                    continue  # a folded weight: the fused group tells it
                res.weights.append(self._compare_weight(name_a, name_b))
        return res

    def _compare_weight(self, name_a: str, name_b: str) -> TensorDiff:
        ta, tb = self.a.initializers[name_a], self.b.initializers[name_b]
        out = compare_tensors(ta, self.base_a, tb, self.base_b, self.a.path)
        if not self.a.qdq_nodes and not self.b.qdq_nodes:
            return out
        qa, qb = self._quantization(self.a, name_a), self._quantization(self.b, name_b)
        if qa is None and qb is None:
            return out
        try:
            va = dequantized(ta, *qa, self.base_a) if qa else to_array(ta, self.base_a)
            vb = dequantized(tb, *qb, self.base_b) if qb else to_array(tb, self.base_b)
            out = compare_arrays(
                TensorDiff(
                    name_a, name_b, self.a.path, out.dtype_a, out.dtype_b, out.shape_a, out.shape_b
                ),
                np.asarray(va, np.float64),
                np.asarray(vb, np.float64),
            )
            out.note = "compared dequantized"
        except Exception as exc:
            out.note = f"quantized values not compared: {getattr(exc, 'message', exc)}"
        return out

    @staticmethod
    def _quantization(
        g: GraphIndex, weight: str
    ) -> tuple[TensorProto, TensorProto | None, int] | None:
        """(scale, zero point, axis) of the DequantizeLinear that reads ``weight``."""
        for ci, _ in g.consumers.get(weight, ()):
            node = g.nodes[ci]
            if ci in g.qdq_nodes and node.op_type == "DequantizeLinear" and len(node.input) >= 2:
                scale = g.initializers.get(node.input[1])
                zp = g.initializers.get(node.input[2]) if len(node.input) > 2 else None
                if scale is None:
                    return None
                axis = next((int(x.i) for x in node.attribute if x.name == "axis"), 1)
                return scale, zp, axis
        return None

    # -- values ------------------------------------------------------------------------
    def _map_values(self, matches: dict[int, int]) -> None:
        a, b = self.a, self.b
        vmap: dict[str, str] = {}
        self.value_map = vmap
        for name, other in self.outer_map.items():
            if not a.defined_here(name):
                vmap[name] = other
        ins_a = [n for n in a.input_names if n not in a.initializers]
        ins_b = [n for n in b.input_names if n not in b.initializers]
        set_b = set(ins_b)
        for pos, name in enumerate(ins_a):
            if name in set_b:
                vmap[name] = name
            elif pos < len(ins_b) and ins_b[pos] not in vmap.values():
                vmap[name] = ins_b[pos]
        for name in a.initializers:
            if name in b.initializers:
                vmap[name] = name
        nodes_a, nodes_b = a.nodes, b.nodes
        weights_a, weights_b = a.weights, b.weights
        pairs, owner = self._tensor_pairs, self._tensor_owner
        # In A's node order, so that the first reader of a shared weight is the same
        # whatever order the pairs were matched in (that follows hash values).
        ias = sorted(matches)
        ibs = [matches[i] for i in ias]
        # Outputs of all the pairs at once (`bulk`); pairs whose output counts differ
        # map the slots they share, one by one.
        pa = [nodes_a[i] for i in ias] if len(ias) < 2 else list(itemgetter(*ias)(nodes_a))
        pb = [nodes_b[i] for i in ibs] if len(ibs) < 2 else list(itemgetter(*ibs)(nodes_b))
        outs = Flat(list(map(_OUTPUT, pa)), list(map(_OUTPUT, pb)))
        if "" in outs.a or "" in outs.b:  # an optional output left out
            vmap.update((oa, ob) for oa, ob in zip(outs.a, outs.b) if oa and ob)
        else:
            vmap.update(zip(outs.a, outs.b))
        for k in np.flatnonzero(~outs.same_len).tolist():
            na, nb = nodes_a[ias[k]], nodes_b[ibs[k]]
            vmap.update((oa, ob) for oa, ob in zip(na.output, nb.output) if oa and ob)
        self._outputs = outs
        ins = Flat(list(map(_INPUT, pa)), list(map(_INPUT, pb)))
        del pa, pb
        self._inputs = (ias, ibs, ins)
        if not weights_a or not weights_b:
            return
        hits = ins.hits(weights_a.get)
        owners = ins.pair_of[[k for k, _ in hits]].tolist() if hits else []
        found: list[tuple[str, str, int, TensorProto]] = [
            (ins.a[k], ins.b[k], ias[p], wa) for (k, wa), p in zip(hits, owners)
        ]
        for k in np.flatnonzero(~ins.same_len).tolist():
            na, nb = nodes_a[ias[k]], nodes_b[ibs[k]]
            found += [
                (xa, xb, ias[k], wa)
                for xa, xb in zip(na.input, nb.input)
                if (wa := weights_a.get(xa)) is not None
            ]
        done: set[str] = set()  # a shared weight is read by many nodes: first one counts
        for xa, xb, ia, wa in found:
            if xa in done:
                continue
            wb = weights_b.get(xb)
            if wb is not None:
                done.add(xa)
                vmap.setdefault(a.real(xa), b.real(xb))
                name_a = wa.name if type(wa.name) is str else as_text(wa.name)
                if name_a not in pairs:
                    pairs[name_a] = as_text(wb.name)
                    owner[name_a] = ia
        for name in a.initializers:
            if name in b.initializers:
                self._tensor_pairs.setdefault(name, name)
        self.value_map = vmap

    # -- node pairs --------------------------------------------------------------------
    def _pair_differs(self, ia: int, ib: int) -> bool:
        """Cheap: does a matched pair differ in attributes, input count or weights?
        (Used to decide whether a changed node next to inserted ones was fused.)"""
        na, nb = self.a.nodes[ia], self.b.nodes[ib]
        if len(na.input) != len(nb.input):
            return True
        from onnxviz.model.diff.matching import attribute_signature

        if attribute_signature(na) != attribute_signature(nb):
            return True
        for xa, xb in zip(na.input, nb.input):
            wa, wb = self.a.is_weight(xa), self.b.is_weight(xb)
            if wa is not None and wb is not None:
                if wa.data_type != wb.data_type or list(wa.dims) != list(wb.dims):
                    return True
                if wa.HasField("raw_data") and wb.HasField("raw_data"):
                    if len(wa.raw_data) < (16 << 20) and wa.raw_data != wb.raw_data:
                        return True
                elif wa.SerializeToString() != wb.SerializeToString() and not (
                    wa.data_location or wb.data_location
                ):
                    return True
        return False

    def _unequal(
        self, ias: list[int], ibs: list[int], wired: np.ndarray, matches: dict[int, int]
    ) -> list[tuple[int, int]]:
        """The matched pairs (sorted) that may differ: all but those with the same op
        and attributes (their hashes), every input the counterpart of the other's, as
        many outputs, and no declared output types to compare."""
        a, b = self.a, self.b
        if a.alias or b.alias:  # Q/DQ looked through: every pair the long way
            return list(self.result.matches)
        sig_a = np.array(self._sig_a, np.int64)[ias]
        sig_b = np.array(self._sig_b, np.int64)[ibs]
        outs = self._outputs
        same = wired & (sig_a == sig_b) & outs.same_len
        if a.types and b.types:
            # Declared output types: the pairs where both sides declare one and the
            # two differ as protobuf take the long way.
            ta = list(map(a.types.get, outs.a))
            tb = list(map(b.types.get, outs.b))
            both = compress(
                range(len(ta)),
                map(and_, map(is_not, ta, repeat(None)), map(is_not, tb, repeat(None))),
            )
            differ = [k for k in both if ta[k].type != tb[k].type]  # type: ignore[union-attr]
            same[outs.pair_of[differ]] = False
        skip = set(compress(ias, same.tolist()))
        return [(ia, ib) for ia, ib in self.result.matches if ia not in skip and ia in matches]

    def _compare_nodes(self, ia: int, ib: int) -> list[Detail]:
        a, b = self.a, self.b
        na, nb = a.nodes[ia], b.nodes[ib]
        details: list[Detail] = []
        if _op(na) != _op(nb):
            details.append(
                Detail("op", "op_type", f"{na.domain}::{na.op_type}", f"{nb.domain}::{nb.op_type}")
            )
        details += self._compare_attributes(na, nb)
        if len(na.input) != len(nb.input):
            details.append(Detail("input_count", "inputs", str(len(na.input)), str(len(nb.input))))
        for k, (xa, xb) in enumerate(zip(na.input, nb.input)):
            ra, rb = a.real(xa), b.real(xb)
            if not ra and not rb:
                continue
            if (not ra) != (not rb):
                details.append(Detail("input", f"input {k}", ra or "(none)", rb or "(none)"))
                continue
            wa, wb = a.is_weight(xa), b.is_weight(xb)
            if wa is not None and wb is not None:
                continue  # weights: compared as values
            expected = self.value_map.get(ra)
            if expected == rb:
                continue
            if expected is None and ra == rb and ra not in a.producer and rb not in b.producer:
                continue  # the same name defined nowhere (a broken model) on both sides
            if (
                expected is None
                and not self._explained(a, ra)
                and not self._explained(b, rb)
                or expected is not None
                and self._is_matched_b(rb)
            ):
                details.append(Detail("input", f"input {k}", ra, rb))
        if len(na.output) != len(nb.output):
            details.append(
                Detail("output_count", "outputs", str(len(na.output)), str(len(nb.output)))
            )
        for k, (oa, ob) in enumerate(zip(na.output, nb.output)):
            ta, tb = _type_text(a.types.get(oa)), _type_text(b.types.get(ob))
            if ta and tb and ta != tb:
                details.append(Detail("type", f"output {k}", ta, tb))
        return details

    def _explained(self, g: GraphIndex, name: str) -> bool:
        """The value comes from a node with no counterpart (added, removed or fused):
        the difference is told there, not as a rewiring of every consumer."""
        p = g.producer.get(name)
        if p is None:
            return False
        matched = self._matched_a if g is self.a else self._matched_b_set
        return p[0] not in matched

    def _is_matched_b(self, name: str) -> bool:
        p = self.b.producer.get(name)
        return p is None or p[0] in self._matched_b_set or name in self.b.initializers

    def _compare_attributes(self, na: LiteNode, nb: LiteNode) -> list[Detail]:
        out: list[Detail] = []
        attrs_a = {as_text(x.name): x for x in na.attribute}
        attrs_b = {as_text(x.name): x for x in nb.attribute}
        for name in sorted(attrs_a.keys() | attrs_b.keys()):
            xa, xb = attrs_a.get(name), attrs_b.get(name)
            if xa is None:
                assert xb is not None
                out.append(Detail("attribute_added", name, "", _attr_text(xb)))
            elif xb is None:
                out.append(Detail("attribute_removed", name, _attr_text(xa), ""))
            elif xa.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) or xa.HasField("g"):
                continue  # diffed recursively
            elif xa.SerializeToString() != xb.SerializeToString():
                out.append(Detail("attribute", name, _attr_text(xa), _attr_text(xb)))
        return out

    def _compare_io(self) -> list[Detail]:
        a, b = self.a, self.b
        out: list[Detail] = []
        ins_a = [n for n in a.input_names if n not in a.initializers]
        ins_b = [n for n in b.input_names if n not in b.initializers]
        for kind, xs, ys in (
            ("graph_input", ins_a, ins_b),
            ("graph_output", a.output_names, b.output_names),
        ):
            if len(xs) != len(ys):
                out.append(Detail(kind + "_count", kind + "s", str(len(xs)), str(len(ys))))
            for pos, (x, y) in enumerate(zip(xs, ys)):
                tx, ty = _type_text(a.types.get(x)), _type_text(b.types.get(y))
                if tx != ty:
                    out.append(Detail(kind, f"{pos} ({x})", tx, ty))
                elif kind == "graph_output" and self.value_map.get(a.real(x), None) not in (
                    None,
                    b.real(y),
                ):
                    out.append(Detail(kind, f"{pos}", x, y))
        return out

    # -- recursion -----------------------------------------------------------------------
    def children(self) -> list[tuple[int, int, str, object, object]]:
        """(index a, index b, attribute label, graph a, graph b) for subgraphs of
        matched nodes, paired by attribute label."""
        out = []
        nested = self._nested_a
        for ia, ib in self.result.matches:
            if ia not in nested:
                continue  # no subgraph in A's node: nothing to pair
            na, nb = self.a.nodes[ia], self.b.nodes[ib]
            subs_b = dict(subgraph_attrs(nb))
            for label, ga in subgraph_attrs(na):
                gb = subs_b.get(label)
                if gb is not None:
                    out.append((ia, ib, label, ga, gb))
        return out


def diff_graphs(
    a: GraphIndex,
    b: GraphIndex,
    base_a: str | None,
    base_b: str | None,
    outer_map: Mapping[str, str] | None = None,
    anchors: Sequence[tuple[str, str]] = (),
    compare_values: bool = True,
) -> GraphDiff:
    """Diff a graph pair and, recursively, the subgraphs of its matched nodes."""
    differ = GraphDiffer(a, b, base_a, base_b, outer_map or {}, anchors, compare_values)
    result = differ.run()
    changes = {(c.a.index, c.b.index): c for c in result.changed}
    for ia, ib, label, ga, gb in differ.children():
        path_a = f"{a.path}/{label}:{a.labels[ia]}"
        path_b = f"{b.path}/{label}:{b.labels[ib]}"
        child = diff_graphs(
            index_graph(path_a, ga),  # type: ignore[arg-type]
            index_graph(path_b, gb),  # type: ignore[arg-type]
            base_a,
            base_b,
            {**differ.value_map},
            (),
            compare_values,
        )
        result.children.append(child)
        if not child.equal:
            change = changes.get((ia, ib))
            if change is None:
                change = NodeChange(differ.ref_a(ia), differ.ref_b(ib))
                changes[(ia, ib)] = change
                result.changed.append(change)
            n = sum(
                len(g.changed)
                + len(g.added)
                + len(g.removed)
                + len(g.fused)
                + len(g.changed_weights)
                + len(g.io)
                for g in child.walk()
            )
            change.details.append(Detail("body", label, path_a, f"{path_b} ({n} changes inside)"))
    return result
