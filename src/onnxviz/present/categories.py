"""Operator categories: what colour family a node box gets.

The category is a property of the operator (domain, op_type), not of the theme; the UI
maps categories to colours (`onnxviz.ui.theme`).  Unknown default-domain ops fall back to
"other"; any op outside the standard domains is "custom".
"""

from __future__ import annotations

from typing import Literal

Category = Literal[
    "layer",
    "activation",
    "pooling",
    "normalization",
    "shape",
    "creation",
    "control",
    "quantization",
    "logic",
    "math",
    "ml",
    "custom",
    "other",
]

CATEGORIES: tuple[Category, ...] = (
    "layer",
    "activation",
    "pooling",
    "normalization",
    "shape",
    "creation",
    "control",
    "quantization",
    "logic",
    "math",
    "ml",
    "custom",
    "other",
)

CATEGORY_TITLES: dict[Category, str] = {
    "layer": "layer",
    "activation": "activation",
    "pooling": "pooling",
    "normalization": "normalization",
    "shape": "shape / data movement",
    "creation": "tensor creation",
    "control": "control flow",
    "quantization": "quantization",
    "logic": "logic / comparison",
    "math": "arithmetic",
    "ml": "classic ML",
    "custom": "custom domain",
    "other": "other",
}

_OPS: dict[Category, str] = {
    "layer": """Conv ConvTranspose ConvInteger Gemm MatMul MatMulInteger QLinearConv QLinearMatMul
        LSTM GRU RNN Einsum DeformConv Attention MultiHeadAttention RotaryEmbedding
        Col2Im""",
    "activation": """Relu LeakyRelu PRelu Sigmoid HardSigmoid Tanh Elu Selu Celu Gelu FastGelu
        Softmax LogSoftmax Hardmax Softplus Softsign ThresholdedRelu HardSwish Mish Swish
        BiasGelu QuickGelu""",
    "pooling": """MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool GlobalLpPool
        MaxRoiPool RoiAlign MaxUnpool""",
    "normalization": """BatchNormalization InstanceNormalization LayerNormalization
        GroupNormalization RMSNormalization SimplifiedLayerNormalization
        SkipLayerNormalization LRN LpNormalization MeanVarianceNormalization Dropout""",
    "shape": """Reshape Transpose Flatten Squeeze Unsqueeze Concat Split Slice Gather
        GatherElements GatherND Scatter ScatterElements ScatterND Expand Tile Pad Shape Size
        DepthToSpace SpaceToDepth Identity Cast CastLike Resize Upsample Compress
        ReverseSequence Trilu CenterCropPad SplitToSequence ConcatFromSequence
        SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert
        SequenceLength SequenceMap OptionalGetElement OptionalHasElement Optional
        TensorScatter Unique NonZero TopK""",
    "creation": """Constant ConstantOfShape Range EyeLike RandomNormal RandomNormalLike
        RandomUniform RandomUniformLike Multinomial Bernoulli OneHot""",
    "control": "If Loop Scan",
    "quantization": """QuantizeLinear DequantizeLinear DynamicQuantizeLinear
        DynamicQuantizeLSTM QLinearAdd QLinearMul QLinearSigmoid QLinearLeakyRelu""",
    "logic": """Equal Greater GreaterOrEqual Less LessOrEqual Not And Or Xor Where IsNaN
        IsInf BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift Max Min ArgMax ArgMin""",
    "math": """Add Sub Mul Div Pow Sqrt Exp Log Abs Neg Reciprocal Floor Ceil Round Sign Erf
        Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Mod Sum Mean Clip
        ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum
        ReduceLogSumExp ReduceSumSquare CumSum Det MelWeightMatrix DFT STFT
        NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss""",
}

_CATEGORY_OF: dict[str, Category] = {
    op: category for category, text in _OPS.items() for op in text.split()
}

_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft")


def category_of(op_type: str, domain: str = "") -> Category:
    """The colour family of an operator."""
    if domain == "ai.onnx.ml":
        return "ml"
    if domain not in _STANDARD_DOMAINS:
        return "custom"
    return _CATEGORY_OF.get(op_type, "other")
