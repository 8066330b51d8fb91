//! Inputs that are not plain graph inputs, end to end: symbolic dims (`dim_param` and `-1`)
//! that `check` and `compile` need sizes for (`--input-shape`), inputs fixed at compile time
//! (`--fix-input`) and shape-defining inputs resolved from the model's declared shapes, both
//! checked when `run` is given them. Models come from `lowering::testing::ModelBuilder`; the
//! tests that compile skip without the HTP library (fail with `QNNX_REQUIRE_HTP=1`).

use std::path::Path;

use lowering::dtype::DType;
use lowering::onnx;
use lowering::testing::{input_dims, value_info, ModelBuilder, A};

mod common;
use common::{htp_available, json, ok_json, qnnx, s, stderr, temp_dir};

/// Writes a C-order .npy of `descr` (`<f4`, `<i8`) with raw little-endian `data`.
fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The f32 values of a .npy written by `run -o`.
fn read_f32_npy(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap();
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Sets dim `i` of graph input `k` to `dim_value: -1`, as Paddle writes a dynamic dim.
fn minus_one(b: &mut ModelBuilder, k: usize, i: usize) {
    let dim = &mut input_dims(&mut b.model, k)[i];
    dim.value = Some(onnx::DimensionValue::DimValue(-1));
}

/// A 3x3 convolution without padding: at a guessed size of 1 its kernel would not fit.
fn conv_model() -> ModelBuilder {
    let w = lowering::tensor::Tensor::from_f32(vec![4, 3, 3, 3], &[0.1; 108]);
    let mut b = ModelBuilder::new(17)
        .input("image", DType::F32, &[-1, 3, 8, 8])
        .init("w", w)
        .node(
            "Conv",
            &["image", "w"],
            &["y"],
            &[("kernel_shape", A::Is(vec![3, 3]))],
        )
        .output("y");
    minus_one(&mut b, 0, 2);
    minus_one(&mut b, 0, 3);
    b
}

#[test]
fn check_lists_symbolic_inputs_instead_of_guessing() {
    let dir = temp_dir("symbolic");
    let model = dir.join("conv.onnx");
    std::fs::write(&model, conv_model().bytes()).unwrap();

    let out = qnnx(&["check", s(&model)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("1 input(s) have symbolic dims"), "{err}");
    assert!(err.contains("  image [N, 3, ?, ?]"), "{err}");
    assert!(err.contains("--input-shape image=<N>,3,<?>,<?>"), "{err}");
    assert!(!err.contains("does not fit"), "a size was guessed: {err}");

    let out = qnnx(&["check", s(&model), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["symbolic_inputs"][0]["name"], "image");
    assert_eq!(v["symbolic_inputs"][0]["dims"], "[N, 3, ?, ?]");

    // At the real size every node lowers; the -1 dims take the given sizes.
    let v = ok_json(&[
        "check",
        s(&model),
        "--input-shape",
        "image=1,3,32,32",
        "--json",
    ]);
    assert_eq!(v["supported"], true, "{v}");
    // A size that does not fit is reported as the node's problem.
    let out = qnnx(&[
        "check",
        s(&model),
        "--input-shape",
        "image=1,3,2,2",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(3));
    // A declared dim is still checked.
    let out = qnnx(&["check", s(&model), "--input-shape", "image=1,4,32,32"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("does not match the declared dims"),
        "{}",
        stderr(&out)
    );

    if htp_available() {
        let v = ok_json(&[
            "compile",
            s(&model),
            "--input-shape",
            "image=2,3,10,12",
            "--json",
        ]);
        assert_eq!(v["inputs"][0]["shape"], serde_json::json!([2, 3, 10, 12]));
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([2, 4, 8, 10]));
    }
}

/// x [2, 6] reshaped to a `shape` input and scaled by a `scale` input.
fn reshape_scale_model() -> ModelBuilder {
    ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 6])
        .input("shape", DType::I64, &[2])
        .input("scale", DType::F32, &[])
        .node("Reshape", &["x", "shape"], &["r"], &[])
        .node("Mul", &["r", "scale"], &["y"], &[])
        .output("y")
}

#[test]
fn fixed_inputs_leave_the_graph_and_are_checked_at_run_time() {
    let dir = temp_dir("fixed");
    let model = dir.join("m.onnx");
    std::fs::write(&model, reshape_scale_model().bytes()).unwrap();

    let out = qnnx(&["check", s(&model), "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let reason = json(&out)["unsupported"][0]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("input 'shape' must be a constant"),
        "{reason}"
    );
    assert!(reason.contains("--fix-input shape="), "{reason}");
    let fix = ["--fix-input", "shape=3,4", "--fix-input", "scale=0.5"];
    let mut args = vec!["check", s(&model), "--json"];
    args.extend(fix);
    assert_eq!(ok_json(&args)["supported"], true);

    for bad in [["--fix-input", "shape=3,4,1"], ["--fix-input", "nope=1"]] {
        let mut args = vec!["check", s(&model)];
        args.extend(bad);
        let out = qnnx(&args);
        assert_eq!(out.status.code(), Some(1), "{bad:?}");
        assert!(stderr(&out).contains("--fix-input"), "{}", stderr(&out));
    }
    let out = qnnx(&["check", s(&model), "--fix-input", "shape"]);
    assert_eq!(out.status.code(), Some(2));

    if !htp_available() {
        return;
    }
    let bin = dir.join("m.bin");
    let mut args = vec!["compile", s(&model), "-o", s(&bin), "--json"];
    args.extend(fix);
    let v = ok_json(&args);
    assert_eq!(v["inputs"].as_array().unwrap().len(), 1);
    assert_eq!(v["assumed_inputs"][0]["name"], "shape");
    assert_eq!(v["assumed_inputs"][0]["value"], "[3, 4]");
    assert_eq!(v["assumed_inputs"][1]["value"], "0.5");

    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let xf = dir.join("x.npy");
    write_npy(&xf, "<f4", &[2, 6], &f32_bytes(&x));
    let good = dir.join("scale.npy");
    write_npy(&good, "<f4", &[], &f32_bytes(&[0.5]));
    let bad = dir.join("scale2.npy");
    write_npy(&bad, "<f4", &[], &f32_bytes(&[2.0]));
    let out_dir = dir.join("out");
    let (xs, gs, bs) = (
        format!("x={}", s(&xf)),
        format!("scale={}", s(&good)),
        format!("scale={}", s(&bad)),
    );
    for given in [vec![&xs], vec![&xs, &gs]] {
        let mut args = vec!["run", s(&model), "--runs", "1", "-o", s(&out_dir), "--json"];
        args.extend(fix);
        for g in given {
            args.extend(["--input", g.as_str()]);
        }
        let v = ok_json(&args);
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([3, 4]));
        let y = read_f32_npy(&out_dir.join("y.npy"));
        assert!(
            y.iter().zip(&x).all(|(a, b)| (a - b * 0.5).abs() < 1e-2),
            "{y:?}"
        );
    }
    let mut args = vec![
        "run",
        s(&model),
        "--runs",
        "1",
        "--input",
        &xs,
        "--input",
        &bs,
    ];
    args.extend(fix);
    let out = qnnx(&args);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("input \"scale\" is 2 but the compiled graph assumes 0.5"),
        "{}",
        stderr(&out)
    );
}

/// The ONNX node tests' pattern: a Reshape whose `shape` is a graph input, with the output's
/// shape declared. The declared shape decides the graph; the input is checked at run time.
#[test]
fn shape_inputs_are_resolved_from_declared_shapes() {
    let dir = temp_dir("declared");
    let model = dir.join("m.onnx");
    let mut b = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 3, 4])
        .input("shape", DType::I64, &[2])
        .node("Reshape", &["x", "shape"], &["y"], &[]);
    b.model
        .graph
        .as_mut()
        .unwrap()
        .output
        .push(value_info("y", DType::F32, &[6, 4]));
    std::fs::write(&model, b.bytes()).unwrap();
    let v = ok_json(&["check", s(&model), "--json"]);
    assert_eq!(v["supported"], true, "{v}");
    if !htp_available() {
        return;
    }
    let v = ok_json(&["compile", s(&model), "-o", s(&dir.join("m.bin")), "--json"]);
    assert_eq!(v["inputs"].as_array().unwrap().len(), 1);
    assert_eq!(v["assumed_inputs"][0]["value"], "[6, 4]");
    let origin = v["assumed_inputs"][0]["origin"].as_str().unwrap();
    assert!(origin.contains("declared shape of \"y\""), "{origin}");
    let x: Vec<f32> = (0..24).map(|i| i as f32 * 0.1).collect();
    let xf = dir.join("x.npy");
    write_npy(&xf, "<f4", &[2, 3, 4], &f32_bytes(&x));
    let xs = format!("x={}", s(&xf));
    for (spec, ok) in [(&[6i64, 4][..], true), (&[-1, 4], true), (&[4, 6], false)] {
        let f = dir.join("shape.npy");
        write_npy(&f, "<i8", &[2], &i64_bytes(spec));
        let ss = format!("shape={}", s(&f));
        let out = qnnx(&[
            "run",
            s(&model),
            "--runs",
            "1",
            "--input",
            &xs,
            "--input",
            &ss,
        ]);
        assert_eq!(out.status.success(), ok, "{spec:?}: {}", stderr(&out));
        if !ok {
            let e = stderr(&out);
            assert!(
                e.contains("input \"shape\" is [4, 6] but the compiled graph assumes [6, 4]")
                    && e.contains("reshapes [2, 3, 4] to [6, 4]"),
                "{e}"
            );
        }
    }
}
