//! QNN op type names, param names and enum values used by the lowering rules.
//!
//! The strings and values come from QNN's `QnnOpDef.h` (opset 2.13; copy read from
//! qualcomm/geniex-qairt-plugin `qnn-api/include/QnnOpDef.h`). Rules use only these constants.
//! `qnn-sys` owns the full table; this is the subset lowering emits, kept here so that lowering
//! builds without QNN.

/// Op type names (`QNN_OP_*`).
pub mod op {
    pub const ARGMAX: &str = "Argmax";
    pub const ARGMIN: &str = "Argmin";
    pub const BATCHNORM: &str = "Batchnorm";
    pub const CAST: &str = "Cast";
    pub const CONCAT: &str = "Concat";
    pub const CONVERT: &str = "Convert";
    pub const CONV_2D: &str = "Conv2d";
    pub const CUMULATIVE_SUM: &str = "CumulativeSum";
    pub const DEPTH_TO_SPACE: &str = "DepthToSpace";
    pub const DEPTH_WISE_CONV_2D: &str = "DepthWiseConv2d";
    pub const DEQUANTIZE: &str = "Dequantize";
    pub const ELEMENT_WISE_ABS: &str = "ElementWiseAbs";
    pub const ELEMENT_WISE_ADD: &str = "ElementWiseAdd";
    pub const ELEMENT_WISE_AND: &str = "ElementWiseAnd";
    pub const ELEMENT_WISE_ASIN: &str = "ElementWiseAsin";
    pub const ELEMENT_WISE_ATAN: &str = "ElementWiseAtan";
    pub const ELEMENT_WISE_CEIL: &str = "ElementWiseCeil";
    pub const ELEMENT_WISE_COS: &str = "ElementWiseCos";
    pub const ELEMENT_WISE_DIVIDE: &str = "ElementWiseDivide";
    pub const ELEMENT_WISE_EQUAL: &str = "ElementWiseEqual";
    pub const ELEMENT_WISE_EXP: &str = "ElementWiseExp";
    pub const ELEMENT_WISE_FLOOR: &str = "ElementWiseFloor";
    pub const ELEMENT_WISE_GREATER: &str = "ElementWiseGreater";
    pub const ELEMENT_WISE_GREATER_EQUAL: &str = "ElementWiseGreaterEqual";
    pub const ELEMENT_WISE_LESS: &str = "ElementWiseLess";
    pub const ELEMENT_WISE_LESS_EQUAL: &str = "ElementWiseLessEqual";
    pub const ELEMENT_WISE_LOG: &str = "ElementWiseLog";
    pub const ELEMENT_WISE_MAXIMUM: &str = "ElementWiseMaximum";
    pub const ELEMENT_WISE_MINIMUM: &str = "ElementWiseMinimum";
    pub const ELEMENT_WISE_MOD: &str = "ElementWiseMod";
    pub const ELEMENT_WISE_MULTIPLY: &str = "ElementWiseMultiply";
    pub const ELEMENT_WISE_NEG: &str = "ElementWiseNeg";
    pub const ELEMENT_WISE_NEURON: &str = "ElementWiseNeuron";
    pub const ELEMENT_WISE_NOT: &str = "ElementWiseNot";
    pub const ELEMENT_WISE_NOT_EQUAL: &str = "ElementWiseNotEqual";
    pub const ELEMENT_WISE_OR: &str = "ElementWiseOr";
    pub const ELEMENT_WISE_POWER: &str = "ElementWisePower";
    pub const ELEMENT_WISE_ROUND: &str = "ElementWiseRound";
    pub const ELEMENT_WISE_RSQRT: &str = "ElementWiseRsqrt";
    pub const ELEMENT_WISE_SELECT: &str = "ElementWiseSelect";
    pub const ELEMENT_WISE_SIGN: &str = "ElementWiseSign";
    pub const ELEMENT_WISE_SIN: &str = "ElementWiseSin";
    pub const ELEMENT_WISE_SQUARE_ROOT: &str = "ElementWiseSquareRoot";
    pub const ELEMENT_WISE_SUBTRACT: &str = "ElementWiseSubtract";
    pub const ELEMENT_WISE_UNARY: &str = "ElementWiseUnary";
    pub const ELEMENT_WISE_XOR: &str = "ElementWiseXor";
    pub const ELU: &str = "Elu";
    pub const ERF: &str = "Erf";
    pub const EXPAND_DIMS: &str = "ExpandDims";
    pub const FULLY_CONNECTED: &str = "FullyConnected";
    pub const GATHER: &str = "Gather";
    pub const GATHER_ELEMENTS: &str = "GatherElements";
    pub const GATHER_ND: &str = "GatherNd";
    pub const GELU: &str = "Gelu";
    pub const GRID_SAMPLE: &str = "GridSample";
    pub const GROUP_NORM: &str = "GroupNorm";
    pub const HARD_SWISH: &str = "HardSwish";
    pub const INSTANCE_NORM: &str = "InstanceNorm";
    pub const L2_NORM: &str = "L2Norm";
    pub const LAYER_NORM: &str = "LayerNorm";
    pub const LOG_SOFTMAX: &str = "LogSoftmax";
    pub const LRN: &str = "Lrn";
    pub const LSTM: &str = "Lstm";
    pub const MAT_MUL: &str = "MatMul";
    pub const PAD: &str = "Pad";
    pub const POOL_AVG_2D: &str = "PoolAvg2d";
    pub const POOL_MAX_2D: &str = "PoolMax2d";
    pub const PRELU: &str = "Prelu";
    pub const QUANTIZE: &str = "Quantize";
    pub const REDUCE_MAX: &str = "ReduceMax";
    pub const REDUCE_MEAN: &str = "ReduceMean";
    pub const REDUCE_MIN: &str = "ReduceMin";
    pub const REDUCE_SUM: &str = "ReduceSum";
    pub const RELU: &str = "Relu";
    pub const RELU_MIN_MAX: &str = "ReluMinMax";
    pub const RESHAPE: &str = "Reshape";
    pub const RESIZE: &str = "Resize";
    pub const RMS_NORM: &str = "RmsNorm";
    pub const ROI_ALIGN: &str = "RoiAlign";
    pub const SCATTER_ELEMENTS: &str = "ScatterElements";
    pub const SCATTER_ND: &str = "ScatterNd";
    pub const SIGMOID: &str = "Sigmoid";
    pub const SOFTMAX: &str = "Softmax";
    pub const SPACE_TO_DEPTH: &str = "SpaceToDepth";
    pub const SPLIT: &str = "Split";
    pub const SQUEEZE: &str = "Squeeze";
    pub const STRIDED_SLICE: &str = "StridedSlice";
    pub const TANH: &str = "Tanh";
    pub const TILE: &str = "Tile";
    pub const TOP_K: &str = "TopK";
    pub const TRANSPOSE: &str = "Transpose";
    pub const TRANSPOSE_CONV_2D: &str = "TransposeConv2d";
}

/// Param names (`QNN_OP_*_PARAM_*`). The same string is shared by every op that uses it.
pub mod param {
    pub const ALIGNED: &str = "aligned";
    pub const ALIGN_CORNERS: &str = "align_corners";
    pub const ALLOW_INVALID_ROI: &str = "allow_invalid_roi";
    pub const ALPHA: &str = "alpha";
    pub const AXES: &str = "axes";
    pub const AXIS: &str = "axis";
    pub const BATCH_DIMS: &str = "batch_dims";
    pub const BEGIN_MASK: &str = "begin_mask";
    pub const BETA: &str = "beta";
    pub const BIAS: &str = "bias";
    pub const BLOCK_SIZE: &str = "block_size";
    pub const COUNT_PAD_FOR_EDGES: &str = "count_pad_for_edges";
    pub const CELL_CLIP_THRESHOLD: &str = "cell_clip_threshold";
    pub const CELL_GATE_QSCALE: &str = "cell_gate_qscale";
    pub const CUBIC_COEFF: &str = "cubic_coeff";
    pub const DILATION: &str = "dilation";
    pub const DIRECTION: &str = "direction";
    pub const END_MASK: &str = "end_mask";
    pub const EPSILON: &str = "epsilon";
    pub const EXCLUDE_OUTSIDE: &str = "exclude_outside";
    pub const EXCLUSIVE: &str = "exclusive";
    pub const FILTER_SIZE: &str = "filter_size";
    pub const FORGET_GATE_QSCALE: &str = "forget_gate_qscale";
    pub const GROUP: &str = "group";
    pub const HIDDEN_STATE_OFFSET: &str = "hidden_state_offset";
    pub const HIDDEN_STATE_QSCALE: &str = "hidden_state_qscale";
    pub const IMG_SIZE_RATIO: &str = "img_size_ratio";
    pub const INPUT_GATE_QSCALE: &str = "input_gate_qscale";
    pub const INTERPOLATION_MODE: &str = "interpolation_mode";
    pub const K: &str = "k";
    pub const KEEP_DIMS: &str = "keep_dims";
    pub const LARGEST: &str = "largest";
    pub const MAX_VALUE: &str = "max_value";
    pub const MIN_VALUE: &str = "min_value";
    pub const MODE: &str = "mode";
    pub const MULTIPLES: &str = "multiples";
    pub const NEAREST_MODE: &str = "nearest_mode";
    pub const NEW_AXES_MASK: &str = "new_axes_mask";
    pub const NUM_SAMPLES_X: &str = "num_samples_x";
    pub const NUM_SAMPLES_Y: &str = "num_samples_y";
    pub const OPERATION: &str = "operation";
    pub const OUTPUT_CLIP_THRESHOLD: &str = "output_clip_threshold";
    pub const OUTPUT_GATE_QSCALE: &str = "output_gate_qscale";
    pub const OUTPUT_PADDING: &str = "output_padding";
    pub const PADDING_MODE: &str = "padding_mode";
    pub const PAD_AMOUNT: &str = "pad_amount";
    pub const PAD_CONSTANT_VALUE: &str = "pad_constant_value";
    pub const PERM: &str = "perm";
    pub const RADIUS: &str = "radius";
    pub const RANGES: &str = "ranges";
    pub const REDUCTION: &str = "reduction";
    pub const REGION: &str = "region";
    pub const REVERSE: &str = "reverse";
    pub const ROUNDING_MODE: &str = "rounding_mode";
    pub const SCHEME: &str = "scheme";
    pub const SHRINK_AXES: &str = "shrink_axes";
    pub const SPLIT_INDEX: &str = "split_index";
    pub const STRIDE: &str = "stride";
    pub const TIME_MAJOR: &str = "time_major";
    pub const TRANSFORMATION_MODE: &str = "transformation_mode";
    pub const TRANSPOSE_IN0: &str = "transpose_in0";
    pub const TRANSPOSE_IN1: &str = "transpose_in1";
}

/// `QNN_OP_ELEMENT_WISE_NEURON_OPERATION_*`.
pub mod neuron {
    pub const ELU: u32 = 0;
    pub const GELU: u32 = 1;
    pub const HARD_SIGMOID: u32 = 2;
    pub const HARD_SWISH: u32 = 3;
    pub const RELU: u32 = 4;
    pub const RELU_MIN_MAX: u32 = 5;
    pub const SIGMOID: u32 = 6;
    pub const SOFTPLUS: u32 = 7;
    pub const TANH: u32 = 8;
}

/// `QNN_OP_ELEMENT_WISE_UNARY_OPERATION_*`.
pub mod unary {
    pub const RECIPROCAL: u32 = 10;
}

/// `QNN_OP_PAD_SCHEME_*`.
pub mod pad_scheme {
    pub const CONSTANT: u32 = 0;
    pub const MIRROR_SYMMETRIC: u32 = 1;
    pub const MIRROR_REFLECT: u32 = 2;
    pub const EDGE: u32 = 3;
}

/// `QNN_OP_POOL_*_ROUNDING_MODE_*`.
pub mod rounding {
    pub const FLOOR: u32 = 0;
    pub const CEIL: u32 = 1;
}

/// `QNN_OP_RESIZE_*` values.
pub mod resize {
    pub const HALF_PIXEL: u32 = 0;
    pub const PYTORCH_HALF_PIXEL: u32 = 1;
    pub const ALIGN_CORNERS: u32 = 2;
    pub const ASYMMETRIC: u32 = 3;
    pub const NEAREST: u32 = 0;
    pub const LINEAR: u32 = 1;
    pub const CUBIC: u32 = 2;
    pub const ROUND_PREFER_FLOOR: u32 = 0;
    pub const ROUND_PREFER_CEIL: u32 = 1;
    pub const FLOOR: u32 = 2;
    pub const CEIL: u32 = 3;
}

/// `QNN_OP_SCATTER_ELEMENTS_REDUCTION_*` (ScatterNd has the first three).
pub mod scatter_reduction {
    pub const NONE: u32 = 0;
    pub const ADD: u32 = 1;
    pub const MUL: u32 = 2;
    pub const MAX: u32 = 3;
}

/// `QNN_OP_GRID_SAMPLE_MODE_*` / `QNN_OP_GRID_SAMPLE_PADDING_MODE_*`.
pub mod grid_sample {
    pub const BILINEAR: u32 = 0;
    pub const NEAREST: u32 = 1;
    pub const ZEROS: u32 = 0;
    pub const BORDER: u32 = 1;
    pub const REFLECTION: u32 = 2;
}

/// `QNN_OP_LRN_REGION_*`.
pub mod lrn_region {
    pub const ACROSS_CHANNEL: u32 = 0;
}

/// `QNN_OP_DEPTH_TO_SPACE_MODE_*` / `QNN_OP_SPACE_TO_DEPTH_MODE_*`.
pub mod d2s_mode {
    pub const DCR: u32 = 0;
    pub const CRD: u32 = 1;
}
