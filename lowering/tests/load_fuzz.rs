//! The loader must return an error, never panic, on arbitrary bytes.

use lowering::testing::{rand_f32, ModelBuilder, A};
use lowering::{DType, Model};

fn sample() -> Vec<u8> {
    let w = lowering::tensor::Tensor::from_f32(vec![4, 4], &rand_f32(1, 16));
    ModelBuilder::new(17)
        .input("x", DType::F32, &[1, 4])
        .init("w", w)
        .node("MatMul", &["x", "w"], &["m"], &[])
        .node("Softmax", &["m"], &["y"], &[("axis", A::I(-1))])
        .output("y")
        .bytes()
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn truncated_models_do_not_panic() {
    let b = sample();
    assert!(Model::from_bytes(&b, None).is_ok());
    for n in 0..b.len() {
        let _ = Model::from_bytes(&b[..n], None);
    }
}

#[test]
fn bit_flipped_models_do_not_panic() {
    let b = sample();
    let mut s = 0x9E3779B97F4A7C15u64;
    for _ in 0..3000 {
        let mut c = b.clone();
        for _ in 0..1 + xorshift(&mut s) % 4 {
            let i = (xorshift(&mut s) as usize) % c.len();
            c[i] ^= 1 << (xorshift(&mut s) % 8);
        }
        if let Ok(m) = Model::from_bytes(&c, None) {
            // A model that still decodes must also survive lowering.
            let _ = lowering::lower(m, &lowering::LowerOptions::default());
        }
    }
}

#[test]
fn random_bytes_do_not_panic() {
    let mut s = 12345u64;
    for len in [0usize, 1, 2, 3, 7, 16, 100, 1000] {
        for _ in 0..200 {
            let v: Vec<u8> = (0..len).map(|_| xorshift(&mut s) as u8).collect();
            let _ = Model::from_bytes(&v, None);
        }
    }
    // Deep nesting must hit prost's recursion limit, not the stack.
    let mut nested = Vec::new();
    for _ in 0..100_000 {
        nested.extend_from_slice(&[0x3a, 0xff, 0xff, 0x03]);
    }
    let _ = Model::from_bytes(&nested, None);
}
