"""The exported models the unit tests read, built by the exporters users use.

tests/data/exports/ holds their output (``<name>.onnx`` and ``<name>.npz``: the inputs
under ``feed:<input>``, the exporting library's own results under ``ref:<what>``), made by
``scripts/make_test_models.py --exports``.  The tests read those files, so that the test
command never installs PyTorch or scikit-learn; this module is the only place that
imports them, when the files are regenerated.

Each builder returns ``(model, feeds, refs)``.  The modules and estimators are the ones
the tests once exported at test time (tests/runtime/test_torch_exports.py,
tests/runtime/test_sklearn_models.py, tests/runtime/test_benchmark_models.py,
tests/check/test_exporters.py); keep them small, a few hundred KB at most each.
"""

from __future__ import annotations

import io
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

Built = tuple[onnx.ModelProto, dict[str, Any], dict[str, Any]]


# -- torch (the TorchScript exporter, opset 17) -------------------------------------------------
def _torch_export(module: Any, args: tuple[Any, ...], **kwargs: Any) -> onnx.ModelProto:
    import torch

    buf = io.BytesIO()
    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=17, **kwargs)
    return onnx.load_from_string(buf.getvalue())


def torch_builders() -> dict[str, Callable[[], Built]]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    # The fused "fast path" of nn.TransformerEncoderLayer has no ONNX export; the plain
    # module graph is what exporters emit for real models.
    torch.backends.mha.set_fastpath_enabled(False)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))
    import torch_models

    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.norm = nn.LayerNorm(4)
            self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
            self.lstm = nn.LSTM(4, 5, batch_first=True)
            self.head = nn.Linear(5, 2)

        def forward(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            f = torch.relu(self.conv(img)).flatten(2).transpose(1, 2)  # (B, HW, 4)
            f = self.norm(f)
            a, _ = self.attn(f, f, f)
            seq, _ = self.lstm(a)
            logits = self.head(seq[:, -1])
            return torch.softmax(logits, -1), seq.mean(1)

    class DoubleOrDecrement(nn.Module):
        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            for _ in range(int(n)):
                x = x * 2 if x.sum() > 0 else x - 1
            return x

    class SmallUNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.pool = nn.MaxPool2d(2)
            self.mid = nn.Conv2d(8, 16, 3, padding=1, groups=8)
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
            self.resize = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.head = nn.Conv2d(16, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            d = self.down(x)
            m = torch.relu(self.mid(self.pool(d)))
            u = self.up(m)
            r = self.resize(self.pool(d))
            return torch.sigmoid(self.head(torch.cat([u, r], 1)))

    class SmallMobileNet(nn.Module):
        """MobileNetV3-small's block kinds, narrow and at 40 px: depthwise 3x3 and 5x5
        convs (strided and not, channels no multiple of a vector), BatchNorm, ReLU and
        HardSwish, squeeze-excite blocks and residual adds; then a ReLU6 (Clip) block."""

        def __init__(self) -> None:
            super().__init__()

            def conv_bn(cin: int, cout: int, k: int, s: int, groups: int = 1) -> list[Any]:
                return [
                    nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
                    nn.BatchNorm2d(cout),
                ]

            self.stem = nn.Sequential(*conv_bn(3, 16, 3, 2), nn.Hardswish())
            blocks = []
            cin = 16
            # (kernel, expansion, out, SE, activation, stride)
            table = [
                (3, 16, 16, True, nn.ReLU, 2),
                (3, 40, 24, False, nn.ReLU, 2),
                (3, 52, 24, False, nn.ReLU, 1),
                (5, 72, 40, True, nn.Hardswish, 2),
                (5, 120, 40, True, nn.Hardswish, 1),
                (3, 96, 40, False, nn.ReLU6, 1),
            ]
            for k, exp, cout, se, act, s in table:
                layers: list[Any] = []
                if exp != cin:
                    layers += [*conv_bn(cin, exp, 1, 1), act()]
                layers += [*conv_bn(exp, exp, k, s, groups=exp), act()]
                if se:
                    layers.append(SqueezeExcite(exp))
                layers += conv_bn(exp, cout, 1, 1)
                blocks.append((nn.Sequential(*layers), s == 1 and cin == cout))
                cin = cout
            self.blocks = nn.ModuleList([b for b, _ in blocks])
            self.residual = [r for _, r in blocks]
            for m in self.modules():  # running statistics that are not the identity
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.data.uniform_(0.5, 1.5)
                    m.bias.data.uniform_(-0.2, 0.2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            for block, residual in zip(self.blocks, self.residual):
                y = block(x)
                x = x + y if residual else y
            return x.mean((2, 3))

    class SqueezeExcite(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            squeeze = max(8, (c // 4 + 4) // 8 * 8)
            self.fc1 = nn.Conv2d(c, squeeze, 1)
            self.fc2 = nn.Conv2d(squeeze, c, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 32)
            layer = nn.TransformerEncoderLayer(
                32, 4, 64, dropout=0.0, batch_first=True, activation="gelu"
            )
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 5)

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            h = self.encoder(self.embed(ids), src_key_padding_mask=mask)
            return self.head(h).softmax(-1)

    class Recurrent(nn.Module):
        def __init__(self, cell: str) -> None:
            super().__init__()
            self.rnn = getattr(nn, cell)(6, 12, num_layers=2, batch_first=True, bidirectional=True)
            self.out = nn.Linear(24, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = self.rnn(x)
            return self.out(y)

    class Looping(nn.Module):
        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            acc = torch.zeros_like(x)
            for i in range(int(n)):
                if i % 2 == 0:
                    acc = acc + x * i
                else:
                    acc = acc - x
            return acc

    def mixed() -> Built:
        model = _torch_export(
            Mixed(),
            (torch.randn(1, 3, 4, 4),),
            input_names=["img"],
            dynamic_axes={"img": {0: "batch"}},
        )
        return model, {}, {}

    def double_or_decrement() -> Built:
        scripted = torch.jit.script(DoubleOrDecrement())
        return _torch_export(scripted, (torch.randn(3), torch.tensor(2))), {}, {}

    def unet() -> Built:
        model = _torch_export(SmallUNet(), (torch.randn(1, 3, 16, 16),), input_names=["x"])
        x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
        return model, {"x": x}, {}

    def mobilenet() -> Built:
        model = _torch_export(SmallMobileNet(), (torch.randn(2, 3, 40, 40),), input_names=["x"])
        x = np.random.default_rng(2).standard_normal((2, 3, 40, 40)).astype(np.float32)
        return model, {"x": x}, {}

    def encoder() -> Built:
        ids = torch.randint(0, 50, (2, 7))
        mask = torch.zeros(2, 7, dtype=torch.bool)
        mask[1, 5:] = True
        model = _torch_export(
            Encoder(),
            (ids, mask),
            input_names=["ids", "mask"],
            dynamic_axes={"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}},
        )
        return model, {"ids": ids.numpy(), "mask": mask.numpy()}, {}

    def recurrent(cell: str) -> Built:
        model = _torch_export(Recurrent(cell), (torch.randn(2, 5, 6),), input_names=["x"])
        x = np.random.default_rng(1).standard_normal((2, 5, 6)).astype(np.float32)
        return model, {"x": x}, {}

    def looping() -> Built:
        scripted = torch.jit.script(Looping())
        model = _torch_export(scripted, (torch.randn(3), torch.tensor(4)), input_names=["x", "n"])
        x = np.array([1.0, -2.0, 0.5], np.float32)
        return model, {"x": x, "n": np.array(5, np.int64)}, {}

    def bench(built: tuple[onnx.ModelProto, dict[str, np.ndarray]]) -> Built:
        return built[0], built[1], {}

    def seeded(build: Callable[[], Built]) -> Callable[[], Built]:
        """Each model draws its weights from a fresh seed: regenerating one gives the same
        file as regenerating all."""

        def run() -> Built:
            torch.manual_seed(0)
            return build()

        return run

    builders: dict[str, Callable[[], Built]] = {
        "torchscript_mixed": mixed,
        "torchscript_double_or_decrement": double_or_decrement,
        "torchscript_unet": unet,
        "torchscript_mobilenet_small": mobilenet,
        "torchscript_encoder": encoder,
        "torchscript_lstm": lambda: recurrent("LSTM"),
        "torchscript_gru": lambda: recurrent("GRU"),
        "torchscript_loop_with_if": looping,
        # torchvision's bottleneck blocks as the ResNet-50 benchmark builds them, scaled down.
        "torchscript_resnet_bottlenecks": lambda: bench(
            torch_models.resnet_torch(
                [(8, 1, 1), (8, 1, 1), (16, 1, 2)], stem=16, image=64, batch=2
            )
        ),
        # Basic blocks at 112 px: the shortcut convs and residual Adds take the flat-layout
        # conv paths (a dynamo ResNet-18 once lost its shortcuts there).
        "torchscript_resnet_basic_112": lambda: bench(
            torch_models.resnet_torch([(16, 1, 1), (32, 1, 2)], stem=16, image=112)
        ),
        "torchscript_bert_small": lambda: bench(
            torch_models.bert_torch(layers=2, hidden=64, heads=4, ffn=256, seq=24)
        ),
    }
    return {name: seeded(build) for name, build in builders.items()}


# -- skl2onnx (target opsets ai.onnx 17, ai.onnx.ml 3) ---------------------------------------
TARGET = {"": 17, "ai.onnx.ml": 3}


def sklearn_builders() -> dict[str, Callable[[], Built]]:
    import skl2onnx
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import (
        ExtraTreesClassifier,
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        IsolationForest,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import (
        Binarizer,
        LabelEncoder,
        MaxAbsScaler,
        Normalizer,
        OneHotEncoder,
        StandardScaler,
    )
    from sklearn.svm import SVC, SVR, LinearSVC, LinearSVR, NuSVC, OneClassSVM
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 5)).astype(np.float32)
    y2 = np.where(x[:, 0] + x[:, 1] > 0, 7, 3)
    y3 = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3).astype(int)
    y_str = np.array(["cat", "dog", "eel"])[y3]
    y_reg = x[:, 0] * 2 + np.sin(x[:, 1])

    def export(estimator: Any, sample: Any, **kw: Any) -> onnx.ModelProto:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return to_onnx(estimator, sample, target_opset=TARGET, **kw)

    def fit(estimator: Any, *args: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return estimator.fit(*args)

    def classifier(make: Callable[[], Any], y: np.ndarray, zipmap: bool) -> Built:
        est = fit(make(), x, y)
        model = export(est, x[:1], options={"zipmap": zipmap})
        return model, {"X": x}, {"labels": est.predict(x), "probs": est.predict_proba(x)}

    def regressor(make: Callable[[], Any], y: np.ndarray) -> Built:
        est = fit(make(), x, y)
        return export(est, x[:1]), {"X": x}, {"y": est.predict(x)}

    def svc_probabilities(y: np.ndarray) -> Built:
        est = fit(SVC(probability=True, random_state=0), x, y)
        model = export(est, x[:1], options={"zipmap": False})
        return model, {"X": x}, {"labels": est.predict(x)}

    def svc_poly() -> Built:
        est = fit(SVC(kernel="poly", degree=2), x, y3)
        return export(est, x[:1], options={"zipmap": False}), {"X": x}, {}

    def one_class_svm() -> Built:
        est = fit(OneClassSVM(gamma=0.5), x)
        return export(est, x[:1]), {"X": x}, {}

    def scaling_pipeline() -> Built:
        pipe = make_pipeline(
            StandardScaler(), Normalizer(), MaxAbsScaler(), Binarizer(threshold=0.1)
        ).fit(x)
        return export(pipe, x[:1]), {"X": x}, {"y": pipe.transform(x)}

    def column_transformer() -> Built:
        col_rng = np.random.default_rng(1)
        num = x[:, :3].copy()
        num[col_rng.random(num.shape) < 0.2] = np.nan
        cat = np.array(col_rng.choice(["red", "green", "blue"], size=(x.shape[0], 2)), dtype=object)
        pre = ColumnTransformer(
            [
                ("num", SimpleImputer(strategy="median"), [0, 1, 2]),
                ("cat", OneHotEncoder(handle_unknown="ignore"), [3, 4]),
            ]
        )
        frame_like = np.concatenate([num.astype(object), cat], axis=1)
        pipe = fit(Pipeline([("pre", pre), ("clf", LogisticRegression())]), frame_like, y2)
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
        feeds = {"num": num.astype(np.float32), "cat": cat}
        return model, feeds, {"labels": pipe.predict(frame_like)}

    def label_encoder() -> Built:
        words = np.array(["b", "a", "c", "a"])
        enc = LabelEncoder().fit(words)
        model = export(enc, words[:1].astype(object))
        return model, {"X": words.astype(object)}, {"codes": enc.transform(words)}

    def dict_vectorizer() -> Built:
        dicts = [{"a": 1.0, "b": 2.0}, {"b": 3.0, "c": 4.0}]
        pipe = make_pipeline(DictVectorizer(sparse=False), LinearRegression()).fit(
            dicts, [1.0, 2.0]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = skl2onnx.convert_sklearn(
                pipe,
                initial_types=[("X", DictionaryType(StringTensorType([1]), FloatTensorType([1])))],
                target_opset=TARGET,
            )
        sample = {"a": 2.0, "c": 1.0}
        return model, {"X": sample}, {"y": pipe.predict([sample])}

    def tfidf(corpus: np.ndarray, y: list[int], zipmap: bool) -> Built:
        pipe = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(corpus, y)
        options = {} if zipmap else {"options": {id(pipe): {"zipmap": False}}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = skl2onnx.convert_sklearn(
                pipe,
                initial_types=[("text", StringTensorType([None, 1]))],
                target_opset=TARGET,
                **options,
            )
        feeds = {"text": corpus.reshape(-1, 1).astype(object)}
        return model, feeds, {"labels": pipe.predict(corpus), "probs": pipe.predict_proba(corpus)}

    corpus = np.array(
        [
            "The quick brown fox jumps",
            "the lazy dog sleeps all day",
            "Quick thinking, quick acting!",
            "a dog and a fox are friends",
        ]
    )

    def more(make: Callable[[], Any], y: Any) -> Built:
        est = fit(make(), x) if y is None else fit(make(), x, y)
        options = {"zipmap": False} if hasattr(est, "predict_proba") else None
        return export(est, x[:1], options=options), {"X": x}, {"y": est.predict(x)}

    def knn() -> Built:
        est = KNeighborsClassifier(n_neighbors=3).fit(x[:60], y3[:60])
        model = export(est, x[:1], options={"optim": "cdist", "zipmap": False})
        return model, {"X": x[60:]}, {"labels": est.predict(x[60:])}

    def small_pipeline(make: Callable[[], Any]) -> Built:
        small_rng = np.random.default_rng(0)
        xs = small_rng.normal(size=(40, 4)).astype(np.float32)
        est = make().fit(xs, (xs[:, 0] > 0).astype(np.int64))
        return export(est, xs[:1]), {"X": xs}, {}

    classifiers: dict[str, tuple[Callable[[], Any], np.ndarray]] = {
        "forest_binary": (
            lambda: RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0),
            y2,
        ),
        "forest_strings": (lambda: RandomForestClassifier(n_estimators=8, random_state=0), y_str),
        "boosting_binary": (
            lambda: GradientBoostingClassifier(n_estimators=8, random_state=0),
            y2,
        ),
        "boosting_three": (lambda: GradientBoostingClassifier(n_estimators=5, random_state=0), y3),
        "tree_three": (lambda: DecisionTreeClassifier(random_state=0), y3),
        "logreg_binary": (LogisticRegression, y2),
        "logreg_strings": (LogisticRegression, y_str),
    }
    out: dict[str, Callable[[], Built]] = {}
    for name, (make, y) in classifiers.items():
        for zipmap in (False, True):
            key = f"skl_classifier_{name}_{'zipmap' if zipmap else 'arrays'}"
            out[key] = lambda make=make, y=y, zipmap=zipmap: classifier(make, y, zipmap)
    targets = np.stack([y_reg, x[:, 2] - x[:, 3]], axis=1)
    regressors: dict[str, tuple[Callable[[], Any], np.ndarray]] = {
        "regressor_forest": (lambda: RandomForestRegressor(n_estimators=8, random_state=0), y_reg),
        "regressor_boosting": (
            lambda: GradientBoostingRegressor(n_estimators=10, random_state=0),
            y_reg,
        ),
        "regressor_tree": (lambda: DecisionTreeRegressor(random_state=0), y_reg),
        "regressor_linear": (LinearRegression, y_reg),
        "multi_output_forest": (
            lambda: RandomForestRegressor(n_estimators=5, random_state=0),
            targets,
        ),
        "multi_output_ridge": (Ridge, targets),
        "svr_rbf": (lambda: SVR(kernel="rbf"), y_reg),
        "svr_linear": (lambda: SVR(kernel="linear"), y_reg),
        "svr_sigmoid": (lambda: SVR(kernel="sigmoid"), y_reg),
    }
    for name, (make, y) in regressors.items():
        out[f"skl_{name}"] = lambda make=make, y=y: regressor(make, y)
    more_estimators: dict[str, tuple[Callable[[], Any], Any]] = {
        "isolation_forest": (lambda: IsolationForest(n_estimators=10, random_state=0), None),
        "extra_trees_three": (lambda: ExtraTreesClassifier(n_estimators=5, random_state=0), y3),
        "linear_svc_binary": (LinearSVC, y2),
        "linear_svc_three": (LinearSVC, y3),
        "linear_svr": (LinearSVR, y_reg),
        "nu_svc_three": (NuSVC, y3),
    }
    for name, (make, y) in more_estimators.items():
        out[f"skl_{name}"] = lambda make=make, y=y: more(make, y)
    out.update(
        {
            "skl_svc_probabilities_binary": lambda: svc_probabilities(y2),
            "skl_svc_probabilities_three": lambda: svc_probabilities(y3),
            "skl_svc_poly": svc_poly,
            "skl_one_class_svm": one_class_svm,
            "skl_scaling_pipeline": scaling_pipeline,
            "skl_column_transformer": column_transformer,
            "skl_label_encoder": label_encoder,
            "skl_dict_vectorizer": dict_vectorizer,
            "skl_tfidf_logreg": lambda: tfidf(corpus, [0, 1, 0, 1], zipmap=False),
            "skl_tfidf_logreg_two_zipmap": lambda: tfidf(
                np.array(["The quick brown fox", "Quick thinking, quick acting!"]), [0, 1], True
            ),
            "skl_knn_cdist": knn,
            "skl_scaler_logreg_small": lambda: small_pipeline(
                lambda: make_pipeline(StandardScaler(), LogisticRegression())
            ),
            "skl_forest_small": lambda: small_pipeline(
                lambda: RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0)
            ),
        }
    )
    return out


def builders() -> dict[str, Callable[[], Built]]:
    """Every export, by name; an exporter that is not installed contributes nothing."""
    out: dict[str, Callable[[], Built]] = {}
    for family in (torch_builders, sklearn_builders):
        try:
            out.update(family())
        except ImportError as exc:
            print(f"skipped {family.__name__}: {exc}")
    return out
