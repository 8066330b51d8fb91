# /// script
# dependencies = ["onnx==1.22.0", "numpy"]
# ///
"""Single-op models for the ops in lowering/op-tables/htp.toml that no ONNX node test covers as we run
them (the node tests pass weights, scales, K, repeats... as graph inputs, which the lowering
requires to be constant). One folder per case under OUT_DIR: model.onnx with the parameters as
initializers, input_<i>.npy, and output_<i>.npy computed by onnx's reference evaluator.
engine/tests/models_htp.rs (`op_cases`) runs them on the emulated HTP.

Run: python3 tests/models/ops/gen.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

rng = np.random.default_rng(0)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def case(out, name, op, x, inits, attrs=None, opset=17, outputs=1, extra_nodes=(), want=None,
         inputs=()):
    """One `op` node reading graph input `x` then the initializers, in order (an empty name
    skips an optional input). `inputs`: names of `inits` that are graph inputs instead
    (input_1.npy, ... in that order). `want`: the expected outputs, where the reference
    evaluator does not implement the case."""
    names = ["x"] + [k for k, _ in inits]
    feeds = [("x", x)] + [(k, v) for k, v in inits if k in inputs]
    inits = [(k, v) for k, v in inits if k and k not in inputs]
    outs = [f"y{i}" for i in range(outputs)]
    nodes = [helper.make_node(op, names, outs, **(attrs or {}))] + list(extra_nodes)
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in feeds],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    save(out, name, g, opset, feeds, want)


def chain(out, name, x, nodes, inits, opset=17):
    """A chain of `nodes` (helper.make_node) from graph input `x` to output `y`, the
    initializers `inits` as (name, array): a pattern that the lowering rewrites."""
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    save(out, name, g, opset, [("x", x)], None)


def save(out, name, g, opset, feeds, want):
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, (_, v) in enumerate(feeds):
        np.save(os.path.join(d, f"input_{i}.npy"), v)
    if want is None:
        want = ReferenceEvaluator(m).run(None, dict(feeds))
    for i, y in enumerate(want):
        np.save(os.path.join(d, f"output_{i}.npy"), y)


def recurrent(op, x, w, r, b=None, h0=None, c0=None, p=None, direction="forward", layout=0,
              clip=None, activations=None, lbr=0):
    """ONNX LSTM/GRU/RNN in numpy (float64), for what onnx's reference evaluator leaves out:
    reverse and bidirectional directions, clip, activations, initial states with layout 1."""
    acts = {"Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh,
            "Relu": lambda v: np.maximum(v, 0), "Softsign": lambda v: v / (1 + np.abs(v))}
    if layout:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    t_len, batch, _ = x.shape
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    h_size = w.shape[1] // gates
    defaults = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}[op]
    rev = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
    names = activations or defaults * len(rev)
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    y = np.zeros((t_len, len(rev), batch, h_size))
    finals = [np.zeros((len(rev), batch, h_size)) for _ in range(2)]
    for d, backwards in enumerate(rev):
        f, g, hh = ([acts[n] for n in names[len(defaults) * d:len(defaults) * (d + 1)]] + [None] * 2)[:3]
        wd, rd = w[d].astype(np.float64), r[d].astype(np.float64)
        bd = np.zeros(2 * gates * h_size) if b is None else b[d].astype(np.float64)
        wb, rb = bd[:gates * h_size], bd[gates * h_size:]
        h = np.zeros((batch, h_size)) if h0 is None else h0[d].astype(np.float64)
        c = np.zeros((batch, h_size)) if c0 is None else c0[d].astype(np.float64)
        pd = np.zeros(3 * h_size) if p is None else p[d].astype(np.float64)
        for t in (range(t_len - 1, -1, -1) if backwards else range(t_len)):
            xt = x[t].astype(np.float64)
            k = lambda v, i: v[:, i * h_size:(i + 1) * h_size]
            if op == "LSTM":
                a = xt @ wd.T + h @ rd.T + wb + rb
                i_g = f(cl(k(a, 0) + pd[:h_size] * c))
                f_g = f(cl(k(a, 2) + pd[2 * h_size:] * c))
                c = f_g * c + i_g * g(cl(k(a, 3)))
                h = f(cl(k(a, 1) + pd[h_size:2 * h_size] * c)) * hh(c)
            elif op == "GRU":
                xw = xt @ wd.T + wb
                z = f(cl(k(xw, 0) + h @ rd[:h_size].T + rb[:h_size]))
                rr = f(cl(k(xw, 1) + h @ rd[h_size:2 * h_size].T + rb[h_size:2 * h_size]))
                rec = rr * (h @ rd[2 * h_size:].T + rb[2 * h_size:]) if lbr else (rr * h) @ rd[2 * h_size:].T + rb[2 * h_size:]
                n = g(cl(k(xw, 2) + rec))
                h = (1 - z) * n + z * h
            else:
                h = f(cl(xt @ wd.T + h @ rd.T + wb + rb))
            y[t, d] = h
        finals[0][d], finals[1][d] = h, c
    if layout:
        y = y.transpose(2, 0, 1, 3)
        finals = [v.transpose(1, 0, 2) for v in finals]
    outs = [y, finals[0]] + ([finals[1]] if op == "LSTM" else [])
    return [v.astype(np.float32) for v in outs]


def lrn(x, size, alpha, beta, bias):
    """ONNX LRN in numpy: onnx's reference evaluator sums the squares of the first N channels
    only (its loop runs over the batch dim)."""
    sq, c = x.astype(np.float64) ** 2, x.shape[1]
    s = np.stack([sq[:, max(0, k - (size - 1) // 2):k + size // 2 + 1].sum(1) for k in range(c)], 1)
    return [(x / (bias + alpha / size * s) ** beta).astype(np.float32)]


def main(out):
    c = 4
    case(out, "batchnorm", "BatchNormalization", f32(1, c, 5, 5), [
        ("scale", f32(c)), ("bias", f32(c)), ("mean", f32(c)),
        ("var", np.abs(f32(c)) + 0.5)])
    case(out, "conv_transpose", "ConvTranspose", f32(1, c, 5, 5), [("w", f32(c, 3, 3, 3, scale=0.3))],
         {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    case(out, "cumsum", "CumSum", f32(3, 6), [("axis", np.array(1, np.int64))])
    case(out, "cumsum_exclusive", "CumSum", f32(3, 6), [("axis", np.array(0, np.int64))],
         {"exclusive": 1})
    case(out, "einsum_matmul", "Einsum", f32(2, 3, 4), [("w", f32(2, 4, 5))], {"equation": "bij,bjk->bik"})
    case(out, "group_norm", "GroupNormalization", f32(1, c, 3, 3), [("scale", f32(c)), ("bias", f32(c))],
         {"num_groups": 2}, opset=21)
    # p = 2 is QNN L2Norm; values whose sum of squares overflows fp16 (the reference's p = 1 forgets
    # the absolute value, so only p = 2 is checked here; the node tests cover p = 1).
    case(out, "lp_normalization_large", "LpNormalization", f32(2, 64, 3, scale=300.0), [],
         {"axis": 1, "p": 2})
    # The expanded reductions, axes as a constant input (opset 18); the node tests pass them as
    # graph inputs. ReduceL2's sums of squares pass fp16's range (see reduce_composite.rs).
    ax = lambda *a: ("axes", np.array(a, np.int64))
    case(out, "reduce_l1", "ReduceL1", f32(2, 5, 7), [ax(1)], {"keepdims": 0}, opset=18)
    case(out, "reduce_l2_large", "ReduceL2", f32(2, 3, 1024, scale=20.0), [ax(-1)], opset=18)
    case(out, "reduce_sum_square", "ReduceSumSquare", f32(2, 5, 7), [ax(0, 2)], opset=18)
    case(out, "reduce_log_sum_exp", "ReduceLogSumExp", f32(3, 9, scale=5.0), [ax(1)], opset=18)
    case(out, "reduce_prod", "ReduceProd", (np.abs(f32(3, 6, 5)) * 0.5 + 0.6).astype(np.float32),
         [ax(1)], {"keepdims": 0}, opset=18)
    # Instance and group normalisation of the ranks QNN's InstanceNorm/GroupNorm do not take
    # (nn.GroupNorm exports a rank-3 InstanceNormalization; the node tests are all 4-D).
    case(out, "instance_norm_3d", "InstanceNormalization", f32(2, 3, 10), [("s", f32(3)), ("b", f32(3))])
    case(out, "instance_norm_5d", "InstanceNormalization", f32(2, 3, 2, 3, 4), [("s", f32(3)), ("b", f32(3))],
         {"epsilon": 1e-3})
    case(out, "group_norm_3d", "GroupNormalization", f32(2, 6, 5), [("scale", f32(6)), ("bias", f32(6))],
         {"num_groups": 2}, opset=21)
    case(out, "group_norm_3d_per_group", "GroupNormalization", f32(2, 6, 5), [("scale", f32(3)), ("bias", f32(3))],
         {"num_groups": 3}, opset=18)
    # Constant (and negative) indices, wrapped on the host; ScatterElements' add runs as a
    # ScatterNd over host-built index tuples (the HTP's ScatterElements reduces by none only).
    case(out, "gather_nd_const", "GatherND", f32(3, 4, 5), [("i", np.array([[0, -1], [2, 1]], np.int64))])
    case(out, "scatter_elements_add_const", "ScatterElements", f32(3, 5),
         [("i", np.array([[0, -1, 0], [4, 4, 2]], np.int64)), ("u", f32(2, 3))],
         {"axis": 1, "reduction": "add"}, opset=18)
    case(out, "scatter_nd_mul_const", "ScatterND", f32(4, 3),
         [("i", np.array([[1], [-1], [1]], np.int64)), ("u", f32(3, 3))], {"reduction": "mul"}, opset=18)
    # Recurrent ops in the variants onnx's reference evaluator does not implement (it runs
    # forward only and ignores clip and activations): the expected outputs come from recurrent().
    t_len, batch, i_size, h_size = 5, 2, 3, 4
    w4, r4, b4, p3 = f32(2, 16, 3, scale=0.5), f32(2, 16, 4, scale=0.5), f32(2, 32, scale=0.5), f32(2, 12, scale=0.5)
    x = f32(t_len, batch, i_size)
    case(out, "lstm_bidirectional_peepholes", "LSTM", x,
         [("w", w4), ("r", r4), ("b", b4), ("", None), ("", None), ("", None), ("p", p3)],
         {"hidden_size": h_size, "direction": "bidirectional"}, opset=14, outputs=3,
         want=recurrent("LSTM", x, w4, r4, b4, p=p3, direction="bidirectional"))
    xb = f32(batch, t_len, i_size, scale=4.0)
    case(out, "lstm_reverse_layout1_clip", "LSTM", xb, [("w", w4[:1]), ("r", r4[:1]), ("b", b4[:1])],
         {"hidden_size": h_size, "direction": "reverse", "layout": 1, "clip": 0.5}, opset=14, outputs=3,
         want=recurrent("LSTM", xb, w4[:1], r4[:1], b4[:1], direction="reverse", layout=1, clip=0.5))
    acts = ["Sigmoid", "Relu", "Softsign"]
    case(out, "lstm_activations", "LSTM", x, [("w", w4[:1]), ("r", r4[:1]), ("b", b4[:1])],
         {"hidden_size": h_size, "activations": acts}, opset=14,
         want=recurrent("LSTM", x, w4[:1], r4[:1], b4[:1], activations=acts)[:1])
    w3, r3, b3 = f32(2, 12, 3, scale=0.5), f32(2, 12, 4, scale=0.5), f32(2, 24, scale=0.5)
    for lbr in (0, 1):
        case(out, f"gru_bidirectional_lbr{lbr}", "GRU", x, [("w", w3), ("r", r3), ("b", b3)],
             {"hidden_size": h_size, "direction": "bidirectional", "linear_before_reset": lbr}, opset=14,
             outputs=2, want=recurrent("GRU", x, w3, r3, b3, direction="bidirectional", lbr=lbr))
    case(out, "gru_reverse_layout1_clip", "GRU", xb, [("w", w3[:1]), ("r", r3[:1])],
         {"hidden_size": h_size, "direction": "reverse", "layout": 1, "clip": 0.7,
          "linear_before_reset": 1}, opset=14, outputs=2,
         want=recurrent("GRU", xb, w3[:1], r3[:1], direction="reverse", layout=1, clip=0.7, lbr=1))
    w1, r1, b1 = f32(2, 4, 3, scale=0.5), f32(2, 4, 4, scale=0.5), f32(2, 8, scale=0.5)
    case(out, "rnn_bidirectional_activations", "RNN", x, [("w", w1), ("r", r1), ("b", b1)],
         {"hidden_size": h_size, "direction": "bidirectional", "activations": ["Tanh", "Relu"]},
         opset=14, outputs=2,
         want=recurrent("RNN", x, w1, r1, b1, direction="bidirectional", activations=["Tanh", "Relu"]))
    xl = f32(2, 7, 4, 5, scale=2.0)
    case(out, "lrn", "LRN", xl, [], {"size": 5, "alpha": 1.0, "beta": 0.75, "bias": 1.0}, opset=13,
         want=lrn(xl, 5, 1.0, 0.75, 1.0))
    # Adaptive sampling (ratio 0) and a spatial scale; the node tests use ratio 2, scale 1.
    rois = np.array([[2, 4, 20, 18], [0, 0, 31, 23], [6.6, 8.2, 15.4, 16.4]], np.float32)
    case(out, "roi_align_adaptive", "RoiAlign", f32(2, 3, 12, 16),
         [("rois", rois), ("idx", np.array([1, 0, 1], np.int64))],
         {"output_height": 3, "output_width": 4, "sampling_ratio": 0, "spatial_scale": 0.5}, opset=16)
    # Constant position ids (the caches gathered on the host); the node tests pass them as inputs.
    case(out, "rotary_embedding_const_positions", "RotaryEmbedding", f32(1, 2, 3, 8),
         [("cos", f32(16, 2)), ("sin", f32(16, 2)), ("pos", np.array([[0, 5, 9]], np.int64))],
         {"rotary_embedding_dim": 4, "interleaved": 1}, opset=23)
    case(out, "resize_nearest", "Resize", f32(1, 2, 3, 4),
         [("roi", np.array([], np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32))],
         # HTP validates nearest Resize only in this combination (the default half_pixel /
         # round_prefer_floor fails validation with "expected equal to 2").
         {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
    case(out, "resize_linear", "Resize", f32(1, 2, 3, 4),
         [("roi", np.array([], np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32))],
         {"mode": "linear"})
    case(out, "tile", "Tile", f32(2, 3), [("repeats", np.array([2, 3], np.int64))])
    case(out, "topk", "TopK", f32(3, 8), [("k", np.array([3], np.int64))], outputs=2)
    case(out, "upsample", "Upsample", f32(1, 2, 3, 3), [("scales", np.array([1, 1, 2, 2], np.float32))],
         {"mode": "nearest"}, opset=9)
    # A constant int8 tensor dequantized (folded into float weights) feeding a MatMul.
    q = rng.integers(-100, 100, (4, 3)).astype(np.int8)
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["w"])
    mm = helper.make_node("MatMul", ["x", "w"], ["y0"])
    g = helper.make_graph(
        [dq, mm], "dequantize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(q, "q"), numpy_helper.from_array(np.array(0.01, np.float32), "s"),
         numpy_helper.from_array(np.array(3, np.int8), "z")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 8
    d = os.path.join(out, "dequantize_linear")
    os.makedirs(d, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    x = f32(2, 4)
    np.save(os.path.join(d, "input_0.npy"), x)
    np.save(os.path.join(d, "output_0.npy"), ReferenceEvaluator(m).run(None, {"x": x})[0])
    # A Conv1d's output sliced along its channels (forwards, and backwards with a negative step)
    # and along time, squared, summed and square-rooted into the next Conv1d: silero-vad's STFT
    # magnitude, which the layout pass keeps channel-last through Slice, Pow, Add and Sqrt.
    i64 = lambda *v: np.array(v, np.int64)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], strides=[8]),
        helper.make_node("Slice", ["c", "s0", "s4", "ax1"], ["re"]),
        helper.make_node("Slice", ["c", "s7", "sneg", "ax1", "step_neg"], ["im"]),
        helper.make_node("Pow", ["re", "two"], ["re2"]),
        helper.make_node("Pow", ["im", "two"], ["im2"]),
        helper.make_node("Add", ["re2", "im2"], ["p"]),
        helper.make_node("Sqrt", ["p"], ["m"]),
        helper.make_node("Conv", ["m", "w2"], ["y0"], pads=[1, 1]),
        helper.make_node("Slice", ["m", "s0", "s7", "ax2", "step2"], ["y1"]),
    ]
    inits = {"w1": f32(8, 1, 16, scale=0.3), "w2": f32(3, 4, 3, scale=0.3), "s0": i64(0), "s4": i64(4),
             "s7": i64(7), "sneg": i64(3), "ax1": i64(1), "step_neg": i64(-1), "ax2": i64(2),
             "step2": i64(2), "two": np.array(2.0, np.float32)}
    g = helper.make_graph(
        nodes, "conv1d_slices",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64])],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in ("y0", "y1")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    d = os.path.join(out, "conv1d_slices")
    os.makedirs(d, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    x = f32(1, 1, 64)
    np.save(os.path.join(d, "input_0.npy"), x)
    for i, y in enumerate(ReferenceEvaluator(m).run(None, {"x": x})):
        np.save(os.path.join(d, f"output_{i}.npy"), y)
    # LSTM in the variants that run as one QNN Lstm per step and direction (default activations,
    # no clip or peepholes): initial states as graph inputs (reshaped or sliced per direction) and
    # as constants (sliced on the host), no B (zero biases), layout 1, one step (silero's
    # decoder). Drawn last, so that the cases above keep their data.
    t_len, batch, i_size, h_size = 5, 2, 3, 4
    w4, r4, b4 = f32(2, 16, 3, scale=0.5), f32(2, 16, 4, scale=0.5), f32(2, 32, scale=0.5)
    x, xb = f32(t_len, batch, i_size), f32(batch, t_len, i_size, scale=2.0)
    h0, c0 = f32(1, batch, h_size), f32(1, batch, h_size)
    case(out, "lstm_qnn_forward_states", "LSTM", x,
         [("w", w4[:1]), ("r", r4[:1]), ("b", b4[:1]), ("", None), ("h0", h0), ("c0", c0)],
         {"hidden_size": h_size}, opset=14, outputs=3, inputs=("h0", "c0"),
         want=recurrent("LSTM", x, w4[:1], r4[:1], b4[:1], h0=h0, c0=c0))
    case(out, "lstm_qnn_bidirectional", "LSTM", x, [("w", w4), ("r", r4), ("b", b4)],
         {"hidden_size": h_size, "direction": "bidirectional"}, opset=14, outputs=3,
         want=recurrent("LSTM", x, w4, r4, b4, direction="bidirectional"))
    hb, cb = f32(batch, 2, h_size), f32(batch, 2, h_size)
    case(out, "lstm_qnn_bidirectional_layout1_states", "LSTM", xb,
         [("w", w4), ("r", r4), ("b", b4), ("", None), ("h0", hb), ("c0", cb)],
         {"hidden_size": h_size, "direction": "bidirectional", "layout": 1}, opset=14, outputs=3,
         inputs=("c0",),
         want=recurrent("LSTM", xb, w4, r4, b4, h0=hb, c0=cb, direction="bidirectional", layout=1))
    case(out, "lstm_qnn_reverse_no_bias", "LSTM", x, [("w", w4[:1]), ("r", r4[:1])],
         {"hidden_size": h_size, "direction": "reverse"}, opset=14, outputs=3,
         want=recurrent("LSTM", x, w4[:1], r4[:1], direction="reverse"))
    x1 = f32(1, batch, i_size)
    case(out, "lstm_qnn_one_step", "LSTM", x1,
         [("w", w4[:1]), ("r", r4[:1]), ("b", b4[:1]), ("", None), ("h0", h0), ("c0", c0)],
         {"hidden_size": h_size}, opset=14, outputs=3, inputs=("h0", "c0"),
         want=recurrent("LSTM", x1, w4[:1], r4[:1], b4[:1], h0=h0, c0=c0))
    # HardSwish written out (passes/fuse_hardswish.rs): paddle2onnx's form at opset 12 and
    # torch's HardSigmoid form; both run as one QNN HardSwish.
    n = helper.make_node
    sc = lambda v: np.array(v, np.float32)
    xs = f32(1, 8, 6, 6, scale=3.0)
    chain(out, "hardswish_paddle", xs, [
        n("Add", ["x", "three"], ["a"]), n("Clip", ["a", "zero", "six"], ["c"]),
        n("Mul", ["x", "c"], ["m"]), n("Div", ["m", "six"], ["y"])],
        [("three", sc(3.0)), ("zero", sc(0.0)), ("six", sc(6.0))], opset=12)
    chain(out, "hardswish_hardsigmoid", xs, [
        n("HardSigmoid", ["x"], ["h"], alpha=1.0 / 6.0), n("Mul", ["x", "h"], ["y"])], [],
        opset=13)
    # PP-LCNet's blocks (passes/fold_conv.rs): Conv -> scalar Mul/Add -> HardSwish -> Mul/Add
    # -> padded depthwise Conv -> Relu -> per-channel Mul/Add -> unpadded 1x1 Conv, the affine
    # maps folded into the Convs (the Mul before the padded one through its Add).
    c = 8
    chain(out, "conv_affine_folds", f32(1, 4, 6, 6), [
        n("Conv", ["x", "w0", "b0"], ["c0"]), n("Mul", ["s0", "c0"], ["m0"]),
        n("Add", ["m0", "t0"], ["a0"]), n("Add", ["a0", "three"], ["h0"]),
        n("Clip", ["h0", "zero", "six"], ["h1"]), n("Mul", ["a0", "h1"], ["h2"]),
        n("Div", ["h2", "six"], ["h3"]), n("Mul", ["s1", "h3"], ["m1"]),
        n("Add", ["m1", "t1"], ["a1"]),
        n("Conv", ["a1", "w1", "b1"], ["c1"], group=c, pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]), n("Mul", ["r1", "s2"], ["m2"]), n("Add", ["m2", "t2"], ["a2"]),
        n("Conv", ["a2", "w2"], ["y"])], [
        ("w0", f32(c, 4, 1, 1, scale=0.5)), ("b0", f32(c)), ("s0", sc([1.4])), ("t0", sc([0.6])),
        ("three", sc(3.0)), ("zero", sc(0.0)), ("six", sc(6.0)), ("s1", sc([0.4])),
        ("t1", sc([-0.3])), ("w1", f32(c, 1, 3, 3, scale=0.5)), ("b1", f32(c)),
        ("s2", f32(1, c, 1, 1)), ("t2", f32(1, c, 1, 1)), ("w2", f32(6, c, 1, 1, scale=0.4))],
        opset=12)
    # Softmax over an axis other than the last (passes/layout.rs, softmax_axis_last): YOLOv8's
    # DFL head, Reshape -> Transpose -> Softmax(axis 1) -> 1x1 Conv, and a softmax over a conv
    # output's channels; the softmax's transposes compose with the model's and the layout's.
    chain(out, "softmax_dfl", f32(1, 64, 12, scale=3.0), [
        n("Reshape", ["x", "shape"], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        n("Softmax", ["t"], ["s"], axis=1), n("Conv", ["s", "w"], ["c"]),
        n("Reshape", ["c", "shape2"], ["y"])],
        [("shape", np.array([1, 4, 16, 12], np.int64)), ("w", np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)),
         ("shape2", np.array([1, 4, 12], np.int64))], opset=13)
    chain(out, "softmax_conv_channels", f32(1, 3, 6, 6), [
        n("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), n("Softmax", ["c0"], ["s"], axis=1),
        n("Conv", ["s", "w1"], ["c1"]), n("LogSoftmax", ["c1"], ["y"], axis=-3)],
        [("w0", f32(8, 3, 3, 3)), ("w1", f32(5, 8, 1, 1, scale=2.0))], opset=13)
    # Reshapes that split or merge dims after a conv (passes/layout.rs, regroup_reshape_step):
    # ShuffleNet's channel shuffle (3 groups here) then a Slice of the shuffled channels into a
    # conv, and a ViT patch embedding's flatten(2).transpose(1, 2) into a MatMul; a wrong
    # grouping or inner perm scrambles channels or tokens.
    i64 = lambda v: np.array(v, np.int64)
    chain(out, "channel_shuffle_slice", f32(1, 4, 5, 6), [
        n("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), n("Reshape", ["c0", "split"], ["r"]),
        n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]), n("Reshape", ["t", "merged"], ["s"]),
        n("Slice", ["s", "s0", "s1", "ax"], ["h"]), n("Conv", ["h", "w1"], ["c1"]),
        n("Concat", ["c1", "s"], ["y"], axis=1)],
        [("w0", f32(12, 4, 3, 3, scale=0.5)), ("split", i64([1, 3, 4, 5, 6])),
         ("merged", i64([1, 12, 5, 6])), ("s0", i64([6])), ("s1", i64([12])), ("ax", i64([1])),
         ("w1", f32(6, 6, 1, 1, scale=0.5))], opset=13)
    chain(out, "patch_embed_tokens", f32(1, 3, 8, 12), [
        n("Conv", ["x", "w0"], ["c0"], strides=[4, 4]), n("Reshape", ["c0", "flat"], ["f"]),
        n("Transpose", ["f"], ["t"], perm=[0, 2, 1]), n("MatMul", ["t", "w1"], ["y"])],
        [("w0", f32(8, 3, 4, 4, scale=0.2)), ("flat", i64([1, 8, 6])), ("w1", f32(8, 5, scale=0.2))],
        opset=13)
    print(f"{len(os.listdir(out))} cases in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    main(sys.argv[1])
