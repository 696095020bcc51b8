"""Neural-network kernels: our time vs onnxruntime on the same single-node model.

Usage: python benchmarks/bench_kernels_nn.py [--threads N] [--repeat R] [--filter TEXT]

Both sides get the same thread count: onnxruntime's intra-op pool and (through
threadpoolctl when it is installed) numpy's BLAS pool.  Each line prints the best of R
runs for both and the ratio ours / onnxruntime (lower is better, 1.0 = parity).
Shapes are taken from ResNet-50, MobileNet and BERT-base layers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from onnx import TensorProto, ValueInfoProto, helper, numpy_helper

from onnxviz.runtime.invoke import call_node

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def small(*shape: int) -> np.ndarray:
    """Weights scaled like trained recurrent layers (standard normal ones make the
    recurrence chaotic, so float rounding differences explode over the steps)."""
    return (RNG.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


# (label, op, opset, graph inputs, initializers, attributes, number of outputs)
Case = tuple[str, str, int, list[np.ndarray], list[np.ndarray], dict[str, Any], int]


def cases() -> list[Case]:
    c: list[Case] = []

    def conv(label: str, x: tuple[int, ...], w: tuple[int, ...], **attrs: Any) -> None:
        c.append((label, "Conv", 11, [rand(*x)], [rand(*w), rand(w[0])], attrs, 1))

    def depthwise(label: str, channels: int, size: int, k: int, stride: int = 1) -> None:
        """A depthwise k x k conv of one image, padded to keep its size at stride 1."""
        strides = {"strides": [stride] * 2} if stride > 1 else {}
        x, w = (1, channels, size, size), (channels, 1, k, k)
        conv(label, x, w, pads=[k // 2] * 4, group=channels, **strides)

    conv("Conv 3x3 64->64 @56 (resnet)", (1, 64, 56, 56), (64, 64, 3, 3), pads=[1] * 4)
    conv("Conv 3x3 256->256 @14 (resnet)", (1, 256, 14, 14), (256, 256, 3, 3), pads=[1] * 4)
    conv("Conv 3x3 512->512 @7 (resnet)", (1, 512, 7, 7), (512, 512, 3, 3), pads=[1] * 4)
    conv(
        "Conv 7x7/2 3->64 @224 (resnet stem)",
        (1, 3, 224, 224),
        (64, 3, 7, 7),
        pads=[3] * 4,
        strides=[2, 2],
    )
    conv("Conv 1x1 256->64 @56 (resnet)", (1, 256, 56, 56), (64, 256, 1, 1))
    conv("Conv 1x1 1024->256 @14 (resnet)", (1, 1024, 14, 14), (256, 1024, 1, 1))
    conv("Conv 1x1/2 512->1024 @28 (resnet)", (1, 512, 28, 28), (1024, 512, 1, 1), strides=[2, 2])
    depthwise("Conv depthwise 3x3 144 @56 (mobilenet)", 144, 56, 3)
    depthwise("Conv depthwise 3x3/2 96 @112 (mobilenet)", 96, 112, 3, stride=2)
    depthwise("Conv depthwise 5x5 240 @14 (mobilenetv3)", 240, 14, 5)
    depthwise("Conv depthwise 5x5 576 @7 (mobilenetv3)", 576, 7, 5)
    depthwise("Conv depthwise 3x3 88 @28 (mobilenetv3)", 88, 28, 3)
    depthwise("Conv depthwise 7x7 96 @56 (convnext)", 96, 56, 7)
    depthwise("Conv depthwise 3x3 64 @32 (diffusion)", 64, 32, 3)
    conv(
        "Conv grouped 3x3 g32 256 @28 (resnext)",
        (1, 256, 28, 28),
        (256, 8, 3, 3),
        pads=[1] * 4,
        group=32,
    )
    conv("Conv batch 8, 3x3 64->64 @28", (8, 64, 28, 28), (64, 64, 3, 3), pads=[1] * 4)
    c.append(
        (
            "ConvTranspose 4x4/2 256->128 @16",
            "ConvTranspose",
            11,
            [rand(1, 256, 16, 16)],
            [rand(256, 128, 4, 4), rand(128)],
            {"strides": [2, 2], "pads": [1, 1, 1, 1]},
            1,
        )
    )
    c.append(
        (
            "MaxPool 3x3/2 64 @112 (resnet)",
            "MaxPool",
            12,
            [rand(1, 64, 112, 112)],
            [],
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4},
            1,
        )
    )
    c.append(
        (
            "MaxPool 3x3/2 with indices",
            "MaxPool",
            12,
            [rand(1, 64, 112, 112)],
            [],
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4},
            2,
        )
    )
    c.append(
        (
            "AveragePool 3x3 256 @28",
            "AveragePool",
            19,
            [rand(1, 256, 28, 28)],
            [],
            {"kernel_shape": [3, 3], "pads": [1] * 4},
            1,
        )
    )
    c.append(
        ("GlobalAveragePool 2048 @7", "GlobalAveragePool", 1, [rand(1, 2048, 7, 7)], [], {}, 1)
    )
    ch = 256
    c.append(
        (
            "BatchNormalization 256 @56",
            "BatchNormalization",
            15,
            [rand(1, ch, 56, 56)],
            [rand(ch), rand(ch), rand(ch), np.abs(rand(ch)) + 0.5],
            {},
            1,
        )
    )
    c.append(
        (
            "LayerNormalization 128x768 (bert)",
            "LayerNormalization",
            17,
            [rand(1, 128, 768)],
            [rand(768), rand(768)],
            {"axis": -1},
            1,
        )
    )
    c.append(
        (
            "LayerNormalization 8x128x768 (bert)",
            "LayerNormalization",
            17,
            [rand(8, 128, 768)],
            [rand(768), rand(768)],
            {"axis": -1},
            1,
        )
    )
    q = [rand(1, 12, 128, 64), rand(1, 12, 128, 64), rand(1, 12, 128, 64)]
    c.append(("Attention 12h x 128 x 64 (bert)", "Attention", 23, q, [], {}, 1))
    q8 = [rand(8, 12, 128, 64), rand(8, 12, 128, 64), rand(8, 12, 128, 64)]
    c.append(("Attention batch 8, causal", "Attention", 23, q8, [], {"is_causal": 1}, 1))
    h = 256
    c.append(
        (
            "LSTM T=50 B=8 512->256",
            "LSTM",
            14,
            [rand(50, 8, 512)],
            [small(1, 4 * h, 512), small(1, 4 * h, h), small(1, 8 * h)],
            {"hidden_size": h},
            3,
        )
    )
    c.append(
        (
            "GRU T=50 B=8 bidirectional 256->128",
            "GRU",
            14,
            [rand(50, 8, 256)],
            [small(2, 3 * 128, 256), small(2, 3 * 128, 128), small(2, 6 * 128)],
            {"hidden_size": 128, "direction": "bidirectional"},
            2,
        )
    )
    c.append(
        (
            "Resize linear x2 64 @56",
            "Resize",
            13,
            [rand(1, 64, 56, 56)],
            [np.array([], np.float32), np.array([1, 1, 2, 2], np.float32)],
            {"mode": "linear"},
            1,
        )
    )
    return c


def build(case: Case) -> tuple[Any, Any]:
    _, op, opset, inputs, inits, attrs, n_out = case
    in_names = [f"x{k}" for k in range(len(inputs))]
    init_names = [f"w{k}" for k in range(len(inits))]
    outs = [f"y{k}" for k in range(n_out)]
    node_inputs = in_names + init_names
    if op == "Resize":  # X, roi, scales
        node_inputs = [in_names[0], "", init_names[1]]
        inits = inits[1:]
        init_names = init_names[1:]
    node = helper.make_node(op, node_inputs, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "bench",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
            for n, v in zip(in_names, inputs)
        ],
        [ValueInfoProto(name=o) for o in outs],
        [numpy_helper.from_array(v, n) for n, v in zip(init_names, inits)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, node


def best_of(fn: Callable[[], Any], repeat: int, clock: Callable[[], float]) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=n, user_api="blas"):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--filter", default="")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu = process CPU time (all threads), immune to preemption on a busy machine",
    )
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    print(
        f"threads={args.threads} repeat={args.repeat} clock={args.clock} (best of)  onnxruntime {ort.__version__}"
    )
    print(f"{'case':44s} {'ours ms':>9s} {'ort ms':>9s} {'ratio':>7s}")
    ratios = []
    with blas_threads(args.threads):
        for case in cases():
            if args.filter.lower() not in case[0].lower():
                continue
            model, node = build(case)
            session = ort.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
            inputs, inits = case[3], case[4]
            feeds = {f"x{k}": v for k, v in enumerate(inputs)}
            ours_args: list[Any] = list(inputs) + list(inits)
            if case[1] == "Resize":
                ours_args = [inputs[0], None, inits[1]]
            opsets = {"": case[2]}
            theirs = session.run(None, feeds)
            ours = call_node(node, ours_args, opsets)
            err = float(np.max(np.abs(ours[0] - theirs[0])) / (np.max(np.abs(theirs[0])) + 1e-12))
            t_ours = best_of(
                lambda n=node, a=ours_args, o=opsets: call_node(n, a, o), args.repeat, clock
            )
            t_ort = best_of(lambda s=session, f=feeds: s.run(None, f), args.repeat, clock)
            ratio = t_ours / t_ort
            ratios.append(ratio)
            flag = "" if err < 1e-3 else f"  (max rel err {err:.1e})"
            print(f"{case[0]:44s} {t_ours * 1e3:9.3f} {t_ort * 1e3:9.3f} {ratio:7.2f}{flag}")
    if ratios:
        print(f"geometric mean ratio: {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
