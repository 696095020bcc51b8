"""Real scikit-learn pipelines exported with skl2onnx: our kernels against onnxruntime.

The models run node by node through `run_graph_simply` (no control flow needed)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from tests.runtime.nodecases import run_graph_simply

ort = pytest.importorskip("onnxruntime")
sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.feature_extraction import DictVectorizer  # noqa: E402
from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    Binarizer,
    LabelEncoder,
    MaxAbsScaler,
    Normalizer,
    OneHotEncoder,
    StandardScaler,
)
from sklearn.svm import SVC, SVR, OneClassSVM  # noqa: E402
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402

TARGET = {"": 17, "ai.onnx.ml": 3}
RNG = np.random.default_rng(0)
X = RNG.normal(size=(120, 5)).astype(np.float32)
Y2 = np.where(X[:, 0] + X[:, 1] > 0, 7, 3)
Y3 = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.3).astype(int)
Y_STR = np.array(["cat", "dog", "eel"])[Y3]
Y_REG = X[:, 0] * 2 + np.sin(X[:, 1])


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


def export(estimator: Any, sample: Any, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(estimator, sample, target_opset=TARGET, **kw)


CLASSIFIERS = [
    (RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0), Y2),
    (RandomForestClassifier(n_estimators=8, random_state=0), Y_STR),
    (GradientBoostingClassifier(n_estimators=8, random_state=0), Y2),
    (GradientBoostingClassifier(n_estimators=5, random_state=0), Y3),
    (DecisionTreeClassifier(random_state=0), Y3),
    (LogisticRegression(), Y2),
    (LogisticRegression(), Y_STR),
]


@pytest.mark.parametrize("zipmap", [False, True])
@pytest.mark.parametrize(("estimator", "y"), CLASSIFIERS, ids=lambda v: type(v).__name__)
def test_classifiers(estimator: Any, y: np.ndarray, zipmap: bool) -> None:
    estimator.fit(X, y)
    model = export(estimator, X[:1], options={"zipmap": zipmap})
    labels, probs = check(model, {"X": X})
    assert labels.tolist() == estimator.predict(X).tolist()
    if not zipmap:
        np.testing.assert_allclose(probs, estimator.predict_proba(X), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "estimator",
    [
        RandomForestRegressor(n_estimators=8, random_state=0),
        GradientBoostingRegressor(n_estimators=10, random_state=0),
        DecisionTreeRegressor(random_state=0),
        LinearRegression(),
    ],
    ids=lambda v: type(v).__name__,
)
def test_regressors(estimator: Any) -> None:
    estimator.fit(X, Y_REG)
    (y,) = check(export(estimator, X[:1]), {"X": X})
    np.testing.assert_allclose(y.ravel(), estimator.predict(X), rtol=1e-4, atol=1e-4)


def test_multi_output_forest_and_ridge() -> None:
    targets = np.stack([Y_REG, X[:, 2] - X[:, 3]], axis=1)
    for est in (RandomForestRegressor(n_estimators=5, random_state=0), Ridge()):
        est.fit(X, targets)
        (y,) = check(export(est, X[:1]), {"X": X})
        np.testing.assert_allclose(y, est.predict(X), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("labels", [Y2, Y3], ids=["binary", "three"])
def test_svc_with_probabilities(labels: np.ndarray) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SVC(probability=True, random_state=0).fit(X, labels)
    lab, probs = check(export(est, X[:1], options={"zipmap": False}), {"X": X}, atol=1e-4)
    assert lab.tolist() == est.predict(X).tolist()  # one-vs-one votes, as libsvm predicts


def test_svc_without_probabilities_and_svr_kernels() -> None:
    est = SVC(kernel="poly", degree=2).fit(X, Y3)
    check(export(est, X[:1], options={"zipmap": False}), {"X": X}, atol=1e-4)
    for kernel in ("rbf", "linear", "sigmoid"):
        reg = SVR(kernel=kernel).fit(X, Y_REG)
        (y,) = check(export(reg, X[:1]), {"X": X}, atol=1e-4)
        np.testing.assert_allclose(y.ravel(), reg.predict(X), rtol=1e-3, atol=1e-3)
    one = OneClassSVM(gamma=0.5).fit(X)
    check(export(one, X[:1]), {"X": X}, atol=1e-4)


def test_scaling_pipeline() -> None:
    pipe = make_pipeline(StandardScaler(), Normalizer(), MaxAbsScaler(), Binarizer(threshold=0.1))
    pipe.fit(X)
    (y,) = check(export(pipe, X[:1]), {"X": X})
    np.testing.assert_allclose(y, pipe.transform(X), atol=1e-5)


def test_column_transformer_with_categories_and_missing_values() -> None:
    num = X[:, :3].copy()
    num[RNG.random(num.shape) < 0.2] = np.nan
    cat = np.array(RNG.choice(["red", "green", "blue"], size=(X.shape[0], 2)), dtype=object)
    pre = ColumnTransformer(
        [
            ("num", SimpleImputer(strategy="median"), [0, 1, 2]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), [3, 4]),
        ]
    )
    frame_like = np.concatenate([num.astype(object), cat], axis=1)
    pipe = Pipeline([("pre", pre), ("clf", LogisticRegression())]).fit(frame_like, Y2)
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = skl2onnx.convert_sklearn(
            pipe,
            initial_types=[
                ("num", FloatTensorType([None, 3])),
                ("cat", StringTensorType([None, 2])),
            ],
            target_opset=TARGET,
            options={id(pipe): {"zipmap": False}},
        )
    # ColumnTransformer column indices refer to the concatenated frame, rename for skl2onnx.
    feeds = {"num": num.astype(np.float32), "cat": cat}
    labels, _ = check(model, feeds)
    assert labels.tolist() == pipe.predict(frame_like).tolist()


def test_label_encoder_and_dict_vectorizer() -> None:
    words = np.array(["b", "a", "c", "a"])
    enc = LabelEncoder().fit(words)
    (codes,) = check(export(enc, words[:1].astype(object)), {"X": words.astype(object)})
    assert codes.tolist() == enc.transform(words).tolist()

    dicts = [{"a": 1.0, "b": 2.0}, {"b": 3.0, "c": 4.0}]
    pipe = make_pipeline(DictVectorizer(sparse=False), LinearRegression()).fit(dicts, [1.0, 2.0])
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = skl2onnx.convert_sklearn(
            pipe,
            initial_types=[("X", DictionaryType(StringTensorType([1]), FloatTensorType([1])))],
            target_opset=TARGET,
        )
    (y,) = check(model, {"X": {"a": 2.0, "c": 1.0}})
    np.testing.assert_allclose(y.ravel(), pipe.predict([{"a": 2.0, "c": 1.0}]), rtol=1e-5)


def test_tfidf_text_pipeline() -> None:
    corpus = np.array(
        [
            "The quick brown fox jumps",
            "the lazy dog sleeps all day",
            "Quick thinking, quick acting!",
            "a dog and a fox are friends",
        ]
    )
    pipe = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(corpus, [0, 1, 0, 1])
    from skl2onnx.common.data_types import StringTensorType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = skl2onnx.convert_sklearn(
            pipe,
            initial_types=[("text", StringTensorType([None, 1]))],
            target_opset=TARGET,
            options={id(pipe): {"zipmap": False}},
        )
    ops = {n.op_type for n in model.graph.node}
    assert {"Tokenizer", "StringNormalizer", "TfIdfVectorizer"} <= ops
    # onnxruntime's StringNormalizer needs an en_US.UTF-8 locale that CI images often lack,
    # so the whole pipeline is checked against scikit-learn itself.
    labels, probs = run_graph_simply(model, [corpus.reshape(-1, 1).astype(object)])
    assert labels.tolist() == pipe.predict(corpus).tolist()
    np.testing.assert_allclose(probs, pipe.predict_proba(corpus), rtol=1e-4, atol=1e-5)


def test_tokenizer_of_a_text_pipeline_against_onnxruntime() -> None:
    from onnx import helper

    corpus = np.array([["The quick brown fox"], ["Quick thinking, quick acting!"]], dtype=object)
    pipe = make_pipeline(TfidfVectorizer(), LogisticRegression())
    pipe.fit(corpus.ravel(), [0, 1])
    from skl2onnx.common.data_types import StringTensorType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = skl2onnx.convert_sklearn(
            pipe, initial_types=[("text", StringTensorType([None, 1]))], target_opset=TARGET
        )
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
    lowered = np.char.lower(corpus.astype(str)).astype(object)
    check(tok, {"s": lowered})


def _more_estimators() -> list[tuple[Any, Any]]:
    from sklearn.ensemble import ExtraTreesClassifier, IsolationForest
    from sklearn.svm import LinearSVC, LinearSVR, NuSVC

    return [
        (IsolationForest(n_estimators=10, random_state=0), None),
        (ExtraTreesClassifier(n_estimators=5, random_state=0), Y3),
        (LinearSVC(), Y2),
        (LinearSVC(), Y3),
        (LinearSVR(), Y_REG),
        (NuSVC(), Y3),
    ]


@pytest.mark.parametrize(("estimator", "y"), _more_estimators(), ids=lambda v: type(v).__name__)
def test_more_estimators(estimator: Any, y: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(X) if y is None else estimator.fit(X, y)
    options = {"zipmap": False} if hasattr(estimator, "predict_proba") else None
    outputs = check(export(estimator, X[:1], options=options), {"X": X})
    if y is Y_REG:
        np.testing.assert_allclose(outputs[0].ravel(), estimator.predict(X), rtol=1e-4, atol=1e-4)
    else:
        assert outputs[0].ravel().tolist() == estimator.predict(X).ravel().tolist()


def test_nearest_neighbours_with_cdist() -> None:
    from sklearn.neighbors import KNeighborsClassifier

    knn = KNeighborsClassifier(n_neighbors=3).fit(X[:60], Y3[:60])
    model = export(knn, X[:1], options={"optim": "cdist", "zipmap": False})
    assert any(n.op_type == "CDist" for n in model.graph.node)
    labels, _ = check(model, {"X": X[60:]})
    assert labels.tolist() == knn.predict(X[60:]).tolist()
