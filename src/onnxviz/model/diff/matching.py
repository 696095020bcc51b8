"""Match the nodes of two graphs.

In order of evidence:

1. anchors the user pinned by hand;
2. structural hashes unique on both sides: a forward hash (op, attributes, and the
   hashes of what feeds each input, from graph inputs by position and weights by
   shape) and a backward hash (op, and who consumes each output at which slot, down to
   the graph outputs by position).  Names play no part, so renamed values and re-sorted
   nodes match exactly;
3. node names, when the same name has the same op on both sides;
4. a two-step neighbourhood hash (op, attributes, weights, and those of the
   producers by slot and the consumers with their slots), unique on both sides;
5. propagation in bulk (`Matcher._spread`): each matched pair tags its two nodes
   alike, and a node whose key (own tag or op, mixed with its neighbours' keys) is
   unique on both sides pairs; repeated while it pairs anything.  numpy over edge
   arrays: on a 100k-node graph with changes everywhere this pairs what is left of
   the bulk in a few rounds of milliseconds;
6. stepwise propagation from the pairs next to unmatched nodes: the producers at the
   same input slot, and the consumers at the same slot, of the same op on both sides,
   stepping over an inserted or removed pass-through node.  This is what carries a
   match across a changed attribute or an inserted node, where the hashes part.

Hashes are kept as int64 arrays (a Python int per node and per hash would cost tens
of MB on a 100k-node graph).

QuantizeLinear -> DequantizeLinear pairs are looked through (`GraphIndex.real`), so an
fp32 graph matches its QDQ version node for node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import compress, islice, repeat
from operator import attrgetter

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto

from onnxviz.model.diff.index import GraphIndex, LiteNode
from onnxviz.model.text import as_text


def attribute_signature(node: NodeProto | LiteNode) -> tuple[tuple[str, object], ...]:
    """Attributes as comparable bytes, subgraphs summarized by their op types (their
    differences are diffed, recursively, elsewhere)."""
    out: list[tuple[str, object]] = []
    for attr in node.attribute:
        kind = attr.type
        if kind in (_GRAPH, _GRAPHS) or (kind == 0 and attr.HasField("g")):
            graphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
            out.append((attr.name, tuple(tuple(sorted(n.op_type for n in g.node)) for g in graphs)))
        else:
            out.append((attr.name, attr.SerializeToString()))
    if len(out) > 1:
        out.sort(key=lambda item: as_text(item[0]))
    return tuple(out)


_GRAPH, _GRAPHS = AttributeProto.GRAPH, AttributeProto.GRAPHS
_DOMAIN, _OP_TYPE, _ATTRIBUTE = attrgetter("domain"), attrgetter("op_type"), attrgetter("attribute")


_DIGEST_LIMIT = 1 << 16


def _weight_token(t: TensorProto) -> int:
    """A weight as seen by the forward hash: its shape and type, and its bytes when they
    are small and embedded (distinct layers of the same shape then hash apart)."""
    # Each access to raw_data copies the bytes: read once, and never for a big tensor
    # (ByteSize is the embedded size plus a name and dims: a margin covers those).
    size = t.ByteSize()
    data = t.raw_data if size <= _DIGEST_LIMIT + 4096 and t.HasField("raw_data") else b""
    if len(data) > _DIGEST_LIMIT:
        data = b""
    if not data and t.data_location != TensorProto.EXTERNAL and size <= _DIGEST_LIMIT:
        data = t.SerializeToString()  # typed fields; the name is not in the hash below
        name = t.name if isinstance(t.name, bytes) else t.name.encode()
        data = data.replace(name, b"") if name else data
    return hash(("w", t.data_type, tuple(t.dims), data))


def _op(node: NodeProto | LiteNode) -> tuple[str, str]:
    return (node.domain if node.domain != "ai.onnx" else "", node.op_type)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over uint64 arrays: a cheap hash that spreads every bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _as_keys(values: list[int]) -> np.ndarray:
    """Python hashes (signed 64-bit) as an int64 array: an eighth of a list's memory."""
    return np.array(values, dtype=np.int64)


def _local_keys(sig: list[int], gi: GraphIndex, tokens: Mapping[str, int]) -> np.ndarray:
    """Each node's op and attributes (``sig``), input count, and the weights it reads
    by slot, as one int64 key."""
    n = len(sig)
    flat = gi.flat_inputs
    tok = np.fromiter(map(tokens.get, flat, repeat(0)), np.int64, len(flat)).view(np.uint64)
    hit = np.flatnonzero(tok)
    per = np.zeros(n, np.uint64)
    slot = gi.input_slot[hit].astype(np.uint64)
    np.add.at(per, gi.input_node[hit], _mix(tok[hit] ^ _mix(slot + _GOLDEN)))
    count = np.bincount(gi.input_node, minlength=n).astype(np.uint64)
    keys = _mix(np.array(sig, np.int64).view(np.uint64) ^ _mix(count * _GOLDEN + per))
    return keys.view(np.int64)


class _Hashes:
    """Forward and backward structural hashes of one graph's nodes, kept as int64
    arrays (a 100k-node graph's lists of Python ints would cost tens of MB)."""

    def __init__(self, gi: GraphIndex, outer: Mapping[str, int]) -> None:
        self.gi = gi
        nodes = gi.nodes
        n = len(nodes)
        order = gi.topological_order()
        qdq = gi.qdq_nodes
        real = gi.real if gi.alias else None
        value: dict[str, int] = {}
        for pos, name in enumerate(gi.input_names):
            if name not in gi.initializers:
                value[name] = hash(("in", pos))
        for name, t in gi.initializers.items():
            value.setdefault(name, _weight_token(t))
        # Op hashes per distinct (domain, op type), handed out by C-level maps; only
        # the nodes with attributes take the Python loop.
        keys = list(zip(map(_DOMAIN, nodes), map(_OP_TYPE, nodes)))
        op_of = {k: (k[0] if k[0] != "ai.onnx" else "", k[1]) for k in set(keys)}
        ops = list(map({k: hash(op) for k, op in op_of.items()}.__getitem__, keys))
        sig = list(map({k: hash((op, ())) for k, op in op_of.items()}.__getitem__, keys))
        nested: list[int] = []  # nodes holding a subgraph
        for i in compress(range(n), map(bool, map(_ATTRIBUTE, nodes))):
            attrs = attribute_signature(nodes[i])
            if any(type(v) is tuple for _, v in attrs):
                nested.append(i)
            sig[i] = hash((op_of[keys[i]], attrs))
        self.nested = nested
        fwd = [0] * n
        get = value.get
        for i in order:
            node = nodes[i]
            if qdq and i in qdq:
                weight = gi.is_weight(node.output[0]) if node.output else None
                if weight is not None:
                    value[node.output[0]] = hash(("w", tuple(weight.dims)))
                continue
            inputs = node.input if real is None else [real(x) for x in node.input]
            ins = tuple(map(get, inputs))
            if None in ins:  # a name from the enclosing graph, or defined nowhere
                ins = tuple(
                    (outer.get(x) if x in outer else hash(("outer", x))) if h is None else h
                    for x, h in zip(inputs, ins)
                )
            h = hash((sig[i], ins))
            fwd[i] = h
            outputs = node.output
            # Output 0 stands as the node's own hash (no tuple to build for most nodes).
            if len(outputs) == 1:
                if outputs[0]:
                    value[outputs[0]] = h
            else:
                for k, name in enumerate(outputs):
                    if name:
                        value[name] = hash((h, k)) if k else h
        self.fwd = _as_keys(fwd)
        del fwd
        # Op, attributes and the weights read (by slot): what tells apart two nodes of
        # one op reading the same value (Gather of index 0 and of index 1), even where
        # a change upstream spoiled the forward hash.  Summed per slot by numpy over
        # the flat inputs (a Python tuple per node cost 0.1 s).
        tokens = {x: tok for x in gi.weight_names() if (tok := get(x)) is not None}
        self.local = _local_keys(sig, gi, tokens)
        del value, get
        self.sig = sig
        out_pos: dict[str, list[int]] = defaultdict(list)
        for pos, name in enumerate(gi.output_names):
            out_pos[gi.real(name)].append(pos)
        at_get = {name: tuple(found) for name, found in out_pos.items()}.get
        bwd = [0] * n
        consumers = gi.effective_consumers if gi.alias else gi.consumers.get
        no_uses: list[tuple[int, int]] = []
        for i in reversed(order):
            if qdq and i in qdq:
                continue
            outputs = nodes[i].output
            if len(outputs) == 1:  # most nodes: no list of outputs to hash
                found = consumers(outputs[0]) or no_uses
                if len(found) == 1:
                    ci, k = found[0]
                    uses: tuple[tuple[int, int], ...] = ((bwd[ci] or ops[ci], k),)
                else:
                    uses = tuple(sorted([(bwd[ci] or ops[ci], k) for ci, k in found]))
                bwd[i] = hash((ops[i], uses, at_get(outputs[0])))
                continue
            outs = []
            for name in outputs:
                found = consumers(name) or no_uses
                uses = tuple(sorted([(bwd[ci] or ops[ci], k) for ci, k in found]))
                outs.append(hash((uses, at_get(name))))
            bwd[i] = hash((ops[i], tuple(outs)))
        self.bwd = _as_keys(bwd)

    def neighbourhood(self) -> np.ndarray:
        """A hash of each node's two-step neighbourhood (ops, attributes, weights of
        the node, its producers by slot and its consumers with their slots, and
        theirs).  Unlike the forward and backward hashes it survives a change further
        away, so in a model with changes spread all over it still pairs most nodes at
        once.  Computed over edge arrays by numpy: sums of mixed hashes stand for the
        (ordered) producers and the (unordered) consumers."""
        keys = self.local.view(np.uint64)
        for _ in range(2):
            keys = self.ring(keys)
        return keys.view(np.int64)

    def ring(self, keys: np.ndarray) -> np.ndarray:
        """One step of the neighbourhood hash: each node's key (uint64) mixed with its
        producers' keys by input slot and its consumers' keys with their slots."""
        src, dst, slot = self.gi.edges()
        salt = self.__dict__.get("_salt")
        if salt is None:
            salt = self.__dict__["_salt"] = _mix(slot.astype(np.uint64) + _GOLDEN)
        n = len(keys)
        mixed = _mix(keys)
        ups = np.zeros(n, np.uint64)
        np.add.at(ups, dst, _mix(mixed[src] ^ salt))
        downs = np.zeros(n, np.uint64)
        np.add.at(downs, src, _mix(mixed[dst] + salt))
        return _mix(mixed ^ _mix(ups + np.uint64(1)) ^ (_mix(downs ^ np.uint64(7)) >> np.uint64(1)))


def _combine(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (
        _mix(x.view(np.uint64)) ^ (_mix(y.view(np.uint64) + np.uint64(3)) >> np.uint64(1))
    ).view(np.int64)


def _unique_index(keys: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, node index) of the keys that occur once among the nodes not skipped,
    sorted by key."""
    idx = np.flatnonzero(~skip)
    k = keys[idx]
    order = np.argsort(k, kind="stable")
    ks = k[order]
    if len(ks) < 2:
        return ks, idx[order]
    dup = ks[1:] == ks[:-1]
    once = ~(np.concatenate(([False], dup)) | np.concatenate((dup, [False])))
    return ks[once], idx[order][once]


class Matcher:
    def __init__(
        self,
        a: GraphIndex,
        b: GraphIndex,
        outer_map: Mapping[str, str],
        anchors: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.a = a
        self.b = b
        self.a_to_b: dict[int, int] = {}
        self.b_to_a: dict[int, int] = {}
        self.outer_map = dict(outer_map)
        self.anchors = list(anchors)
        # The pairs as numpy arrays, in the order they were made, and masks of the
        # matched nodes: brought up to date by `_matched` from the pairs made since
        # (pairs are only ever added, so the dicts' tails are the new ones).
        self._synced = 0
        self._ia = self._ib = np.zeros(0, np.int64)
        self._mask_a = np.zeros(len(a.nodes), bool)
        self._mask_b = np.zeros(len(b.nodes), bool)

    def _pair(self, ia: int, ib: int) -> bool:
        if ia in self.a_to_b or ib in self.b_to_a:
            return False
        self.a_to_b[ia] = ib
        self.b_to_a[ib] = ia
        return True

    def _matched(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(nodes of A, their counterparts in B) in the order paired, and the masks of
        the matched nodes of A and of B."""
        done, old = len(self.a_to_b), self._synced
        if done > old:
            ia = np.fromiter(islice(self.a_to_b.keys(), old, None), np.int64, done - old)
            ib = np.fromiter(islice(self.a_to_b.values(), old, None), np.int64, done - old)
            self._ia = np.concatenate((self._ia, ia))
            self._ib = np.concatenate((self._ib, ib))
            self._mask_a[ia] = True
            self._mask_b[ib] = True
            self._synced = done
        return self._ia, self._ib, self._mask_a, self._mask_b

    def run(self) -> dict[int, int]:
        a, b = self.a, self.b
        la = {lab: i for i, lab in enumerate(a.labels)}
        lb = {lab: i for i, lab in enumerate(b.labels)}
        for na, nb in self.anchors:
            if na in la and nb in lb:
                self._pair(la[na], lb[nb])
        outer_hash = {name: hash(("outer", name)) for name in self.outer_map}
        ha = _Hashes(a, outer_hash)
        hb = _Hashes(b, {self.outer_map[k]: v for k, v in outer_hash.items()})
        self.ha, self.hb = ha, hb
        self.sig_a, self.sig_b = ha.sig, hb.sig
        self.nested_a = ha.nested
        pending: list[tuple[int, int]] = list(self.a_to_b.items())
        self._unique_pairs(_combine(ha.fwd, ha.bwd), _combine(hb.fwd, hb.bwd), pending)
        for lab in la.keys() & lb.keys():  # names on both sides (most renamed: few)
            ia, ib = la[lab], lb[lab]
            if lab.startswith("#") or ia in self.a_to_b or ia in a.qdq_nodes:
                continue
            if (
                ib not in b.qdq_nodes
                and _op(a.nodes[ia]) == _op(b.nodes[ib])
                and self._pair(ia, ib)
            ):
                pending.append((ia, ib))
        self._unique_pairs(ha.fwd, hb.fwd, pending)
        self._unique_pairs(ha.bwd, hb.bwd, pending)
        self._unique_pairs(ha.neighbourhood(), hb.neighbourhood(), pending)
        self._spread(pending)
        # Pairs whose neighbours all matched by hash have nothing to propagate: only
        # the frontier does, and the pairs made by hashing are done with.
        pending.clear()
        self._propagate(self._frontier(), ha.sig, hb.sig)
        # Then from the values both graphs get from outside: graph inputs by position,
        # and names of the enclosing graph.
        seeds = list(
            zip(
                [n for n in a.input_names if n not in a.initializers],
                [n for n in b.input_names if n not in b.initializers],
            )
        )
        seeds += [(x, y) for x, y in self.outer_map.items() if not a.defined_here(x)]
        for xa, xb in seeds:
            self._match_consumers(xa, xb, ha.sig, hb.sig, pending)
            self._propagate(pending, ha.sig, hb.sig)
        # A tie (q, k and v of one input) may resolve only after its neighbours
        # matched: sweep again until nothing new pairs.
        for _ in range(8):
            before = len(self.a_to_b)
            self._propagate(self._frontier(), ha.sig, hb.sig)
            if len(self.a_to_b) == before:
                break
        return self.a_to_b

    def _spread(self, pending: list[tuple[int, int]], rounds: int = 48) -> None:
        """Propagation by numpy, for the bulk of a large graph: every matched pair gets
        a tag shared by its two nodes, each node's key becomes its own (tag, or op,
        attributes and weights) mixed with its neighbours' by slot, and the keys unique
        on both sides among the unmatched nodes pair.  Repeated while it pairs
        anything; what is left (ties, inserted nodes to step over) is for the
        stepwise `_propagate`."""
        a, b = self.a, self.b
        base_a = self.ha.local.view(np.uint64)
        base_b = self.hb.local.view(np.uint64)
        for _ in range(rounds):
            done = len(self.a_to_b)
            if not done or done == len(a.nodes) or done == len(b.nodes):
                return
            ia, ib, _, _ = self._matched()
            tag = _mix(np.arange(done, dtype=np.uint64) + _GOLDEN)
            ka, kb = base_a.copy(), base_b.copy()
            ka[ia] = tag
            kb[ib] = tag
            self._unique_pairs(
                self.ha.ring(ka).view(np.int64), self.hb.ring(kb).view(np.int64), pending
            )
            if len(self.a_to_b) == done:
                return

    def _frontier(self) -> list[tuple[int, int]]:
        """Matched pairs within two steps of a node of A without a counterpart: the
        only places a new pair can come from (a pair needs an unmatched node of A, and
        propagation steps over at most one node).  Found from the unmatched nodes, so a
        nearly matched 100k-node graph costs little."""
        a, matched = self.a, self.a_to_b
        ring = set(np.flatnonzero(~self._matched()[2]).tolist())
        near: set[int] = set()
        for _ in range(2):
            nxt: set[int] = set()
            for i in ring:
                node = a.nodes[i]
                for x in node.input:
                    p = a.producer.get(x)
                    if p is not None:
                        nxt.add(p[0])
                for x in node.output:
                    nxt.update(c for c, _ in a.consumers.get(x, ()))
            near |= nxt
            ring = nxt
        return [(i, matched[i]) for i in near if i in matched]

    def _unique_pairs(
        self, keys_a: np.ndarray, keys_b: np.ndarray, pending: list[tuple[int, int]]
    ) -> None:
        _, _, mask_a, mask_b = self._matched()
        ka, ia = _unique_index(keys_a, self._skip(self.a, mask_a))
        kb, ib = _unique_index(keys_b, self._skip(self.b, mask_b))
        _, at_a, at_b = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
        for x, y in zip(ia[at_a].tolist(), ib[at_b].tolist()):
            if self._pair(x, y):
                pending.append((x, y))

    @staticmethod
    def _skip(g: GraphIndex, matched: np.ndarray) -> np.ndarray:
        """Mask of the nodes matched already and the Q/DQ nodes."""
        if not g.qdq_nodes:
            return matched
        skip = matched.copy()
        skip[np.fromiter(g.qdq_nodes, np.int64, len(g.qdq_nodes))] = True
        return skip

    def _propagate(
        self, pending: list[tuple[int, int]], sig_a: list[int], sig_b: list[int]
    ) -> None:
        a, b = self.a, self.b
        na, nb = a.nodes, b.nodes
        while pending:
            ia, ib = pending.pop()
            node_a, node_b = na[ia], nb[ib]
            for ka in range(min(len(node_a.input), len(node_b.input))):
                pa = a.producer.get(a.real(node_a.input[ka]))
                pb = b.producer.get(b.real(node_b.input[ka]))
                if pa is None or pb is None or pa[1] != pb[1]:
                    continue
                ja, jb = pa[0], pb[0]
                if ja in a.qdq_nodes or jb in b.qdq_nodes:
                    continue
                if _op(na[ja]) == _op(nb[jb]):
                    if self._pair(ja, jb):
                        pending.append((ja, jb))
                    continue
                # An inserted (or removed) pass-through node between: step over it.
                if ja not in self.a_to_b and jb not in self.b_to_a:
                    for side, j in ((b, jb), (a, ja)):
                        if not self._passes_through(side, j):
                            continue
                        x = next(x for x in side.nodes[j].input if x and side.is_weight(x) is None)
                        p = side.producer.get(side.real(x))
                        if p is None:
                            continue
                        ja2, jb2 = (ja, p[0]) if side is b else (p[0], jb)
                        if _op(na[ja2]) == _op(nb[jb2]) and self._pair(ja2, jb2):
                            pending.append((ja2, jb2))
                            break
            for k in range(min(len(node_a.output), len(node_b.output))):
                self._match_consumers(node_a.output[k], node_b.output[k], sig_a, sig_b, pending)

    def _disambiguate(
        self, cands_a: list[int], cands_b: list[int], pending: list[tuple[int, int]]
    ) -> None:
        """Several consumers of one op at one slot (the q, k and v projections of one
        input): pair those that attributes, then what follows them, then what feeds
        them, tell apart; a last one left on each side pairs too."""
        left_a, left_b = list(cands_a), list(cands_b)
        for keys_a, keys_b in (
            (self.ha.local, self.hb.local),
            (self.ha.bwd, self.hb.bwd),
            (self.ha.fwd, self.hb.fwd),
        ):
            if not left_a or not left_b:
                return
            count_a: dict[int, list[int]] = defaultdict(list)
            count_b: dict[int, list[int]] = defaultdict(list)
            for x in left_a:
                count_a[keys_a[x]].append(x)
            for x in left_b:
                count_b[keys_b[x]].append(x)
            for key, xs in count_a.items():
                ys = count_b.get(key)
                if len(xs) == 1 and ys is not None and len(ys) == 1 and self._pair(xs[0], ys[0]):
                    pending.append((xs[0], ys[0]))
            left_a = [x for x in left_a if x not in self.a_to_b]
            left_b = [x for x in left_b if x not in self.b_to_a]
        if len(left_a) == 1 and len(left_b) == 1 and self._pair(left_a[0], left_b[0]):
            pending.append((left_a[0], left_b[0]))

    def _match_consumers(
        self,
        value_a: str,
        value_b: str,
        sig_a: list[int],
        sig_b: list[int],
        pending: list[tuple[int, int]],
        skip: bool = True,
        guess: bool = True,
    ) -> None:
        """Pair the consumers of two corresponding values: same op at the same slot,
        unique on both sides (or unique once the attributes are counted).  A consumer
        whose op the other side lacks there (an inserted BatchNormalization, a removed
        Identity) is stepped over once, so matching goes on behind it."""
        a, b = self.a, self.b
        na, nb = a.nodes, b.nodes
        uses_a = a.effective_consumers(value_a)
        uses_b = b.effective_consumers(value_b)
        if not uses_a or not uses_b:
            return
        groups_a: dict[tuple[object, int], list[int]] = defaultdict(list)
        groups_b: dict[tuple[object, int], list[int]] = defaultdict(list)
        for ci, slot in uses_a:
            if ci not in self.a_to_b:
                groups_a[(_op(na[ci]), slot)].append(ci)
        for ci, slot in uses_b:
            if ci not in self.b_to_a:
                groups_b[(_op(nb[ci]), slot)].append(ci)
        for key, cands_a in groups_a.items():
            cands_b = groups_b.get(key)
            if not cands_b:
                continue
            if len(cands_a) == 1 and len(cands_b) == 1:
                if self._pair(cands_a[0], cands_b[0]):
                    pending.append((cands_a[0], cands_b[0]))
                continue
            self._disambiguate(cands_a, cands_b, pending)
        ops_a = {key[0] for key in groups_a}
        ops_b = {key[0] for key in groups_b}
        only_a = [c[0] for key, c in groups_a.items() if key[0] not in ops_b and len(c) == 1]
        only_b = [c[0] for key, c in groups_b.items() if key[0] not in ops_a and len(c) == 1]
        if guess and len(only_a) == 1 and len(only_b) == 1:
            # One node for one other at the same place (Add became Sub): a changed op,
            # so matching goes on behind it.
            ca, cb = only_a[0], only_b[0]
            same_shape = len(na[ca].input) == len(nb[cb].input) and len(na[ca].output) == len(
                nb[cb].output
            )
            slot_a = next(k for key, c in groups_a.items() if c == [ca] for k in [key[1]])
            slot_b = next(k for key, c in groups_b.items() if c == [cb] for k in [key[1]])
            if (
                same_shape
                and slot_a == slot_b
                and not self._inserted_before(b, cb, _op(na[ca]))
                and not self._inserted_before(a, ca, _op(nb[cb]))
                and self._pair(ca, cb)
            ):
                pending.append((ca, cb))
                return
        if skip and (only_a or only_b):
            # A pass-through node one side has and the other lacks (an inserted
            # Identity, a removed Cast): step over it.  Nodes with two inputs are never
            # stepped over, or matching would slide one node along a chain.  First
            # without the changed-op guess behind the node stepped over: stacked on
            # the step it would pair a Div's Erf with the Identity inserted on the
            # other side in front of that Div.
            before = len(self.a_to_b)
            for guess_behind in (False, True):
                for ca in only_a:
                    if self._passes_through(a, ca):
                        self._match_consumers(
                            na[ca].output[0], value_b, sig_a, sig_b, pending, False, guess_behind
                        )
                for cb in only_b:
                    if self._passes_through(b, cb):
                        self._match_consumers(
                            value_a, nb[cb].output[0], sig_a, sig_b, pending, False, guess_behind
                        )
                if len(self.a_to_b) > before:
                    break

    @classmethod
    def _inserted_before(cls, g: GraphIndex, i: int, op: tuple[str, str]) -> bool:
        """Node ``i`` passes through to a node of ``op``: an inserted (or removed)
        Identity in front of the node the other side has there, not a changed op."""
        node = g.nodes[i]
        if sum(1 for x in node.input if x) != 1 or not cls._passes_through(g, i):
            return False  # a node with weights (Add of a bias) is a changed op
        return any(_op(g.nodes[c]) == op for c, _ in g.effective_consumers(g.nodes[i].output[0]))

    @staticmethod
    def _passes_through(g: GraphIndex, i: int) -> bool:
        """One output, and one input that is not a weight (Identity, Cast,
        BatchNormalization, an activation)."""
        node = g.nodes[i]
        if len(node.output) != 1:
            return False
        return sum(1 for x in node.input if x and g.is_weight(x) is None) == 1
