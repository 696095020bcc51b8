"""Build feeds for a model's inputs: what the inputs dialog and tests use.

Each graph input gets a `FeedRecipe` (random with a range and distribution, zeros,
ones, a file (.npy, .npz, .pb), text for string tensors, or an image already decoded
to an ``H x W x C`` uint8 array) and `build_feed` turns it into a value of the input's
declared type, with symbolic dims taken from a ``{dim_param: size}`` table.  Recipes
are plain data (`recipe_to_dict`/`recipe_from_dict`) so a UI can remember them per
model.  Image *decoding* is the UI's job (QImage); here images are numpy arrays.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from onnx import TypeProto

from onnxviz.errors import ExecutionError, LoadError
from onnxviz.runtime.values import elem_type_to_dtype, load_proto_file

MODES = ("random", "zeros", "ones", "file", "text", "image")
DISTRIBUTIONS = ("uniform", "normal")

# name -> (scale, mean per channel, std per channel): x = (pixel * scale - mean) / std
IMAGE_PRESETS: dict[str, tuple[float, tuple[float, ...], tuple[float, ...]]] = {
    "ImageNet": (1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "0..1": (1 / 255, (0.0,), (1.0,)),
    "-1..1": (2 / 255, (1.0,), (1.0,)),
    "0..255": (1.0, (0.0,), (1.0,)),
}


@dataclass
class InputSpec:
    """A graph input as the dialog shows it: ``shape`` items are ints, dim_param
    names, or None for an unnamed unknown dim; ``kind`` is tensor/sequence/map/optional."""

    name: str
    kind: str
    dtype: np.dtype[Any] | None
    shape: list[int | str | None] | None
    type_proto: TypeProto | None = None

    @property
    def type_text(self) -> str:
        dtype = (
            "?" if self.dtype is None else ("string" if self.dtype == object else str(self.dtype))
        )
        if self.kind != "tensor":
            return self.kind
        if self.shape is None:
            return f"{dtype}[…]"
        return f"{dtype}[{','.join('?' if d is None else str(d) for d in self.shape)}]"


@dataclass
class FeedRecipe:
    mode: str = "random"
    low: float | None = None  # None: the dtype's default range
    high: float | None = None
    distribution: str = "uniform"
    path: str = ""  # .npy / .npz / .pb
    text: str = ""  # one string per line, or separated by '|'
    layout: str = "auto"  # image: NCHW | NHWC | auto
    preset: str = "ImageNet"
    scale: float | None = None  # image: override the preset
    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)


def recipe_to_dict(recipe: FeedRecipe) -> dict[str, Any]:
    return asdict(recipe)


def recipe_from_dict(data: Mapping[str, Any]) -> FeedRecipe:
    known = FeedRecipe.__dataclass_fields__
    recipe = FeedRecipe(**{k: v for k, v in data.items() if k in known})
    if recipe.mode not in MODES:
        recipe.mode = "random"
    return recipe


def spec_of(name: str, tp: TypeProto | None) -> InputSpec:
    kind = tp.WhichOneof("value") if tp is not None else None
    if tp is None or kind is None:
        return InputSpec(name, "tensor", None, None, tp)
    if kind in ("tensor_type", "sparse_tensor_type"):
        tt = tp.tensor_type if kind == "tensor_type" else tp.sparse_tensor_type
        dtype = elem_type_to_dtype(tt.elem_type) if tt.elem_type else None
        shape: list[int | str | None] | None = None
        if tt.HasField("shape"):
            shape = [
                int(d.dim_value)
                if d.HasField("dim_value")
                else (d.dim_param if d.dim_param else None)
                for d in tt.shape.dim
            ]
        return InputSpec(name, "tensor", dtype, shape, tp)
    return InputSpec(name, kind.removesuffix("_type"), None, None, tp)


def input_specs(inputs: list[tuple[str, TypeProto | None]]) -> list[InputSpec]:
    """From `Session.inputs`."""
    return [spec_of(n, t) for n, t in inputs]


def symbolic_dims(specs: list[InputSpec]) -> list[str]:
    """Distinct dim_param names over all inputs, first-seen order."""
    seen: list[str] = []
    for s in specs:
        for d in s.shape or []:
            if isinstance(d, str) and d not in seen:
                seen.append(d)
    return seen


def concrete_shape(spec: InputSpec, dims: Mapping[str, int]) -> tuple[int, ...]:
    """The shape to build: symbolic dims from ``dims`` (else 1), unknown dims 1."""
    if spec.shape is None:
        return (1,)
    out = []
    for d in spec.shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, str):
            out.append(int(dims.get(d, 1)))
        else:
            out.append(1)
    return tuple(out)


def default_range(dtype: np.dtype[Any]) -> tuple[float, float]:
    if dtype == np.dtype(bool):
        return (0.0, 1.0)
    if dtype.kind in "iu":
        return (0.0, 5.0)  # counts and indices: negative values are rarely meant
    return (-1.0, 1.0)


def random_tensor(
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    rng: np.random.Generator,
    low: float | None = None,
    high: float | None = None,
    distribution: str = "uniform",
) -> np.ndarray:
    """Random values of ``dtype``: uniform in [low, high] or normal with mean
    (low+high)/2 and std (high-low)/4 (about 95% inside the range)."""
    lo_d, hi_d = default_range(dtype)
    lo = lo_d if low is None else float(low)
    hi = hi_d if high is None else float(high)
    if hi < lo:
        lo, hi = hi, lo
    if dtype == np.dtype(object):
        return np.array(rng.choice(["a", "b", "c"], size=shape), dtype=object)
    if dtype == np.dtype(bool):
        return rng.random(shape) < 0.5
    if distribution == "normal":
        base = rng.normal((lo + hi) / 2, max(hi - lo, 0.0) / 4, size=shape)
    else:
        base = rng.uniform(lo, hi, size=shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        base = np.clip(np.rint(base), max(info.min, lo), min(info.max, hi))
        return base.astype(dtype)
    if dtype.kind == "c":
        return (base + 1j * rng.uniform(lo, hi, size=shape)).astype(dtype)
    return base.astype(np.float32).astype(dtype)


def load_feed_file(path: str, name: str) -> Any:
    """A value from .npy, .npz (the array called ``name``, or the only one) or a
    TensorProto / SequenceProto / ... .pb file."""
    if not os.path.exists(path):
        raise LoadError(f"input file '{path}' does not exist", file=path)
    lower = path.lower()
    try:
        if lower.endswith(".npy"):
            return np.load(path, allow_pickle=False)
        if lower.endswith(".npz"):
            with np.load(path, allow_pickle=False) as data:
                if name in data.files:
                    return data[name]
                if len(data.files) == 1:
                    return data[data.files[0]]
                raise LoadError(
                    f"'{path}' holds no array named '{name}' (it has {', '.join(data.files)})",
                    file=path,
                )
        if lower.endswith(".pb"):
            return load_proto_file(path)
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"cannot read input file '{path}': {exc}", file=path) from exc
    raise LoadError(f"input file '{path}' is not .npy, .npz or .pb", file=path)


def text_tensor(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """Strings from text (one per line, or separated by '|'), reshaped to ``shape`` when
    the count fits, else a 1-D tensor."""
    parts = text.splitlines() if "\n" in text else text.split("|")
    arr = np.array(parts, dtype=object)
    if int(np.prod(shape)) == arr.size:
        return arr.reshape(shape)
    return arr


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize an ``H x W x C`` array (any dtype) to ``height x width`` (float64 out)."""
    h, w = image.shape[:2]
    img = image.astype(np.float64)
    if (h, w) == (height, width):
        return img
    ys = (np.arange(height) + 0.5) * h / height - 0.5
    xs = (np.arange(width) + 0.5) * w / width - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, h - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, w - 1)
    y1 = np.clip(y0 + 1, 0, h - 1)
    x1 = np.clip(x0 + 1, 0, w - 1)
    wy = np.clip(ys - y0, 0.0, 1.0)[:, None, None]
    wx = np.clip(xs - x0, 0.0, 1.0)[None, :, None]
    top = img[y0][:, x0] * (1 - wx) + img[y0][:, x1] * wx
    bottom = img[y1][:, x0] * (1 - wx) + img[y1][:, x1] * wx
    return top * (1 - wy) + bottom * wy


def image_layout(shape: tuple[int, ...], layout: str = "auto") -> str:
    if layout in ("NCHW", "NHWC"):
        return layout
    if len(shape) == 4 and shape[1] in (1, 3, 4):
        return "NCHW"  # ambiguous shapes such as [1,3,2,3] are far more often NCHW
    if len(shape) == 4 and shape[3] in (1, 3, 4):
        return "NHWC"
    return "NCHW"


def image_to_tensor(
    image: np.ndarray,
    shape: tuple[int, ...],
    dtype: np.dtype[Any] | None = None,
    *,
    layout: str = "auto",
    preset: str = "ImageNet",
    scale: float | None = None,
    mean: list[float] | None = None,
    std: list[float] | None = None,
) -> np.ndarray:
    """An ``H x W x C`` uint8 image as a 4-D input tensor of ``shape``: resized to the
    shape's height and width, channels matched (grey <-> RGB), normalized as
    ``(pixel * scale - mean) / std``, laid out NCHW or NHWC, repeated over the batch."""
    dtype = np.dtype(np.float32) if dtype is None else dtype
    if image.ndim == 2:
        image = image[:, :, None]
    if len(shape) != 4:
        raise ExecutionError(f"an image input needs a 4-D tensor, this one is {len(shape)}-D")
    lay = image_layout(shape, layout)
    n, c, h, w = shape if lay == "NCHW" else (shape[0], shape[3], shape[1], shape[2])
    have = image.shape[2]
    if have != c:
        if c == 1:
            image = image[:, :, :3].mean(axis=2, keepdims=True)
        elif have == 1:
            image = np.repeat(image, c, axis=2)
        else:
            image = image[:, :, :c]
    pixels = resize_bilinear(image, h, w)
    p_scale, p_mean, p_std = IMAGE_PRESETS.get(preset, IMAGE_PRESETS["0..255"])
    s = p_scale if scale is None else scale
    m = np.resize(np.asarray(mean if mean else p_mean, dtype=np.float64), c)
    sd = np.resize(np.asarray(std if std else p_std, dtype=np.float64), c)
    values = (pixels * s - m) / sd  # H x W x C
    if dtype.kind in "iu":
        values = np.rint(values)
    chw = values.transpose(2, 0, 1) if lay == "NCHW" else values
    return np.broadcast_to(chw[None], (max(n, 1), *chw.shape)).astype(dtype)


def build_feed(
    spec: InputSpec,
    recipe: FeedRecipe,
    dims: Mapping[str, int],
    rng: np.random.Generator,
    image: np.ndarray | None = None,
) -> Any:
    """The value for one input.  ``image`` is the decoded picture for mode "image"."""
    shape = concrete_shape(spec, dims)
    dtype = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
    mode = recipe.mode
    if mode == "file":
        if not recipe.path:
            raise ExecutionError(f"input '{spec.name}': choose a file")
        return load_feed_file(recipe.path, spec.name)
    if spec.kind != "tensor":
        if spec.kind == "optional" and mode == "zeros":
            return None
        return _random_structured(spec.type_proto, recipe, dims, rng)
    if mode == "zeros":
        return np.zeros(shape, dtype=dtype) if dtype.kind != "O" else np.full(shape, "", object)
    if mode == "ones":
        return np.ones(shape, dtype=dtype) if dtype.kind != "O" else np.full(shape, "1", object)
    if mode == "text":
        return text_tensor(recipe.text, shape)
    if mode == "image":
        if image is None:
            raise ExecutionError(f"input '{spec.name}': choose an image file")
        return image_to_tensor(
            image,
            shape,
            dtype,
            layout=recipe.layout,
            preset=recipe.preset,
            scale=recipe.scale,
            mean=recipe.mean or None,
            std=recipe.std or None,
        )
    return random_tensor(dtype, shape, rng, recipe.low, recipe.high, recipe.distribution)


def _random_structured(
    tp: TypeProto | None, recipe: FeedRecipe, dims: Mapping[str, int], rng: np.random.Generator
) -> Any:
    """Sequences (two elements), maps (keys 0, 1) and optionals (present) of the
    element type, each element built like a tensor input."""
    kind = tp.WhichOneof("value") if tp is not None else None
    if tp is None or kind in (None, "tensor_type", "sparse_tensor_type"):
        inner = recipe if recipe.mode in ("random", "zeros", "ones") else FeedRecipe()
        return build_feed(spec_of("", tp), inner, dims, rng)
    if kind == "sequence_type":
        return [_random_structured(tp.sequence_type.elem_type, recipe, dims, rng) for _ in range(2)]
    if kind == "optional_type":
        return _random_structured(tp.optional_type.elem_type, recipe, dims, rng)
    if kind == "map_type":
        key_dtype = elem_type_to_dtype(tp.map_type.key_type)
        keys: list[Any] = ["a", "b"] if key_dtype.kind == "O" else [0, 1]
        return {k: _random_structured(tp.map_type.value_type, recipe, dims, rng) for k in keys}
    raise ExecutionError(f"cannot build a value of type {kind}")
