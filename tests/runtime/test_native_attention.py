"""com.microsoft Attention and MultiHeadAttention through the compiled attention
(native/_gqa.c's `attend` with an additive bias; kernels/contrib_attention.attend_compiled),
and the unwatched calls of a transformers-optimizer BERT (Attention's quick call,
MultiHeadAttention's specialized call, EmbedLayerNormalization's and BiasGelu's).

* At every level this CPU has, on random calls (batch, sequence, heads, head sizes from 1
  to 40 so the vectors' partial loads and stores run at every width, a past, every
  mask form, unidirectional, attention_bias of every broadcast, a scale): the outputs
  within float32 rounding of the numpy steps (the compiled kernel off), present bit for
  bit theirs.
* MultiHeadAttention's self-attention (3-D Q, K, V with a bias, past caches, key padding
  masks, attention_bias) likewise; cross attention and output_qk run the numpy steps.
* Bad bias strides raise ValueError.
* Unwatched runs give the stepped run's bits: Attention, MultiHeadAttention,
  EmbedLayerNormalization (its mask count in C, int32 and int64 masks) and BiasGelu.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnxviz.runtime import native
from onnxviz.runtime.kernels import contrib_attention, packed_gemm
from onnxviz.runtime.registry import KernelContext
from tests.runtime.differential import assert_stepped_bits
from tests.runtime.native_modules import CountingAttend, compiled
from tests.runtime.nodecases import single_node_model

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
MS = "com.microsoft"
HEADS = [1, 2, 3, 5, 8, 12, 16, 20, 33, 40]


def _f(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _mask(rng: np.random.Generator, kind: str, b: int, s: int, past: int) -> np.ndarray | None:
    total = past + s
    if kind == "lengths":
        return rng.integers(0, total + 1, b).astype(np.int32)
    if kind == "end_start":
        end = rng.integers(1, total + 1, b)
        start = np.minimum(rng.integers(0, total, b), end - 1)
        return np.concatenate([end, start]).astype(np.int32)
    if kind == "2d":
        return (rng.random((b, total)) < 0.7).astype(np.int32)
    if kind == "3d":
        return (rng.random((b, s, total)) < 0.7).astype(np.int32)
    if kind == "4d":  # [B, 1, max, max]: rows past .. past + s read
        size = total + int(rng.integers(0, 3))
        return (rng.random((b, 1, size, size)) < 0.7).astype(np.int32)
    return None


def _attention_case(seed: int) -> tuple[list[np.ndarray | None], dict[str, Any], int]:
    rng = np.random.default_rng(seed)
    b, s = int(rng.integers(1, 4)), int(rng.choice([1, 2, 3, 4, 7, 9]))
    n, head = int(rng.integers(1, 5)), int(rng.choice(HEADS))
    past = int(rng.choice([0, 0, 1, 3, 6]))
    d_in = int(rng.choice([4, 16, 24]))
    kind = str(rng.choice(["none", "lengths", "end_start", "2d", "3d", "4d"]))
    # (weights of a trained layer's scale: Q, K, V about N(0, 1), so scores of a few
    # units, where float32 rounding of the scores moves the outputs by a few ulps)
    inputs: list[np.ndarray | None] = [
        _f(rng, b, s, d_in),
        _f(rng, d_in, 3 * n * head) / np.float32(np.sqrt(d_in)),
        _f(rng, 3 * n * head),
        _mask(rng, kind, b, s, past),
        _f(rng, 2, b, n, past, head) if past else None,
    ]
    attrs: dict[str, Any] = {"num_heads": n, "unidirectional": int(rng.random() < 0.3)}
    if rng.random() < 0.3:
        shape = (int(rng.choice([1, b])), int(rng.choice([1, n])), s, past + s)
        inputs.append(_f(rng, *shape))
    if rng.random() < 0.3:
        attrs["scale"] = float(rng.uniform(0.05, 0.5))
    if rng.random() < 0.2:
        attrs["mask_filter_value"] = -1e4 * float(rng.uniform(0.5, 2.0))
    return inputs, attrs, past


def _run(fn: Any, module: Any, monkeypatch: Any, *args: Any, **attrs: Any) -> tuple[Any, int]:
    """fn's outputs with the compiled attention counted (module None: the numpy steps)."""
    counting = None if module is None else CountingAttend(module)
    monkeypatch.setattr(contrib_attention, "_COMPILED", counting)
    got = fn(*args, **attrs)
    return got, (0 if counting is None else counting.calls)


@pytest.mark.parametrize("level", LEVELS)
def test_attention_random_calls_match_the_numpy_steps(monkeypatch, level: int) -> None:
    module = compiled("gqa")
    module.set_level(level)
    ctx = KernelContext(n_outputs=2, output_names=("out", "present"))
    try:
        for seed in range(150):
            inputs, attrs, past = _attention_case(seed)
            what = f"seed {seed} {attrs} {[None if x is None else x.shape for x in inputs]}"
            got, calls = _run(contrib_attention.ms_attention, module, monkeypatch, ctx, *inputs, **attrs)  # fmt: skip
            assert calls == 1, f"{what}: the compiled attention did not run"
            want, calls = _run(contrib_attention.ms_attention, None, monkeypatch, ctx, *inputs, **attrs)  # fmt: skip
            assert got[0].dtype == np.float32 and got[0].shape == want[0].shape, what
            np.testing.assert_array_equal(got[1], want[1], err_msg=what)  # present: copies
            _assert_close_rows(got[0], want[0], inputs[3], past, attrs, what)
    finally:
        module.set_level(max(LEVELS))


def _assert_close_rows(
    got: np.ndarray, want: np.ndarray, mask: Any, past: int, attrs: dict[str, Any], what: str
) -> None:
    """got within float32 rounding of want, row by row.  A query row whose every key is
    masked is ill-conditioned (its scores all carry the filter value, about -10^4, where
    one float32 rounding moves a score by 10^-3), so there only within a few roundings at
    that magnitude; every other row within a few ulps."""
    b, s = got.shape[0], got.shape[1]
    fv = attrs.get("mask_filter_value", -10000.0)
    bias = contrib_attention.attention_mask_bias(
        mask, b, s, past, past + s, bool(attrs.get("unidirectional")), fv
    )
    masked = np.zeros((b, s), bool)
    if bias is not None:
        masked = np.broadcast_to((bias != 0).all(axis=-1)[:, 0], (b, s))
    well = ~masked
    np.testing.assert_allclose(got[well], want[well], rtol=2e-5, atol=2e-5, err_msg=what)
    loose = 8 * abs(fv) * 2.0**-24 * max(float(np.abs(want).max(initial=0)), 1.0)
    np.testing.assert_allclose(got[masked], want[masked], rtol=0, atol=loose, err_msg=what)


def test_attention_without_a_present_output_and_in_float16(monkeypatch) -> None:
    module = compiled("gqa")
    inputs, attrs, _ = _attention_case(5)
    ctx = KernelContext(n_outputs=1, output_names=("out",))
    got, calls = _run(contrib_attention.ms_attention, module, monkeypatch, ctx, *inputs, **attrs)
    assert calls == 1 and got[1] is None
    half = [None if x is None else x.astype(np.float16) for x in inputs]
    got, calls = _run(contrib_attention.ms_attention, module, monkeypatch, ctx, *half, **attrs)
    want, _ = _run(contrib_attention.ms_attention, None, monkeypatch, ctx, *half, **attrs)
    assert calls == 1 and got[0].dtype == np.float16
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32), atol=2e-3)


def test_attention_the_compiled_call_declines_what_it_does_not_take(monkeypatch) -> None:
    """Uneven Q/K/V widths, float64, bias shapes that do not broadcast, more work than
    the limit: the numpy steps (which give their numbers, or raise their error)."""
    module = compiled("gqa")
    rng = np.random.default_rng(2)
    ctx = KernelContext(n_outputs=1, output_names=("out",))
    x, w, bias = _f(rng, 2, 3, 8), _f(rng, 8, 40), _f(rng, 40)
    _, calls = _run(contrib_attention.ms_attention, module, monkeypatch, ctx, x, w, bias,
                    num_heads=4, qkv_hidden_sizes=[16, 16, 8])  # fmt: skip
    assert calls == 0
    w48, b48 = _f(rng, 8, 48), _f(rng, 48)
    _, calls = _run(contrib_attention.ms_attention, module, monkeypatch, ctx, x.astype(np.float64),
                    w48.astype(np.float64), b48.astype(np.float64), num_heads=4)  # fmt: skip
    assert calls == 0
    with pytest.raises(ValueError):
        _run(contrib_attention.ms_attention, module, monkeypatch, ctx, x, w48, b48, None, None,
             _f(rng, 3, 1, 3, 3), num_heads=4)  # fmt: skip
    # more work than HEADS_WORK_LIMIT (64 tokens of 4 heads of 64: 2^20 multiply-adds)
    wide = _f(rng, 256, 768) / np.float32(16)
    _, calls = _run(contrib_attention.ms_attention, module, monkeypatch, ctx,
                    _f(rng, 1, 64, 256), wide, _f(rng, 768), num_heads=4)  # fmt: skip
    assert calls == 0


def _mha_case(seed: int) -> tuple[list[np.ndarray | None], dict[str, Any]]:
    rng = np.random.default_rng(seed)
    b, s = int(rng.integers(1, 4)), int(rng.choice([1, 2, 3, 5, 8]))
    n, head = int(rng.integers(1, 5)), int(rng.choice(HEADS))
    d, past = n * head, int(rng.choice([0, 0, 2, 5]))
    total = past + s
    inputs: list[np.ndarray | None] = [_f(rng, b, s, d), _f(rng, b, s, d), _f(rng, b, s, d)]
    inputs.append(_f(rng, 3 * d) if rng.random() < 0.7 else None)
    kind = str(rng.choice(["none", "lengths", "2d", "3d"]))
    inputs.append(_mask(rng, kind, b, s, past))
    inputs.append(_f(rng, int(rng.choice([1, b])), int(rng.choice([1, n])), s, total) if rng.random() < 0.3 else None)  # fmt: skip
    inputs += [_f(rng, b, n, past, head), _f(rng, b, n, past, head)] if past else [None, None]
    attrs: dict[str, Any] = {"num_heads": n, "unidirectional": int(rng.random() < 0.3)}
    if rng.random() < 0.3:
        attrs["scale"] = float(rng.uniform(0.05, 0.5))
    return inputs, attrs


@pytest.mark.parametrize("level", LEVELS)
def test_multi_head_attention_random_calls_match_the_numpy_steps(monkeypatch, level: int) -> None:
    module = compiled("gqa")
    module.set_level(level)
    ctx = KernelContext(n_outputs=3, output_names=("out", "present_k", "present_v"))
    try:
        for seed in range(150):
            inputs, attrs = _mha_case(seed)
            what = f"seed {seed} {attrs} {[None if x is None else x.shape for x in inputs]}"
            fn = contrib_attention.multi_head_attention
            got, calls = _run(fn, module, monkeypatch, ctx, *inputs, **attrs)
            assert calls == 1, f"{what}: the compiled attention did not run"
            want, _ = _run(fn, None, monkeypatch, ctx, *inputs, **attrs)
            for i in (1, 2):
                np.testing.assert_array_equal(got[i], want[i], err_msg=what)
            assert got[3] is None
            past = 0 if inputs[6] is None else inputs[6].shape[2]
            _assert_close_rows(got[0], want[0], inputs[4], past, attrs, what)
    finally:
        module.set_level(max(LEVELS))


def test_multi_head_attention_cross_attention_and_qk_run_the_numpy_steps(monkeypatch) -> None:
    module = compiled("gqa")
    rng = np.random.default_rng(4)
    fn = contrib_attention.multi_head_attention
    ctx = KernelContext(n_outputs=1, output_names=("out",))
    q, kv = _f(rng, 2, 3, 16), _f(rng, 2, 5, 16)  # keys of another length: cross attention
    _, calls = _run(fn, module, monkeypatch, ctx, q, kv, kv, num_heads=2)
    assert calls == 0
    with_qk = KernelContext(n_outputs=4, output_names=("out", "", "", "qk"))
    got, calls = _run(fn, module, monkeypatch, with_qk, q, q, q, num_heads=2)
    assert calls == 0 and got[3] is not None


def test_attend_rejects_bias_strides_outside_the_bias() -> None:
    module = compiled("gqa")
    b, s, n, head = 1, 2, 2, 4
    qkv = np.zeros((b, s, 3 * n * head), np.float32)
    caches = [np.zeros((b, n, s, head), np.float32) for _ in range(2)]
    out = np.zeros((b, s, n * head), np.float32)
    bias = np.zeros((1, 1, s, s), np.float32)
    args = (qkv, None, None, None, None, None, None, *caches, out, b, s, n, n, head, 0, 0,
            False, False, 0, 0.5)  # fmt: skip
    module.attend(*args, bias, 0, 0, s)  # rows of s keys, s of them: in
    for strides in ((0, 0, s + 1), (0, s, s), (0, 0, -1)):
        with pytest.raises(ValueError, match="bias"):
            module.attend(*args, bias, *strides)
    with pytest.raises(ValueError, match="float32"):
        module.attend(*args, bias.astype(np.float64), 0, 0, s)


# ---- unwatched runs of a transformers-optimizer BERT's ops: the stepped run's bits ----


def _model(op: str, inputs: list[Any], n_out: int, attrs: dict[str, Any], constants: Any) -> Any:
    model, feeds = single_node_model(op, inputs, n_out, MS, attrs, constants)
    names = [i.name for i in model.graph.input]
    return model, dict(zip(names, feeds, strict=True))


@pytest.mark.parametrize("mask", ["none", "lengths", "2d", "4d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_quick_call_gives_the_stepped_bits(
    monkeypatch, mask: str, unidirectional: int
) -> None:
    """The quick call's bits on every unwatched run, and it runs them: `_attention` (the
    kernel's steps) only in the stepped run, when the compiled kernels are on."""
    steps = []
    kernel_steps = contrib_attention._attention
    monkeypatch.setattr(
        contrib_attention, "_attention", lambda *a, **k: steps.append(1) or kernel_steps(*a, **k)
    )
    rng = np.random.default_rng(8)
    b, s, n, head, d_in = 2, 5, 4, 8, 32
    inputs = [_f(rng, b, s, d_in), _f(rng, d_in, 3 * n * head), _f(rng, 3 * n * head)]
    m = _mask(rng, mask, b, s, 0)
    if m is not None:
        inputs.append(m)
    attrs = {"num_heads": n, "unidirectional": unidirectional}
    model, feeds = _model("Attention", inputs, 1, attrs, (1, 2))
    assert_stepped_bits(model, feeds, runs=3)
    quick = contrib_attention._COMPILED is not None and packed_gemm.module() is not None
    assert len(steps) == (1 if quick else 4)
    model, feeds = _model("Attention", inputs, 2, attrs, (1, 2))  # with present
    assert_stepped_bits(model, feeds, runs=2)


def test_multi_head_attention_specialized_call_gives_the_stepped_bits() -> None:
    rng = np.random.default_rng(9)
    b, s, n, head = 2, 4, 4, 8
    d = n * head
    qkv = [_f(rng, b, s, d) for _ in range(3)]
    lengths = np.array([4, 2], np.int32)
    model, feeds = _model("MultiHeadAttention", [*qkv, _f(rng, 3 * d), lengths], 1,
                          {"num_heads": n}, (3,))  # fmt: skip
    assert_stepped_bits(model, feeds, runs=3)
    past = [_f(rng, b, n, 3, head), _f(rng, b, n, 3, head)]
    model, feeds = _model("MultiHeadAttention", [*qkv, None, None, None, *past], 3,
                          {"num_heads": n, "unidirectional": 1}, ())  # fmt: skip
    assert_stepped_bits(model, feeds, runs=2)


@pytest.mark.parametrize("mask", ["none", "lengths", "2d", "3d"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_out", [1, 3])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_multi_head_attention_quick_call_gives_the_stepped_bits(
    monkeypatch, mask: str, bias: bool, n_out: int, unidirectional: int
) -> None:
    """contrib_attention._QuickSelfAttention (Q, K and V packed with the bias added in one
    pass, the present caches kept when nobody reads them) gives the node's own compiled
    call's bits on every unwatched run, and runs them: `_mha_compiled` only in the stepped
    run."""
    general = []
    mha_compiled = contrib_attention._mha_compiled
    monkeypatch.setattr(
        contrib_attention,
        "_mha_compiled",
        lambda *a: general.append(1) or mha_compiled(*a),
    )
    rng = np.random.default_rng(13)
    b, s, n, head = 2, 5, 4, 8
    d = n * head
    inputs: list[Any] = [_f(rng, b, s, d) for _ in range(3)]
    inputs.append(_f(rng, 3 * d) if bias else None)
    inputs.append(_mask(rng, mask, b, s, 0))
    attrs = {"num_heads": n, "unidirectional": unidirectional, "scale": 0.3 if bias else None}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    model, feeds = _model("MultiHeadAttention", inputs, n_out, attrs, (3,) if bias else ())
    assert_stepped_bits(model, feeds, runs=3)
    if contrib_attention._COMPILED is not None:
        assert len(general) == 1  # the stepped run's kernel call
    fed = dict(feeds)
    fed["in0"] = np.asfortranarray(feeds["in0"])  # another layout: its own copy, same bits
    assert_stepped_bits(model, fed, runs=2)


@pytest.mark.parametrize("mask_dtype", [None, np.int32, np.int64])
def test_embed_layer_normalization_unwatched_gives_the_stepped_bits(mask_dtype: Any) -> None:
    rng = np.random.default_rng(10)
    ids = rng.integers(0, 20, (2, 6)).astype(np.int32)
    seg = rng.integers(0, 2, (2, 6)).astype(np.int32)
    tables = [_f(rng, 20, 16), _f(rng, 8, 16), _f(rng, 2, 16), _f(rng, 16), _f(rng, 16)]
    inputs: list[Any] = [ids, seg, *tables]
    if mask_dtype is not None:  # counts of nonzero values, not sums: 2s and -1s count once
        inputs.append(rng.choice([0, 1, 2, -1], (2, 6)).astype(mask_dtype))
    model, feeds = _model("EmbedLayerNormalization", inputs, 3, {"epsilon": 1e-5}, (2, 3, 4, 5, 6))  # fmt: skip
    _, got = assert_stepped_bits(model, feeds, runs=2)
    counts = np.zeros(2, np.int32) if mask_dtype is None else (inputs[-1] != 0).sum(1)
    np.testing.assert_array_equal(got["out1"], counts)
    assert got["out1"].dtype == np.int32


def test_embed_layer_normalization_unwatched_ids_out_of_range_raise() -> None:
    from onnxviz.errors import ExecutionError
    from onnxviz.runtime.session import Session

    rng = np.random.default_rng(11)
    ids = np.array([[1, 2, 3]], np.int32)
    tables = [_f(rng, 4, 8), _f(rng, 4, 8), _f(rng, 8), _f(rng, 8)]
    inputs = [ids, None, tables[0], tables[1], None, tables[2], tables[3]]
    model, feeds = _model("EmbedLayerNormalization", inputs, 2, {}, (2, 3, 5, 6))
    session = Session(model)
    session.run(feeds)
    with pytest.raises(ExecutionError, match="word id out of range"):
        session.run({**feeds, "in0": np.array([[1, 4, 0]], np.int32)})
    session.run(feeds)  # and the next run is fine


def test_bias_gelu_unwatched_gives_the_stepped_bits() -> None:
    rng = np.random.default_rng(12)
    x, bias = _f(rng, 2, 5, 24) * 3, _f(rng, 24)
    model, feeds = _model("BiasGelu", [x, bias], 1, {}, (1,))
    assert_stepped_bits(model, feeds, runs=3)
    strided = np.asfortranarray(x)  # a fed input in another layout: the kernel's route
    assert_stepped_bits(model, {**feeds, "in0": strided}, runs=2)
