"""The compiled GroupQueryAttention common case (runtime/native/_gqa.c, routed by
kernels/contrib_gqa._attend_compiled).

* At every level this CPU has, on random calls (packed or separate QKV, prompt or decode,
  past 0 or longer, a shared cache buffer longer than the sequence, batch > 1, rotary
  interleaved or not and narrower than the head, local windows, non-causal, head sizes
  16/64/80/128, 1/2/4 query heads per KV head): the output within float32 rounding of
  the plain formula (tests/runtime/gqa_reference.py) and of the numpy path (the kernel
  off), the present caches (rotated keys, copied past, zeroed tail) bit for bit theirs.
* A NaN in a query reaches the rows that read it, as on the numpy path.
* Every other case (softcap, bias, sinks, smooth softmax, Q/K norms, ragged or padded
  lengths, position_ids in a decode step, float16 or float64, more work than the level's
  limit) runs the numpy path, with the reference's numbers.
* Wrong calls raise ValueError; with compiled kernels off native.load gives None.
* The committed onnxruntime-genai exports run with it as without it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import pytest

from onnxviz.runtime import native
from onnxviz.runtime.kernels import contrib_gqa
from onnxviz.runtime.registry import KernelContext
from tests.runtime.differential import close, stepped_values
from tests.runtime.gqa_reference import reference_gqa
from tests.runtime.native_modules import CountingAttend, at_level, compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
EXPORTERS = os.path.join(os.path.dirname(__file__), "..", "data", "exporters")
CTX = KernelContext(n_outputs=3, output_names=("out", "present_k", "present_v"))


def _module() -> Any:
    return compiled("gqa")


def _case(seed: int) -> tuple[list[np.ndarray | None], dict[str, Any]]:
    """A random call the compiled kernel takes (work under the generic level's limit)."""
    rng = np.random.default_rng(seed)
    b = int(rng.integers(1, 4))
    s = int(rng.choice([1, 1, 2, 3, 5, 8]))
    kv = int(rng.integers(1, 3))
    group = int(rng.choice([1, 2, 4]))
    head = int(rng.choice([16, 64, 80, 128]))
    heads = kv * group
    prompt = rng.random() < 0.35
    past = 0 if prompt else int(rng.choice([0, 1, 7, 20]))
    total = past + s

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    if rng.random() < 0.5:  # packed QKV
        inputs: list[np.ndarray | None] = [f(b, s, (heads + 2 * kv) * head), None, None]
    else:
        inputs = [f(b, s, heads * head), f(b, s, kv * head), f(b, s, kv * head)]
    if past == 0 and rng.random() < 0.5:
        inputs += [None, None]
    else:  # a cache buffer up to 3 rows longer than the past (the rows after are zeroed)
        rows = past + int(rng.integers(0, 4))
        inputs += [f(b, kv, rows, head), f(b, kv, rows, head)]
    extra = 0 if prompt else int(rng.integers(0, 2))  # total_sequence_length beyond the keys
    inputs += [np.full(b, total - 1, np.int32), np.array([total + extra], np.int32)]
    attrs: dict[str, Any] = {
        "num_heads": heads,
        "kv_num_heads": kv,
        "causal": int(rng.random() < 0.85),
        "local_window_size": int(rng.choice([-1, -1, 1, 3, 8])),
    }
    if rng.random() < 0.3:
        attrs["scale"] = float(rng.uniform(0.05, 0.5))
    if rng.random() < 0.75:
        half = int(rng.choice([head // 2, head // 4]))
        inputs += [f(total + 4, half), f(total + 4, half)]
        attrs.update(do_rotary=1, rotary_interleaved=int(rng.integers(0, 2)))
    return inputs, attrs


def _numpy_path(inputs: list[np.ndarray | None], attrs: dict[str, Any]) -> Any:
    saved = contrib_gqa._COMPILED
    contrib_gqa._COMPILED = None
    try:
        return contrib_gqa.group_query_attention(CTX, *inputs, **attrs)
    finally:
        contrib_gqa._COMPILED = saved


def _compiled_path(
    monkeypatch: Any, module: Any, inputs: list[np.ndarray | None], attrs: dict[str, Any]
) -> tuple[Any, int]:
    counting = CountingAttend(module)
    monkeypatch.setattr(contrib_gqa, "_COMPILED", counting)
    got = contrib_gqa.group_query_attention(CTX, *inputs, **attrs)
    return got, counting.calls


@pytest.mark.parametrize("level", LEVELS)
def test_random_calls_match_the_formula_and_the_numpy_path(monkeypatch, level: int) -> None:
    module = _module()
    module.set_level(level)
    try:
        for seed in range(120):
            inputs, attrs = _case(seed)
            got, calls = _compiled_path(monkeypatch, module, inputs, attrs)
            assert calls == 1, f"seed {seed}: the compiled kernel did not run"
            want = reference_gqa(CTX, *inputs, **attrs)
            numpy_got = _numpy_path(inputs, attrs)
            assert got[3] is None
            for i, name in enumerate(("output", "present_key", "present_value")):
                what = f"seed {seed} {name}"
                assert got[i].shape == want[i].shape and got[i].dtype == np.float32, what
            # the present caches: the same products and sums as numpy's, so the same bits
            for i in (1, 2):
                np.testing.assert_array_equal(got[i], want[i], err_msg=f"seed {seed}")
                np.testing.assert_array_equal(got[i], numpy_got[i], err_msg=f"seed {seed}")
            # the attention sums in its own order: float32 rounding of the same values
            for other in (want[0], numpy_got[0]):
                np.testing.assert_allclose(
                    got[0], other, rtol=2e-5, atol=1e-5, err_msg=f"seed {seed} {attrs}"
                )
    finally:
        module.set_level(max(LEVELS))


def test_every_level_gives_the_same_caches_and_close_outputs(monkeypatch) -> None:
    module = _module()
    inputs, attrs = _case(7)
    runs = []
    for level in LEVELS:
        module.set_level(level)
        runs.append(_compiled_path(monkeypatch, module, inputs, attrs)[0])
    module.set_level(max(LEVELS))
    for run in runs[1:]:
        np.testing.assert_array_equal(run[1], runs[0][1])
        np.testing.assert_array_equal(run[2], runs[0][2])
        np.testing.assert_allclose(run[0], runs[0][0], rtol=2e-5, atol=1e-5)


def test_a_nan_query_reaches_the_rows_that_read_it(monkeypatch) -> None:
    module = _module()
    rng = np.random.default_rng(3)
    b, s, heads, kv, head = 1, 4, 4, 2, 16
    query = rng.standard_normal((b, s, heads * head)).astype(np.float32)
    key = rng.standard_normal((b, s, kv * head)).astype(np.float32)
    value = rng.standard_normal((b, s, kv * head)).astype(np.float32)
    key[0, 2, :head] = np.nan  # the third key of KV head 0: query heads 0, 1 from row 2
    inputs = [query, key, value, None, None, np.array([s - 1], np.int32), np.array([s], np.int32)]
    attrs = {"num_heads": heads, "kv_num_heads": kv}
    got, calls = _compiled_path(monkeypatch, module, inputs, attrs)
    assert calls == 1
    numpy_got = _numpy_path(inputs, attrs)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(numpy_got[0]))
    assert np.isnan(got[0][0, 2:, : 2 * head]).all() and not np.isnan(got[0][0, :2]).any()
    close(got[0], numpy_got[0], "output")


def _other_cases() -> list[tuple[str, list[np.ndarray | None], dict[str, Any]]]:
    """Calls outside the compiled case, each from a common one changed in one way."""
    rng = np.random.default_rng(11)

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    b, s, heads, kv, head, past = 2, 3, 4, 2, 16, 5
    base: list[np.ndarray | None] = [f(b, s, heads * head), f(b, s, kv * head)]
    base += [f(b, s, kv * head), f(b, kv, past, head), f(b, kv, past, head)]
    base += [np.full(b, past + s - 1, np.int32), np.array([past + s], np.int32)]
    attrs = {"num_heads": heads, "kv_num_heads": kv}
    rotary = [f(16, head // 2), f(16, head // 2)]

    def at(index: int, value: np.ndarray, inputs: list[np.ndarray | None] = base) -> list:
        out = list(inputs) + [None] * max(0, index + 1 - len(inputs))
        out[index] = value
        return out

    ragged = at(5, np.array([past + s - 1, past + s - 3], np.int32))
    prompt = [base[0], base[1], base[2], None, None, np.array([s - 1, s - 2], np.int32)]
    prompt.append(np.array([s], np.int32))  # a padded prompt: the second entry is shorter
    positions = at(9, rng.integers(0, 16, (b, s)).astype(np.int64), [*base, *rotary])
    return [
        ("softcap", base, {**attrs, "softcap": 2.0}),
        ("smooth softmax", base, {**attrs, "smooth_softmax": 1}),
        ("head sinks", at(11, f(heads)), attrs),
        ("attention bias", at(10, f(b, 1, s, past + s)), attrs),
        ("q/k norms", at(15, f(head), at(14, f(head))), attrs),
        ("ragged past lengths", ragged, attrs),
        ("padded prompt", prompt, attrs),
        ("position_ids in a decode step", positions, {**attrs, "do_rotary": 1}),
        ("float64", [None if x is None else x.astype(np.float64) for x in base], attrs),
        ("float16", [x if x is None or i >= 5 else x.astype(np.float16) for i, x in
                     enumerate(base)], attrs),  # fmt: skip
        ("float64 past", at(4, base[4].astype(np.float64), at(3, base[3].astype(np.float64))), attrs),
    ]  # fmt: skip


@pytest.mark.parametrize("name", [c[0] for c in _other_cases()])
def test_other_cases_run_the_numpy_path(monkeypatch, name: str) -> None:
    module = _module()
    inputs, attrs = next((i, a) for n, i, a in _other_cases() if n == name)
    got, calls = _compiled_path(monkeypatch, module, inputs, attrs)
    assert calls == 0, name
    with np.errstate(all="ignore"):
        want = reference_gqa(CTX, *inputs, **attrs)
    for g, w in zip(got[:3], want[:3]):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        tol = 2e-3 if g.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("level", LEVELS)
def test_more_work_than_the_levels_limit_runs_the_numpy_path(monkeypatch, level: int) -> None:
    """Past _WORK_LIMIT the numpy path runs, but for a one-token step of grouped heads
    from AVX2 up (compiled at any size); under it, the compiled kernel."""
    module = _module()
    module.set_level(level)
    try:
        rng = np.random.default_rng(5)
        head, past = 128, 1100
        limit = contrib_gqa._WORK_LIMIT[level]
        for new, heads, kv in ((1, 32, 8), (1, 32, 32), (48, 8, 2), (1, 2, 1)):
            inputs = [
                rng.standard_normal((1, new, (heads + 2 * kv) * head)).astype(np.float32),
                None, None,
                rng.standard_normal((1, kv, past, head)).astype(np.float32),
                rng.standard_normal((1, kv, past, head)).astype(np.float32),
                np.array([past + new - 1], np.int32), np.array([past + new], np.int32),
            ]  # fmt: skip
            attrs = {"num_heads": heads, "kv_num_heads": kv}
            got, calls = _compiled_path(monkeypatch, module, inputs, attrs)
            work = heads * new * (past + (new + 1) / 2) * head
            grouped_step = new == 1 and heads > kv and level >= native.AVX2
            assert calls == (1 if work <= limit or grouped_step else 0), (new, heads, work)
            np.testing.assert_allclose(
                got[0], reference_gqa(CTX, *inputs, **attrs)[0], rtol=2e-5, atol=1e-5
            )
    finally:
        module.set_level(max(LEVELS))


def test_wrong_calls_raise() -> None:
    module = _module()
    b, s, n, kv, h = 1, 2, 2, 1, 16
    q = np.zeros((b, s, n * h), np.float32)
    k = np.zeros((b, s, kv * h), np.float32)
    present = np.zeros((b, kv, s, h), np.float32)
    out = np.zeros((b, s, n * h), np.float32)
    table = np.zeros((s, h), np.float32)

    def call(**change: Any) -> None:
        args = {
            "query": q, "key": k, "value": k, "past_key": None, "past_value": None,
            "cos": None, "sin": None, "present_key": present, "present_value": present.copy(),
            "out": out, "batch": b, "seq": s, "heads": n, "kv_heads": kv, "head": h,
            "past": 0, "rot": 0, "interleaved": False, "causal": True, "window": -1,
            "scale": 0.25,
        }  # fmt: skip
        args.update(change)
        module.attend(*args.values())

    call()  # the unchanged call is fine
    bad: list[dict[str, Any]] = [
        {"query": q[:, :1]},  # too short
        {"key": None},  # value without key
        {"value": None},
        {"query": q.astype(np.float64)},
        {"out": np.zeros((b, s, n * h - 1), np.float32)},
        {"present_key": np.zeros((b, kv, s - 1, h), np.float32)},  # too few rows
        {"past": 1},  # past rows without past caches
        {
            "past": 1,
            "past_key": np.zeros((b, kv, 0, h), np.float32),
            "past_value": np.zeros((b, kv, 0, h), np.float32),
        },  # fmt: skip
        {"rot": 16},  # no tables
        {"cos": table, "sin": table},  # tables with rot 0
        {"rot": 16, "cos": table[:1], "sin": table[:1]},  # tables too short
        {"rot": 18},
        {"heads": 3},  # not a multiple of the KV heads
        {"batch": 0},
        {"out": out.view()[:, ::-1]},  # not contiguous
    ]
    for change in bad:
        with pytest.raises((ValueError, BufferError)):
            call(**change)
    readonly = out.copy()
    readonly.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        call(out=readonly)


def test_off_means_the_numpy_path() -> None:
    with at_level("gqa", None):
        assert native.load("gqa") is None


@pytest.mark.parametrize(
    "name", ["ort_genai_llama_int4", "ort_genai_phi3_int4_past", "ort_genai_qwen2_int4_past"]
)
def test_genai_exports_with_and_without_the_kernel(monkeypatch, name: str) -> None:
    """A committed onnxruntime-genai export runs through the compiled kernel, with the
    numbers of the run without it (the differential harness' float32 tolerance)."""
    module = _module()
    module.set_level(max(LEVELS))
    path = os.path.join(EXPORTERS, name + ".onnx")
    model = onnx.load(path)
    feeds = dict(np.load(path[:-5] + ".npz"))
    monkeypatch.setattr(contrib_gqa, "_COMPILED", None)
    off = stepped_values(model, feeds)
    counting = CountingAttend(module)
    monkeypatch.setattr(contrib_gqa, "_COMPILED", counting)
    on = stepped_values(model, feeds)
    assert counting.calls == sum(n.op_type == "GroupQueryAttention" for n in model.graph.node)
    assert counting.calls > 0
    for out in model.graph.output:
        close(on[out.name], off[out.name], out.name)
