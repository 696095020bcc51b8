"""Real scikit-learn pipelines exported with skl2onnx: our kernels against onnxruntime,
and against scikit-learn's own predictions.

The exports and scikit-learn's results are committed in tests/data/exports/
(scripts/exports_for_tests.py fits the estimators; scripts/make_test_models.py --exports
regenerates them), so this test needs neither scikit-learn nor skl2onnx.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.data.exports import MANIFEST, load
from tests.runtime.nodecases import run_graph_simply

ort = pytest.importorskip("onnxruntime")


def same(expected: Any, actual: Any, rtol: float, atol: float) -> None:
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        for e, a in zip(expected, actual):
            same(e, a, rtol, atol)
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected)
        np.testing.assert_allclose(list(actual.values()), list(expected.values()), rtol, atol)
        return
    assert isinstance(actual, np.ndarray)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if expected.dtype == object:
        assert actual.tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def check(
    model: Any,
    feeds: dict[str, Any],
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> list[Any]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    inits = {i.name for i in model.graph.initializer}
    order = [i.name for i in model.graph.input if i.name not in inits]
    actual = run_graph_simply(model, [feeds[n] for n in order])
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        same(e, a, rtol, atol)
    return actual


def _names(prefix: str) -> list[str]:
    return sorted(n for n in MANIFEST if n.startswith(prefix))


CLASSIFIERS = _names("skl_classifier_")


def test_every_classifier_family_is_committed() -> None:
    # Seven estimators, each exported with and without ZipMap.
    assert len(CLASSIFIERS) == 14


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_classifiers(name: str) -> None:
    model, feeds, refs = load(name)
    labels, probs = check(model, feeds)
    assert labels.tolist() == refs["labels"].tolist()
    if name.endswith("_arrays"):
        np.testing.assert_allclose(probs, refs["probs"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "name",
    [
        "skl_regressor_forest",
        "skl_regressor_boosting",
        "skl_regressor_tree",
        "skl_regressor_linear",
    ],
)
def test_regressors(name: str) -> None:
    model, feeds, refs = load(name)
    (y,) = check(model, feeds)
    np.testing.assert_allclose(y.ravel(), refs["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["skl_multi_output_forest", "skl_multi_output_ridge"])
def test_multi_output_forest_and_ridge(name: str) -> None:
    model, feeds, refs = load(name)
    (y,) = check(model, feeds)
    np.testing.assert_allclose(y, refs["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("labels", ["binary", "three"])
def test_svc_with_probabilities(labels: str) -> None:
    model, feeds, refs = load(f"skl_svc_probabilities_{labels}")
    lab, _ = check(model, feeds, atol=1e-4)
    assert lab.tolist() == refs["labels"].tolist()  # one-vs-one votes, as libsvm predicts


def test_svc_without_probabilities_and_svr_kernels() -> None:
    model, feeds, _ = load("skl_svc_poly")
    check(model, feeds, atol=1e-4)
    for kernel in ("rbf", "linear", "sigmoid"):
        model, feeds, refs = load(f"skl_svr_{kernel}")
        (y,) = check(model, feeds, atol=1e-4)
        np.testing.assert_allclose(y.ravel(), refs["y"], rtol=1e-3, atol=1e-3)
    model, feeds, _ = load("skl_one_class_svm")
    check(model, feeds, atol=1e-4)


def test_scaling_pipeline() -> None:
    model, feeds, refs = load("skl_scaling_pipeline")
    (y,) = check(model, feeds)
    np.testing.assert_allclose(y, refs["y"], atol=1e-5)


def test_column_transformer_with_categories_and_missing_values() -> None:
    model, feeds, refs = load("skl_column_transformer")
    assert np.isnan(feeds["num"]).any()  # the imputer has work to do
    labels, _ = check(model, feeds)
    assert labels.tolist() == refs["labels"].tolist()


def test_label_encoder_and_dict_vectorizer() -> None:
    model, feeds, refs = load("skl_label_encoder")
    (codes,) = check(model, feeds)
    assert codes.tolist() == refs["codes"].tolist()

    model, feeds, refs = load("skl_dict_vectorizer")
    assert isinstance(feeds["X"], dict)
    (y,) = check(model, feeds)
    np.testing.assert_allclose(y.ravel(), refs["y"], rtol=1e-5)


def test_tfidf_text_pipeline() -> None:
    model, feeds, refs = load("skl_tfidf_logreg")
    ops = {n.op_type for n in model.graph.node}
    assert {"Tokenizer", "StringNormalizer", "TfIdfVectorizer"} <= ops
    # onnxruntime's StringNormalizer needs an en_US.UTF-8 locale that CI images often lack,
    # so the whole pipeline is checked against scikit-learn itself.
    labels, probs = run_graph_simply(model, [feeds["text"]])
    assert labels.tolist() == refs["labels"].tolist()
    np.testing.assert_allclose(probs, refs["probs"], rtol=1e-4, atol=1e-5)


def test_tokenizer_of_a_text_pipeline_against_onnxruntime() -> None:
    from onnx import helper

    model, feeds, _ = load("skl_tfidf_logreg_two_zipmap")
    node = next(n for n in model.graph.node if n.op_type == "Tokenizer")
    graph = helper.make_graph(
        [
            helper.make_node(
                "Tokenizer",
                ["s"],
                ["t"],
                domain="com.microsoft",
                **{a.name: helper.get_attribute_value(a) for a in node.attribute},
            )
        ],
        "tok",
        [helper.make_tensor_value_info("s", 8, [None, 1])],
        [helper.make_tensor_value_info("t", 8, None)],
    )
    tok = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=8,
    )
    lowered = np.char.lower(feeds["text"].astype(str)).astype(object)
    check(tok, {"s": lowered})


@pytest.mark.parametrize(
    "name",
    [
        "skl_isolation_forest",
        "skl_extra_trees_three",
        "skl_linear_svc_binary",
        "skl_linear_svc_three",
        "skl_linear_svr",
        "skl_nu_svc_three",
    ],
)
def test_more_estimators(name: str) -> None:
    model, feeds, refs = load(name)
    outputs = check(model, feeds)
    if name == "skl_linear_svr":
        np.testing.assert_allclose(outputs[0].ravel(), refs["y"], rtol=1e-4, atol=1e-4)
    else:
        assert outputs[0].ravel().tolist() == refs["y"].ravel().tolist()


def test_nearest_neighbours_with_cdist() -> None:
    model, feeds, refs = load("skl_knn_cdist")
    assert any(n.op_type == "CDist" for n in model.graph.node)
    labels, _ = check(model, feeds)
    assert labels.tolist() == refs["labels"].tolist()
