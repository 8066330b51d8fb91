//! `emit::compile` lowers straight from the caller's ONNX bytes: no allocation as large as the
//! model is made on the Rust side (a copy of resnet18's 46 MB cost 30 ms). A counting global
//! allocator records the largest single allocation while a model made of one 4 MB weight (a
//! Gemm with `transB`, so no transposed copy is made) is compiled; everything else (the decoded
//! weight and its copies) is smaller than the file.
//! One test function: the allocator is process-wide.
//!
//! Without the HTP library it prints why and returns; with `QNNX_REQUIRE_HTP=1` that is a
//! failure.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use lowering::tensor::Tensor;
use lowering::testing::{rand_f32, ModelBuilder, A};
use lowering::DType;
use qnnx_engine::{compile::compile_on, registry, CompileOptions, HostTensor, Target};

struct Counting;

static ARMED: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

fn record(size: usize) {
    if ARMED.load(Ordering::Relaxed) {
        LARGEST.fetch_max(size, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn compile_makes_no_copy_of_the_model_bytes() {
    let runtime =
        match registry::for_target(&Target::host_default(qnn::BackendKind::Htp), None, false) {
            Ok(r) => r,
            Err(e) => {
                assert!(
                    std::env::var_os("QNNX_REQUIRE_HTP").is_none(),
                    "QNNX_REQUIRE_HTP is set but the HTP library is unavailable: {e}"
                );
                eprintln!("skipped: the HTP library is unavailable ({e})");
                return;
            }
        };
    let (k, n) = (1024, 1024);
    let onnx = ModelBuilder::new(17)
        .input("x", DType::F32, &[1, k as i64])
        .init("w", Tensor::from_f32(vec![n, k], &rand_f32(7, k * n)))
        .node("Gemm", &["x", "w"], &["y"], &[("transB", A::I(1))])
        .output("y")
        .bytes();
    let opts = CompileOptions {
        name: "copies".into(),
        ..Default::default()
    };
    LARGEST.store(0, Ordering::Relaxed);
    ARMED.store(true, Ordering::Relaxed);
    let compiled = compile_on(&runtime, &onnx, &opts, None, &mut |_| {});
    ARMED.store(false, Ordering::Relaxed);
    let compiled = compiled.unwrap();
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest < onnx.len(),
        "an allocation of {largest} bytes during compile: the {} bytes of the model were copied",
        onnx.len()
    );
    let y = compiled
        .emitted
        .run(&[HostTensor::from_f32(&[1, k], &vec![1.0; k])])
        .unwrap();
    assert_eq!(y[0].shape, vec![1, n]);
}
