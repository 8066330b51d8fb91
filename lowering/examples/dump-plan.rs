//! Prints the QNN plan lowering makes of an ONNX model, with each quantized tensor's encoding:
//! `cargo run -p lowering --example dump-plan -- model.onnx [--fp16] [--gpu] [--quantized-io]`.
//! A development aid for seeing what a rule emitted without running QNN.

use lowering::{Backend, LowerOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: dump-plan MODEL.onnx [--fp16] [--gpu] [--quantized-io]");
        std::process::exit(2);
    };
    let opts = LowerOptions {
        backend: if args.iter().any(|a| a == "--gpu") {
            Backend::Gpu
        } else {
            Backend::Htp
        },
        fp16: args.iter().any(|a| a == "--fp16"),
        quantized_io: args.iter().any(|a| a == "--quantized-io"),
        ..Default::default()
    };
    match lowering::lower(std::path::Path::new(path), &opts) {
        Ok(plan) => {
            print!("{}", plan.dump());
            for t in plan.tensors.iter().filter(|t| t.quant.is_some()) {
                println!(
                    "encoding {}: {}",
                    t.name,
                    t.quant.as_ref().expect("filtered")
                );
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
