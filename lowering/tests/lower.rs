//! End-to-end: model bytes → plan, `check`, error collection, fp16 and int64 handling.

use lowering::plan::{DType as P, Plan, TensorKind};
use lowering::tensor::Tensor;
use lowering::testing::{input_dims, rand_f32, ModelBuilder, A};
use lowering::{check, lower, Backend, DType, LowerError, LowerOptions, Model};

fn w(seed: u64, shape: &[usize]) -> Tensor {
    Tensor::from_f32(shape.to_vec(), &rand_f32(seed, shape.iter().product()))
}

/// A torchvision-style residual block: conv-bn-relu-conv-bn + identity, relu, pool, fc.
fn resnet_block() -> ModelBuilder {
    let bn = |b: ModelBuilder, p: &str| {
        b.init(&format!("{p}_g"), Tensor::from_f32(vec![8], &[1.0; 8]))
            .init(&format!("{p}_b"), Tensor::from_f32(vec![8], &[0.1; 8]))
            .init(&format!("{p}_m"), Tensor::from_f32(vec![8], &[0.0; 8]))
            .init(&format!("{p}_v"), Tensor::from_f32(vec![8], &[1.0; 8]))
    };
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[1, 8, 8, 8])
        .init("w1", w(1, &[8, 8, 3, 3]))
        .init("w2", w(2, &[8, 8, 3, 3]))
        .init("fc_w", w(3, &[10, 8]))
        .init("fc_b", w(4, &[10]));
    let b = bn(bn(b, "bn1"), "bn2");
    let p = ("pads", A::Is(vec![1, 1, 1, 1]));
    b.node("Conv", &["x", "w1"], &["c1"], std::slice::from_ref(&p))
        .node(
            "BatchNormalization",
            &["c1", "bn1_g", "bn1_b", "bn1_m", "bn1_v"],
            &["b1"],
            &[],
        )
        .node("Relu", &["b1"], &["r1"], &[])
        .node("Conv", &["r1", "w2"], &["c2"], &[p])
        .node(
            "BatchNormalization",
            &["c2", "bn2_g", "bn2_b", "bn2_m", "bn2_v"],
            &["b2"],
            &[],
        )
        .node("Add", &["b2", "x"], &["s"], &[])
        .node("Relu", &["s"], &["r2"], &[])
        .node("GlobalAveragePool", &["r2"], &["g"], &[])
        .node("Flatten", &["g"], &["f"], &[])
        .node(
            "Gemm",
            &["f", "fc_w", "fc_b"],
            &["y"],
            &[("transB", A::I(1))],
        )
        .output("y")
}

/// A post-norm transformer encoder layer as torch exports it (shape arithmetic included).
fn encoder_layer() -> ModelBuilder {
    let d = 8usize;
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[1, 4, d as i64])
        .init("wq", w(1, &[d, d]))
        .init("wk", w(2, &[d, d]))
        .init("wv", w(3, &[d, d]))
        .init("wo", w(4, &[d, d]))
        .init("w1", w(5, &[d, 16]))
        .init("w2", w(6, &[16, d]))
        .init("ln_g", Tensor::from_f32(vec![d], &[1.0; 8]))
        .init("ln_b", Tensor::from_f32(vec![d], &[0.0; 8]))
        .init("heads", Tensor::from_i64(vec![4], &[1, 4, 2, 4]))
        .init("merge", Tensor::from_i64(vec![3], &[1, 4, 8]))
        .init("scale", Tensor::scalar_f32(0.5))
        .init("s2", Tensor::scalar_f32(std::f32::consts::SQRT_2))
        .init("one", Tensor::scalar_f32(1.0))
        .init("half", Tensor::scalar_f32(0.5));
    b.node("MatMul", &["x", "wq"], &["q0"], &[])
        .node("MatMul", &["x", "wk"], &["k0"], &[])
        .node("MatMul", &["x", "wv"], &["v0"], &[])
        .node("Reshape", &["q0", "heads"], &["q1"], &[])
        .node("Reshape", &["k0", "heads"], &["k1"], &[])
        .node("Reshape", &["v0", "heads"], &["v1"], &[])
        .node(
            "Transpose",
            &["q1"],
            &["q"],
            &[("perm", A::Is(vec![0, 2, 1, 3]))],
        )
        .node(
            "Transpose",
            &["k1"],
            &["kt"],
            &[("perm", A::Is(vec![0, 2, 3, 1]))],
        )
        .node(
            "Transpose",
            &["v1"],
            &["v"],
            &[("perm", A::Is(vec![0, 2, 1, 3]))],
        )
        .node("MatMul", &["q", "kt"], &["att0"], &[])
        .node("Mul", &["att0", "scale"], &["att1"], &[])
        .node("Softmax", &["att1"], &["att"], &[("axis", A::I(-1))])
        .node("MatMul", &["att", "v"], &["o0"], &[])
        .node(
            "Transpose",
            &["o0"],
            &["o1"],
            &[("perm", A::Is(vec![0, 2, 1, 3]))],
        )
        .node("Reshape", &["o1", "merge"], &["o2"], &[])
        .node("MatMul", &["o2", "wo"], &["o"], &[])
        .node("Add", &["x", "o"], &["h0"], &[])
        .node(
            "LayerNormalization",
            &["h0", "ln_g", "ln_b"],
            &["h"],
            &[("axis", A::I(-1))],
        )
        .node("MatMul", &["h", "w1"], &["f0"], &[])
        .node("Div", &["f0", "s2"], &["gd"], &[])
        .node("Erf", &["gd"], &["ge"], &[])
        .node("Add", &["ge", "one"], &["ga"], &[])
        .node("Mul", &["f0", "ga"], &["gm"], &[])
        .node("Mul", &["gm", "half"], &["g"], &[])
        .node("MatMul", &["g", "w2"], &["f1"], &[])
        .node("Add", &["h", "f1"], &["y"], &[])
        .output("y")
}

fn float_dtypes_per_op(p: &Plan) -> Vec<(String, Vec<P>)> {
    p.ops
        .iter()
        .filter(|o| o.type_name != "Cast")
        .map(|o| {
            let mut d: Vec<P> = o
                .inputs
                .iter()
                .chain(&o.outputs)
                .map(|&t| p.tensors[t].dtype)
                .filter(|d| matches!(d, P::F32 | P::F16))
                .collect();
            d.sort_by_key(|x| x.name());
            d.dedup();
            (o.name.clone(), d)
        })
        .collect()
}

#[test]
fn resnet_block_lowers_with_two_transposes() {
    let p = lower(resnet_block().bytes(), &LowerOptions::default()).unwrap();
    p.validate().unwrap();
    let types = p.op_types();
    assert_eq!(
        types.iter().filter(|t| **t == "Transpose").count(),
        1,
        "{}",
        p.dump()
    );
    assert_eq!(types.iter().filter(|t| **t == "Conv2d").count(), 2);
    assert!(
        !types.contains(&"Batchnorm"),
        "BN must be folded into the convs"
    );
    assert_eq!(types.last(), Some(&"FullyConnected"));
}

#[test]
fn resnet_block_fp16_never_mixes_float_widths() {
    let o = LowerOptions {
        fp16: true,
        ..Default::default()
    };
    let p = lower(resnet_block().bytes(), &o).unwrap();
    for (op, d) in float_dtypes_per_op(&p) {
        assert!(d.len() <= 1, "op {op} mixes {d:?}\n{}", p.dump());
    }
    let x = &p.tensors[p.inputs[0].tensor];
    assert_eq!(x.dtype, P::F32, "graph I/O keeps the user's dtype");
    assert_eq!(p.tensors[p.outputs[0].tensor].dtype, P::F32);
    let statics_f32 = p
        .tensors
        .iter()
        .filter(|t| matches!(t.kind, TensorKind::Static(_)) && t.dtype == P::F32)
        .count();
    assert_eq!(statics_f32, 0, "weights are stored as f16\n{}", p.dump());
}

#[test]
fn transformer_encoder_layer_lowers() {
    let p = lower(encoder_layer().bytes(), &LowerOptions::default()).unwrap();
    let types = p.op_types();
    assert!(types.contains(&"Gelu"), "{types:?}");
    assert!(types.contains(&"LayerNorm"));
    assert!(types.contains(&"Softmax"));
    assert!(!types.contains(&"Erf"));
    let o = LowerOptions {
        fp16: true,
        ..Default::default()
    };
    let p16 = lower(encoder_layer().bytes(), &o).unwrap();
    for (op, d) in float_dtypes_per_op(&p16) {
        assert!(d.len() <= 1, "op {op} mixes {d:?}");
    }
}

#[test]
fn check_reports_every_unsupported_node() {
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 3, 4])
        .input("s", DType::I64, &[2])
        .node("Erf", &["x"], &["e"], &[])
        .named_node(
            "blk3/Gelu",
            "Gelu",
            &["e"],
            &["sm"],
            &[("approximate", A::S("sigmoid"))],
        )
        .node("FancyOp", &["sm"], &["f"], &[])
        .node("Reshape", &["x", "s"], &["r"], &[])
        .node("Relu", &["r"], &["y"], &[])
        .output("f")
        .output("y");
    let m = Model::load(b.bytes()).unwrap();
    let list = check(&m, Backend::Htp);
    let reasons: Vec<&str> = list.iter().map(|u| u.reason.as_str()).collect();
    assert_eq!(list.len(), 4, "{reasons:#?}");
    assert!(reasons[0].contains("Erf is not supported on HTP"));
    assert_eq!(
        reasons[1],
        "Node \"blk3/Gelu\" (Gelu), attribute 'approximate': 'sigmoid' is not supported; only 'none' (erf GELU)"
    );
    assert!(reasons[2].contains("FancyOp is not supported on HTP"));
    assert!(reasons[3].contains("input 'shape' must be a constant"));
    assert_eq!(list[1].node, "blk3/Gelu");
    assert_eq!(list[1].op_type, "Gelu");

    match lower(m, &LowerOptions::default()) {
        Err(LowerError::Unsupported(v)) => assert_eq!(v.len(), 4),
        other => panic!("expected a list, got {other:?}"),
    }
}

/// What `onnxruntime.quantization.quantize_dynamic` writes: DynamicQuantizeLinear on the
/// activation, MatMulInteger / ConvInteger on int8 weights (or ONNX Runtime's contrib op
/// DynamicQuantizeMatMul). Each node is refused naming the alternatives.
#[test]
fn dynamic_quantization_names_the_alternatives() {
    let i8w = |shape: &[usize]| {
        Tensor::from_i64_as(DType::I8, shape.to_vec(), &vec![1; shape.iter().product()])
    };
    let mut b = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 8])
        .input("img", DType::F32, &[1, 3, 8, 8])
        .init("w", i8w(&[8, 4]))
        .init("k", i8w(&[4, 3, 3, 3]))
        .node("DynamicQuantizeLinear", &["x"], &["xq", "xs", "xz"], &[])
        .node("MatMulInteger", &["xq", "w", "xz"], &["acc"], &[])
        .node("Cast", &["acc"], &["accf"], &[("to", A::I(1))])
        .node("Mul", &["accf", "xs"], &["y"], &[])
        .node("DynamicQuantizeLinear", &["img"], &["iq", "is", "iz"], &[])
        .node("ConvInteger", &["iq", "k", "iz"], &["c"], &[])
        .node("DynamicQuantizeMatMul", &["x", "w", "xs"], &["z"], &[])
        .output("y")
        .output("c")
        .output("z");
    let g = b.model.graph.as_mut().unwrap();
    g.node.last_mut().unwrap().domain = Some("com.microsoft".into());
    b.model
        .opset_import
        .push(lowering::onnx::OperatorSetIdProto {
            domain: Some("com.microsoft".into()),
            version: Some(1),
        });
    let m = Model::load(b.bytes()).unwrap();
    let list = check(&m, Backend::Htp);
    let refused: Vec<&str> = list.iter().map(|u| u.op_type.as_str()).collect();
    assert_eq!(
        refused,
        [
            "DynamicQuantizeLinear",
            "MatMulInteger",
            "DynamicQuantizeLinear",
            "ConvInteger",
            "DynamicQuantizeMatMul"
        ],
        "{list:#?}"
    );
    for u in &list {
        assert!(
            u.reason.contains("dynamically quantized")
                && u.reason.contains("float model")
                && u.reason.contains("QuantizeLinear / DequantizeLinear pairs"),
            "{}",
            u.reason
        );
    }
    assert!(list[4]
        .reason
        .contains("DynamicQuantizeMatMul is not supported on HTP: "));
}

#[test]
fn check_on_gpu_uses_gpu_table() {
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[4])
        .node("Atan", &["x"], &["y"], &[])
        .output("y");
    let m = Model::load(b.bytes()).unwrap();
    assert!(check(&m, Backend::Htp).is_empty());
    let g = check(&m, Backend::Gpu);
    assert_eq!(g.len(), 1);
    assert!(g[0].reason.contains("not supported on GPU"));
}

#[test]
fn single_problem_is_its_own_variant() {
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 3])
        .node("Gelu", &["x"], &["y"], &[("approximate", A::S("sigmoid"))])
        .output("y");
    match lower(b.bytes(), &LowerOptions::default()) {
        Err(LowerError::UnsupportedAttr { attr, .. }) => assert_eq!(attr, "approximate"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn symbolic_dims_need_input_shapes() {
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[-1, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y");
    let e = lower(b.bytes(), &LowerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("input 'x' has symbolic dims [N, 4]"), "{e}");
    let mut o = LowerOptions::default();
    o.input_shapes.insert("x".into(), vec![3, 4]);
    let p = lower(b.bytes(), &o).unwrap();
    assert_eq!(p.tensors[p.inputs[0].tensor].shape, vec![3, 4]);
    o.input_shapes.insert("x".into(), vec![3, 5]);
    assert!(lower(b.bytes(), &o)
        .unwrap_err()
        .to_string()
        .contains("does not match the declared dims"));
    // check guesses no size: the symbolic input is the problem it reports.
    let m = Model::load(b.bytes()).unwrap();
    let list = check(&m, Backend::Htp);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].node, "");
    assert!(
        list[0]
            .reason
            .contains("input 'x' has symbolic dims [N, 4]"),
        "{list:?}"
    );
    let mut o = LowerOptions::default();
    o.input_shapes.insert("x".into(), vec![3, 4]);
    assert!(lowering::check_with(&m, &o).unwrap().is_empty());
}

/// Paddle and older exporters write a dynamic dim as `dim_value: -1`: symbolic, and
/// `input_shapes` gives it.
#[test]
fn minus_one_dims_take_input_shapes() {
    let mut b = ModelBuilder::new(17)
        .input("x", DType::F32, &[1, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y");
    let dim = &mut input_dims(&mut b.model, 0)[0];
    dim.value = Some(lowering::onnx::DimensionValue::DimValue(-1));
    let e = lower(b.bytes(), &LowerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("input 'x' has symbolic dims [?, 4]"), "{e}");
    let mut o = LowerOptions::default();
    o.input_shapes.insert("x".into(), vec![6, 4]);
    let p = lower(b.bytes(), &o).unwrap();
    assert_eq!(p.tensors[p.inputs[0].tensor].shape, vec![6, 4]);
}

#[test]
fn int64_io_is_narrowed_with_host_dtype() {
    let b = ModelBuilder::new(17)
        .input("ids", DType::I64, &[1, 4])
        .init("emb", w(1, &[16, 8]))
        .node("Gather", &["emb", "ids"], &["h"], &[])
        .node("ArgMax", &["h"], &["y"], &[("axis", A::I(-1))])
        .output("y");
    let p = lower(b.bytes(), &LowerOptions::default()).unwrap();
    assert_eq!(p.tensors[p.inputs[0].tensor].dtype, P::I32);
    assert_eq!(p.inputs[0].host_dtype, DType::I64);
    assert_eq!(p.tensors[p.outputs[0].tensor].dtype, P::I32);
    assert_eq!(p.outputs[0].host_dtype, DType::I64);
}

#[test]
fn input_passed_through_to_output_is_copied() {
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[2])
        .node("Identity", &["x"], &["y"], &[])
        .node("Relu", &["x"], &["z"], &[])
        .output("y")
        .output("z");
    let p = lower(b.bytes(), &LowerOptions::default()).unwrap();
    assert_eq!(p.op_types(), vec!["Reshape", "Relu"]);
    p.validate().unwrap();
}

#[test]
fn python_generated_models_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/models/load");
    for (name, ir) in [
        ("relu_ir13.onnx", 13),
        ("relu_ir10.onnx", 10),
        ("mlp_external.onnx", 10),
    ] {
        let m = Model::load(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(m.ir_version, ir, "{name}");
        let p = lower(m, &LowerOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        p.validate().unwrap();
    }
}
