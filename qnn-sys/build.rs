//! With the `bindgen` feature and `QNN_SDK_ROOT` set, generates bindings from the SDK's own
//! headers into OUT_DIR (never into the source tree) so `bindgen_check` can compare them with our
//! hand-written declarations. Without the feature this does nothing.

fn main() {
    println!("cargo:rerun-if-env-changed=QNN_SDK_ROOT");
    println!("cargo:rustc-check-cfg=cfg(qnn_sdk_bindings)");
    #[cfg(feature = "bindgen")]
    generate();
}

#[cfg(feature = "bindgen")]
fn generate() {
    use std::path::PathBuf;
    let Some(root) = std::env::var_os("QNN_SDK_ROOT").map(PathBuf::from) else {
        println!(
            "cargo:warning=feature `bindgen` is on but QNN_SDK_ROOT is not set: the layout \
             cross-check is skipped"
        );
        return;
    };
    // SDK layout is include/QNN/*.h; some copies put the headers straight in include/.
    let include = [root.join("include").join("QNN"), root.join("include")]
        .into_iter()
        .find(|d| d.join("QnnInterface.h").is_file())
        .unwrap_or_else(|| panic!("no QnnInterface.h under {}/include[/QNN]", root.display()));
    let wrapper = "#include <stdbool.h>\n#include <stdint.h>\n#include <stddef.h>\n\
        #include \"QnnInterface.h\"\n#include \"System/QnnSystemInterface.h\"\n\
        #include \"HTP/QnnHtpDevice.h\"\n#include \"HTP/QnnHtpGraph.h\"\n\
        #include \"HTP/QnnHtpContext.h\"\n#include \"GPU/QnnGpuBackend.h\"\n\
        #include \"GPU/QnnGpuContext.h\"\n#include \"GPU/QnnGpuGraph.h\"\n";
    let bindings = bindgen::Builder::default()
        .header_contents("qnn_wrapper.h", wrapper)
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_type("Qnn.*|QNN.*")
        .derive_default(false)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on the QNN headers");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("qnn_bindings.rs");
    bindings.write_to_file(&out).expect("writing bindings");
    println!("cargo:rustc-cfg=qnn_sdk_bindings");
    println!("cargo:rerun-if-changed={}", include.display());
}
