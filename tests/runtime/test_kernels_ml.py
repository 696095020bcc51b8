"""ai.onnx.ml kernels: ONNX backend node tests, hand-built models against onnxruntime,
random tree ensembles exercising every branch mode, aggregate and missing-value rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import TensorProto, helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.registry import registered, resolve
from tests.runtime.nodecases import cases_for, check_case, run_graph_simply

ort = pytest.importorskip("onnxruntime")

ML = "ai.onnx.ml"
ML_OPS = sorted({s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ML})
RNG = np.random.default_rng(7)


# --------------------------------------------------------------------------- coverage


def test_every_ml_schema_version_has_a_kernel() -> None:
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain != ML:
            continue
        spec = resolve(ML, schema.name, schema.since_version)
        assert spec is not None, schema.name
        assert spec.since_version == schema.since_version, (schema.name, schema.since_version)


def test_contrib_ops_are_registered() -> None:
    reg = registered()
    for op in (
        "Tokenizer",
        "Gelu",
        "FastGelu",
        "BiasGelu",
        "QuickGelu",
        "BiasAdd",
        "FusedMatMul",
        "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "SimplifiedLayerNormalization",
        "LayerNormalization",
        "EmbedLayerNormalization",
        "Attention",
        "MatMulNBits",
    ):
        assert ("com.microsoft", op) in reg, op


@pytest.mark.parametrize("case", list(cases_for(ML_OPS)), ids=lambda c: c.name)
def test_onnx_backend_node_case(case: Any) -> None:
    status, detail = check_case(case)
    assert status == "pass", detail


# --------------------------------------------------------------------------- harness


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if isinstance(value, dict):
        key = next(iter(value))
        key_type = TensorProto.STRING if isinstance(key, str) else TensorProto.INT64
        val = next(iter(value.values()))
        if isinstance(val, str):
            val_type = TensorProto.STRING
        elif isinstance(val, (int, np.integer)):
            val_type = TensorProto.INT64
        elif isinstance(val, np.float64):
            val_type = TensorProto.DOUBLE
        else:
            val_type = TensorProto.FLOAT
        map_type = helper.make_map_type_proto(
            key_type, helper.make_tensor_type_proto(val_type, None)
        )
        return helper.make_value_info(name, map_type)
    arr = np.asarray(value)
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape
    )


def ml_model(
    op: str, inputs: list[Any], n_out: int = 1, ml_opset: int = 3, **attrs: Any
) -> onnx.ModelProto:
    names = [f"in{k}" for k in range(len(inputs))]
    outs = [f"out{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, domain=ML, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [_value_info(n, v) for n, v in zip(names, inputs)],
        [onnx.ValueInfoProto(name=o) for o in outs],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)],
        ir_version=8,
    )


def assert_same(expected: Any, actual: Any, rtol: float, atol: float) -> None:
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        for e, a in zip(expected, actual):
            assert_same(e, a, rtol, atol)
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected)
        np.testing.assert_allclose(list(actual.values()), list(expected.values()), rtol, atol)
        return
    assert isinstance(actual, np.ndarray)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if expected.dtype == object:
        assert actual.tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def compare_with_ort(
    op: str,
    inputs: list[Any],
    n_out: int = 1,
    ml_opset: int = 3,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    **attrs: Any,
) -> list[Any]:
    model = ml_model(op, inputs, n_out, ml_opset, **attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {f"in{k}": v for k, v in enumerate(inputs)})
    actual = run_graph_simply(model, inputs)
    for e, a in zip(expected, actual):
        assert_same(e, a, rtol, atol)
    return actual


def run_ours(op: str, inputs: list[Any], n_out: int = 1, ml_opset: int = 3, **attrs: Any) -> Any:
    return run_graph_simply(ml_model(op, inputs, n_out, ml_opset, **attrs), inputs)


X = RNG.normal(size=(6, 4)).astype(np.float32)


# --------------------------------------------------------------------------- preprocessing


def test_array_feature_extractor() -> None:
    compare_with_ort("ArrayFeatureExtractor", [X, np.array([2, 0], np.int64)])
    compare_with_ort("ArrayFeatureExtractor", [X[0], np.array([3], np.int64)])
    words = np.array([["a", "b", "c"], ["d", "e", "f"]], object)
    compare_with_ort("ArrayFeatureExtractor", [words, np.array([1, 1], np.int64)])
    with pytest.raises(ExecutionError, match="out of range"):
        run_ours("ArrayFeatureExtractor", [X, np.array([4], np.int64)])


def test_binarizer_scaler_normalizer() -> None:
    compare_with_ort("Binarizer", [X], threshold=0.25)
    compare_with_ort("Scaler", [X], offset=[0.5, -1.0, 0.0, 2.0], scale=[2.0, 0.5, 1.0, -1.0])
    compare_with_ort("Scaler", [X.astype(np.float64)], offset=[0.5], scale=[3.0])
    with_zero = np.vstack([X, np.zeros((1, 4), np.float32)])
    for norm in ("MAX", "L1", "L2"):
        compare_with_ort("Normalizer", [with_zero], norm=norm)
    compare_with_ort("Normalizer", [np.arange(12, dtype=np.int64).reshape(3, 4)], norm="L2")


def test_imputer() -> None:
    x = X.copy()
    x[1, 2] = np.nan
    x[4, 0] = np.nan
    compare_with_ort("Imputer", [x], imputed_value_floats=[9.0], replaced_value_float=np.nan)
    compare_with_ort(
        "Imputer", [x], imputed_value_floats=[1.0, 2.0, 3.0, 4.0], replaced_value_float=np.nan
    )
    ints = np.array([[1, -1, 3], [-1, 5, -1]], np.int64)
    compare_with_ort("Imputer", [ints], imputed_value_int64s=[7, 8, 9], replaced_value_int64=-1)


def test_one_hot_encoder() -> None:
    words = np.array([["b", "z"], ["a", "c"]], object)
    compare_with_ort("OneHotEncoder", [words], cats_strings=["a", "b", "c"])
    ints = np.array([[3, 1, 9]], np.int64)
    compare_with_ort("OneHotEncoder", [ints], cats_int64s=[1, 2, 3])
    compare_with_ort("OneHotEncoder", [np.array([1.0, 3.0], np.float32)], cats_int64s=[3, 1])
    with pytest.raises(ExecutionError, match="categories"):
        run_ours("OneHotEncoder", [ints], cats_int64s=[1, 2, 3], zeros=0)


def test_feature_vectorizer_truncates_and_pads() -> None:
    # One element type for all inputs (the schema binds T1 once).
    a, b, c = X[:, :3], X[:, 1:3] * 2, X
    compare_with_ort("FeatureVectorizer", [a, b, c], inputdimensions=[3, 4, 2])
    ints = np.arange(12, dtype=np.int64).reshape(6, 2)
    compare_with_ort("FeatureVectorizer", [ints, ints], inputdimensions=[1, 2])


# --------------------------------------------------------------------------- encoders


def test_label_encoder_v1() -> None:
    words = np.array(["b", "x", "a"], object)
    compare_with_ort(
        "LabelEncoder", [words], ml_opset=1, classes_strings=["a", "b", "c"], default_int64=-7
    )
    compare_with_ort(
        "LabelEncoder",
        [np.array([0, 2, 5, -1], np.int64)],
        ml_opset=1,
        classes_strings=["a", "b", "c"],
        default_string="?",
    )


def test_label_encoder_v2_lists() -> None:
    floats = np.array([[1.5, 2.0], [np.nan, 7.0]], np.float32)
    attrs = {"keys_floats": [1.5, 7.0, np.nan], "values_strings": ["x", "y", "nan"]}
    no_nan = np.nan_to_num(floats)
    compare_with_ort("LabelEncoder", [no_nan], ml_opset=2, default_string="none", **attrs)
    # A NaN key maps NaN inputs (bit-wise comparison in opset 2, "any NaN" in opset 4;
    # onnxruntime's opset-2 kernel misses it).
    for opset in (2, 4):
        (ours,) = run_ours("LabelEncoder", [floats], ml_opset=opset, default_string="none", **attrs)
        assert ours.tolist() == [["x", "none"], ["nan", "y"]]
    compare_with_ort(
        "LabelEncoder",
        [np.array(["Dori", "Amy", "Sally"], object)],
        ml_opset=2,
        keys_strings=["Amy", "Sally"],
        values_int64s=[5, 6],
    )
    compare_with_ort(
        "LabelEncoder",
        [np.array([3, 4, 5], np.int64)],
        ml_opset=2,
        keys_int64s=[3, 5],
        values_floats=[0.5, 1.5],
    )


def test_label_encoder_v4_tensors_and_duplicate_keys() -> None:
    values = helper.make_tensor("v", TensorProto.DOUBLE, [3], [10.0, 20.0, 30.0])
    default = helper.make_tensor("d", TensorProto.DOUBLE, [1], [-2.5])
    x = np.array([1, 2, 3, 7], np.int64)
    compare_with_ort(
        "LabelEncoder",
        [x],
        ml_opset=4,
        keys_tensor=helper.make_tensor("k", TensorProto.INT64, [3], [1, 2, 7]),
        values_tensor=values,
        default_tensor=default,
    )
    # The last of duplicated keys wins (spec, opset 4; onnxruntime keeps the first).
    (out,) = run_ours(
        "LabelEncoder",
        [x.astype(np.int16)],
        ml_opset=4,
        keys_tensor=helper.make_tensor("k", TensorProto.INT16, [3], [1, 2, 1]),
        values_tensor=values,
        default_tensor=default,
    )
    assert out.dtype == np.float64 and out.tolist() == [30.0, 20.0, -2.5, -2.5]


def test_category_mapper_both_ways() -> None:
    attrs = {"cats_strings": ["cat", "dog"], "cats_int64s": [1, 2]}
    compare_with_ort("CategoryMapper", [np.array(["dog", "cow"], object)], **attrs)
    compare_with_ort(
        "CategoryMapper", [np.array([[1, 3], [2, 2]], np.int64)], default_string="?", **attrs
    )


# --------------------------------------------------------------------------- maps


def test_zip_map() -> None:
    out = compare_with_ort("ZipMap", [X[:, :3]], classlabels_strings=["a", "b", "c"])
    assert isinstance(out[0], list) and len(out[0]) == 6
    compare_with_ort("ZipMap", [X[:, :2]], classlabels_int64s=[10, 20])


def test_dict_vectorizer() -> None:
    compare_with_ort(
        "DictVectorizer", [{"a": 1.5, "c": 2.0}], string_vocabulary=["a", "b", "c", "a"]
    )
    compare_with_ort("DictVectorizer", [{3: 1.0, 1: 4.0}], int64_vocabulary=[1, 2, 3])


def test_cast_map() -> None:
    floats = {3: 1.5, 0: 2.0, 1: -1.0}
    compare_with_ort("CastMap", [floats], cast_to="TO_FLOAT")
    compare_with_ort("CastMap", [floats], cast_to="TO_INT64", map_form="SPARSE", max_map=5)
    compare_with_ort("CastMap", [floats], cast_to="TO_STRING")
    # onnxruntime's Python API cannot feed map(int64, string): check the spec directly.
    (y,) = run_ours(
        "CastMap", [{2: "4.5", 0: "1"}], cast_to="TO_FLOAT", map_form="SPARSE", max_map=4
    )
    assert y.dtype == np.float32 and y.tolist() == [[1.0, 0.0, 4.5, 0.0]]


# --------------------------------------------------------------------------- linear / svm


def test_linear_classifier_and_regressor() -> None:
    coef = RNG.normal(size=12).tolist()
    for post in ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"):
        compare_with_ort(
            "LinearClassifier",
            [X],
            2,
            coefficients=coef,
            intercepts=[0.1, -0.2, 0.3],
            classlabels_strings=["x", "y", "z"],
            post_transform=post,
        )
    compare_with_ort("LinearRegressor", [X], coefficients=coef[:4], intercepts=[0.5], targets=1)
    compare_with_ort(
        "LinearRegressor",
        [X],
        coefficients=coef[:8],
        intercepts=[0.5, 1.0],
        targets=2,
        post_transform="SOFTMAX",
    )


def test_linear_classifier_single_score_column() -> None:
    # One coefficient row and two labels: scores are [-s, s] and the label is s > 0
    # (reference semantics; onnxruntime writes [1 - s, s] here, see ml_linear.py).
    coef = [1.0, -2.0, 0.5, 0.0]
    label, scores = run_ours(
        "LinearClassifier", [X], 2, coefficients=coef, intercepts=[0.2], classlabels_ints=[4, 9]
    )
    s = X.astype(np.float64) @ np.array(coef) + 0.2
    assert label.tolist() == np.where(s > 0, 9, 4).tolist()
    np.testing.assert_allclose(scores, np.stack([-s, s], 1), rtol=1e-5)


def test_svm_linear_mode_and_regressor_one_class() -> None:
    coef = RNG.normal(size=8).tolist()
    compare_with_ort(
        "SVMClassifier",
        [X],
        2,
        coefficients=coef,
        rho=[0.2],
        classlabels_ints=[0, 1],
        kernel_type="LINEAR",
        kernel_params=[0.0, 0.0, 0.0],
    )
    compare_with_ort(
        "SVMRegressor", [X], coefficients=coef[:4], rho=[0.1], kernel_params=[0.5, 0.0, 3.0]
    )
    sv = RNG.normal(size=12).tolist()
    compare_with_ort(
        "SVMRegressor",
        [X],
        coefficients=[0.5, -1.0, 0.25],
        support_vectors=sv,
        n_supports=3,
        rho=[0.3],
        kernel_type="RBF",
        kernel_params=[0.4, 0.0, 3.0],
        one_class=1,
    )


@pytest.mark.parametrize("kernel_type", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_classifier_kernels_three_classes(kernel_type: str) -> None:
    sv = RNG.normal(size=(7, 4))
    compare_with_ort(
        "SVMClassifier",
        [X],
        2,
        coefficients=RNG.normal(size=14).tolist(),
        support_vectors=sv.ravel().tolist(),
        vectors_per_class=[2, 3, 2],
        rho=[0.1, -0.2, 0.05],
        kernel_type=kernel_type,
        kernel_params=[0.3, 0.5, 2.0],
        classlabels_strings=["a", "b", "c"],
        rtol=1e-4,
        atol=1e-4,
    )


# --------------------------------------------------------------------------- trees


MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def random_forest(
    n_trees: int,
    depth: int,
    n_features: int,
    n_targets: int,
    x: np.ndarray,
    modes: list[str],
    all_targets: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Random full binary trees in the TreeEnsembleRegressor encoding.  Thresholds are
    sample values, so the EQ/NEQ modes take both branches.  With ``all_targets`` every leaf
    votes for every target (as exported models do), else for a random subset.  Its own
    generator keeps each test's forest independent of which tests ran before."""
    rng = np.random.default_rng(seed)
    attrs: dict[str, list[Any]] = {
        k: []
        for k in (
            "nodes_treeids",
            "nodes_nodeids",
            "nodes_featureids",
            "nodes_modes",
            "nodes_values",
            "nodes_truenodeids",
            "nodes_falsenodeids",
            "nodes_missing_value_tracks_true",
            "target_treeids",
            "target_nodeids",
            "target_ids",
            "target_weights",
        )
    }
    for tree in range(n_trees):
        n_nodes = 2 ** (depth + 1) - 1
        for node in range(n_nodes):
            attrs["nodes_treeids"].append(tree)
            attrs["nodes_nodeids"].append(node)
            interior = node < 2**depth - 1
            feature = int(rng.integers(0, n_features))
            attrs["nodes_featureids"].append(feature if interior else 0)
            attrs["nodes_modes"].append(str(rng.choice(modes)) if interior else "LEAF")
            attrs["nodes_values"].append(float(rng.choice(x[:, feature])) if interior else 0.0)
            attrs["nodes_truenodeids"].append(2 * node + 1 if interior else 0)
            attrs["nodes_falsenodeids"].append(2 * node + 2 if interior else 0)
            attrs["nodes_missing_value_tracks_true"].append(int(rng.integers(0, 2)))
            if not interior:
                count = n_targets if all_targets else int(rng.integers(1, n_targets + 1))
                for target in rng.choice(n_targets, size=count, replace=False):
                    attrs["target_treeids"].append(tree)
                    attrs["target_nodeids"].append(node)
                    attrs["target_ids"].append(int(target))
                    attrs["target_weights"].append(float(rng.normal()))
    return attrs


XT = np.round(RNG.normal(size=(40, 5)), 1).astype(np.float32)  # repeated values for EQ/NEQ
XT_NAN = XT.copy()
XT_NAN[RNG.random(XT.shape) < 0.15] = np.nan


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("modes", [["BRANCH_LEQ"], MODES])
def test_tree_regressor_modes_aggregates_missing(aggregate: str, modes: list[str]) -> None:
    attrs = random_forest(4, 3, 5, 3, XT, modes)
    for x in (XT, XT_NAN):
        compare_with_ort(
            "TreeEnsembleRegressor",
            [x],
            n_targets=3,
            aggregate_function=aggregate,
            base_values=[0.5, -1.0, 2.0],
            **attrs,
        )


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_tree_regressor_post_transforms(post: str) -> None:
    attrs = random_forest(3, 2, 5, 2, XT, ["BRANCH_LEQ"])
    if post == "PROBIT":  # probit needs scores in (0, 1)
        attrs["target_weights"] = [abs(w) / 4 for w in attrs["target_weights"]]
    # PROBIT is ill-conditioned near 0.5 (1 - y*y cancels in float32): one ulp of difference
    # in the summed score moves it by up to ~1e-3, the approximation's own error.
    compare_with_ort(
        "TreeEnsembleRegressor",
        [XT],
        n_targets=2,
        post_transform=post,
        rtol=1e-4,
        atol=2e-3 if post == "PROBIT" else 1e-5,
        **attrs,
    )


def test_tree_regressor_double_thresholds_as_tensor() -> None:
    attrs = random_forest(3, 3, 5, 1, XT, ["BRANCH_LT"])
    values = attrs.pop("nodes_values")
    weights = attrs.pop("target_weights")
    compare_with_ort(
        "TreeEnsembleRegressor",
        [XT.astype(np.float64)],
        n_targets=1,
        nodes_values_as_tensor=helper.make_tensor("v", TensorProto.DOUBLE, [len(values)], values),
        target_weights_as_tensor=helper.make_tensor(
            "w", TensorProto.DOUBLE, [len(weights)], weights
        ),
        base_values_as_tensor=helper.make_tensor("b", TensorProto.DOUBLE, [1], [0.25]),
        **attrs,
    )


def test_tree_classifier_multiclass_and_binary_rules() -> None:
    attrs = random_forest(3, 3, 5, 3, XT, MODES)
    renamed = {
        k.replace("target_", "class_"): v for k, v in attrs.items() if k.startswith("target_")
    }
    nodes = {k: v for k, v in attrs.items() if k.startswith("nodes_")}
    for post in ("NONE", "SOFTMAX", "LOGISTIC"):
        compare_with_ort(
            "TreeEnsembleClassifier",
            [XT_NAN],
            2,
            classlabels_strings=["a", "b", "c"],
            post_transform=post,
            base_values=[0.1, 0.2, 0.3],
            **nodes,
            **renamed,
        )
    # Binary, votes for class 0 only: probabilities (all weights >= 0) and margins.
    n_votes = len(renamed["class_ids"])
    for weights, post in (
        (RNG.random(n_votes).tolist(), "NONE"),
        (RNG.normal(size=n_votes).tolist(), "LOGISTIC"),
        (RNG.normal(size=n_votes).tolist(), "NONE"),
    ):
        binary = dict(renamed, class_ids=[0] * n_votes, class_weights=weights)
        compare_with_ort(
            "TreeEnsembleClassifier",
            [XT],
            2,
            classlabels_int64s=[3, 8],
            post_transform=post,
            **nodes,
            **binary,
        )


def to_tree_ensemble_v5(attrs: dict[str, Any]) -> dict[str, Any]:
    """The same forest (from `random_forest`, one vote per leaf) in TreeEnsemble form."""
    codes = {m: i for i, m in enumerate(MODES)}
    interior: dict[tuple[int, int], int] = {}
    leaves: dict[tuple[int, int], int] = {}
    for t, n, mode in zip(attrs["nodes_treeids"], attrs["nodes_nodeids"], attrs["nodes_modes"]):
        (leaves if mode == "LEAF" else interior)[(t, n)] = len(
            leaves if mode == "LEAF" else interior
        )
    out: dict[str, list[Any]] = {
        k: [] for k in ("feat", "split", "mode", "tid", "fid", "tl", "fl", "missing")
    }
    roots = []
    for i, (t, n) in enumerate(zip(attrs["nodes_treeids"], attrs["nodes_nodeids"])):
        if (t, n) not in interior:
            continue
        if n == 0:
            roots.append(interior[(t, n)])
        out["feat"].append(attrs["nodes_featureids"][i])
        out["split"].append(attrs["nodes_values"][i])
        out["mode"].append(codes[attrs["nodes_modes"][i]])
        out["missing"].append(attrs["nodes_missing_value_tracks_true"][i])
        for child, ids, flags in (
            (attrs["nodes_truenodeids"][i], "tid", "tl"),
            (attrs["nodes_falsenodeids"][i], "fid", "fl"),
        ):
            is_leaf = (t, child) in leaves
            out[ids].append(leaves[(t, child)] if is_leaf else interior[(t, child)])
            out[flags].append(int(is_leaf))
    leaf_target = [0] * len(leaves)
    leaf_weight = [0.0] * len(leaves)
    for t, n, target, w in zip(
        attrs["target_treeids"],
        attrs["target_nodeids"],
        attrs["target_ids"],
        attrs["target_weights"],
    ):
        leaf_target[leaves[(t, n)]] = target
        leaf_weight[leaves[(t, n)]] = w
    return {
        "nodes_featureids": out["feat"],
        "nodes_splits": helper.make_tensor(
            "s", TensorProto.FLOAT, [len(out["split"])], out["split"]
        ),
        "nodes_modes": helper.make_tensor("m", TensorProto.UINT8, [len(out["mode"])], out["mode"]),
        "nodes_truenodeids": out["tid"],
        "nodes_falsenodeids": out["fid"],
        "nodes_trueleafs": out["tl"],
        "nodes_falseleafs": out["fl"],
        "nodes_missing_value_tracks_true": out["missing"],
        "leaf_targetids": leaf_target,
        "leaf_weights": helper.make_tensor("w", TensorProto.FLOAT, [len(leaf_weight)], leaf_weight),
        "tree_roots": roots,
    }


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_v5_matches_onnxruntime_and_legacy_encoding(aggregate: int) -> None:
    attrs = random_forest(3, 3, 5, 2, XT, MODES)
    # One vote per leaf (the TreeEnsemble leaf format).
    keep: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(attrs["target_treeids"], attrs["target_nodeids"])):
        keep.setdefault(key, i)
    for k in ("target_treeids", "target_nodeids", "target_ids", "target_weights"):
        attrs[k] = [attrs[k][i] for i in keep.values()]
    v5 = to_tree_ensemble_v5(attrs)
    (ours,) = compare_with_ort(
        "TreeEnsemble", [XT_NAN], ml_opset=5, n_targets=2, aggregate_function=aggregate, **v5
    )
    name = ["AVERAGE", "SUM", "MIN", "MAX"][aggregate]
    (legacy,) = run_ours(
        "TreeEnsembleRegressor", [XT_NAN], n_targets=2, aggregate_function=name, **attrs
    )
    np.testing.assert_allclose(ours, legacy, rtol=1e-6)


def test_tree_ensemble_v5_double_and_membership() -> None:
    # One tree: x0 in {1, 3} ? (x1 <= 0.5 ? 10 : 20) : 30
    v5 = {
        "nodes_featureids": [0, 1],
        "nodes_splits": helper.make_tensor("s", TensorProto.DOUBLE, [2], [0.0, 0.5]),
        "nodes_modes": helper.make_tensor("m", TensorProto.UINT8, [2], [6, 0]),
        "nodes_truenodeids": [1, 0],
        "nodes_falsenodeids": [2, 1],
        "nodes_trueleafs": [0, 1],
        "nodes_falseleafs": [1, 1],
        "leaf_targetids": [0, 0, 0],
        "leaf_weights": helper.make_tensor("w", TensorProto.DOUBLE, [3], [10.0, 20.0, 30.0]),
        "tree_roots": [0],
        "membership_values": helper.make_tensor("mv", TensorProto.DOUBLE, [3], [1.0, 3.0, np.nan]),
    }
    x = np.array([[1, 0], [3, 1], [2, 0], [np.nan, 0]], np.float64)
    (y,) = compare_with_ort("TreeEnsemble", [x], ml_opset=5, n_targets=1, **v5)
    assert y.dtype == np.float64
    assert y.ravel().tolist() == [10.0, 20.0, 30.0, 30.0]


def test_tree_errors_are_clear() -> None:
    attrs = random_forest(1, 2, 5, 1, XT, ["BRANCH_LEQ"])
    with pytest.raises(ExecutionError, match="features"):
        run_ours("TreeEnsembleRegressor", [XT[:, :2]], n_targets=1, **attrs)
    broken = dict(attrs, nodes_truenodeids=[99] + attrs["nodes_truenodeids"][1:])
    with pytest.raises(ExecutionError, match="does not exist"):
        run_ours("TreeEnsembleRegressor", [XT], n_targets=1, **broken)
    cyclic = dict(attrs, nodes_truenodeids=[0] + attrs["nodes_truenodeids"][1:])
    with pytest.raises(ExecutionError, match="cycle"):
        run_ours("TreeEnsembleRegressor", [XT], n_targets=1, **cyclic)


def test_tree_ensemble_compiled_once_per_attribute_set() -> None:
    from onnxviz.runtime.kernels import ml_tree_engine, ml_trees

    attrs = random_forest(2, 2, 5, 1, XT, ["BRANCH_LEQ"])
    kw = dict(attrs, n_targets=1)
    calls = []
    original = ml_tree_engine.compile_ensemble

    def counting(structure: Any) -> Any:
        calls.append(1)
        return original(structure)

    ml_trees.compile_ensemble = counting  # type: ignore[assignment]
    try:
        first = ml_trees.tree_ensemble_regressor(XT, **kw)
        second = ml_trees.tree_ensemble_regressor(XT, **kw)
    finally:
        ml_trees.compile_ensemble = original  # type: ignore[assignment]
    assert len(calls) == 1
    np.testing.assert_array_equal(first, second)


def test_tree_regressor_base_value_for_target_without_votes() -> None:
    # Spec: base values are added to the final score of every target.  (onnxruntime writes 0
    # for a target that no leaf voted for; exported models have every leaf vote for all.)
    tree = {
        "nodes_treeids": [0, 0, 0],
        "nodes_nodeids": [0, 1, 2],
        "nodes_featureids": [0, 0, 0],
        "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
        "nodes_values": [0.0, 0.0, 0.0],
        "nodes_truenodeids": [1, 0, 0],
        "nodes_falsenodeids": [2, 0, 0],
        "target_treeids": [0, 0],
        "target_nodeids": [1, 2],
        "target_ids": [0, 0],
        "target_weights": [5.0, 7.0],
    }
    x = np.array([[-1.0], [1.0]], np.float32)
    (y,) = run_ours("TreeEnsembleRegressor", [x], n_targets=2, base_values=[1.0, 2.0], **tree)
    assert y.tolist() == [[6.0, 2.0], [8.0, 2.0]]


def test_tree_scoring_in_small_blocks_matches_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxviz.runtime.kernels import ml_tree_engine

    attrs = random_forest(4, 3, 5, 2, XT, MODES, seed=3)
    (whole,) = run_ours("TreeEnsembleRegressor", [XT_NAN], n_targets=2, **attrs)
    monkeypatch.setattr(ml_tree_engine, "_PAIRS_PER_BLOCK", 9)  # 2 rows per block
    monkeypatch.setattr(ml_tree_engine, "_PAIRS_PER_CHUNK", 5)  # 1 row per traversal chunk
    (blocked,) = run_ours("TreeEnsembleRegressor", [XT_NAN], n_targets=2, **attrs)
    np.testing.assert_array_equal(whole, blocked)
