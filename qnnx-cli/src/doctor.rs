//! `qnnx doctor`: which QNN libraries are found where, their build ids, which backends start,
//! the HTP library's device-side files (`qnn::diagnostics`), the default target and the cache
//! folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use qnn::{Backend, BackendConfig, BackendOptions, Device, HtpConfig};
use qnnx_types::BackendKind;
use serde_json::{json, Value};

use crate::{emit, Cli, Failure};

pub fn doctor(cli: &Cli) -> Result<ExitCode, Failure> {
    use qnn::qnn_sys::loader::{candidates, LibraryKind};
    let mut libs = Vec::new();
    for kind in [LibraryKind::Htp, LibraryKind::Gpu, LibraryKind::System] {
        let explicit = if kind == LibraryKind::System {
            None
        } else {
            cli.qnn_lib.as_deref()
        };
        let list: Vec<Value> = candidates(kind, explicit)
            .into_iter()
            .map(|c| json!({ "source": c.source, "path": c.path, "exists": c.path.is_file() }))
            .collect();
        let found = list
            .iter()
            .find(|c| c["exists"] == true)
            .map(|c| c["path"].clone());
        libs.push(json!({ "library": format!("{kind:?}"), "found": found, "searched": list }));
    }
    let mut backends = Vec::new();
    for kind in [BackendKind::Htp, BackendKind::Gpu] {
        let config = match kind {
            BackendKind::Htp => BackendConfig::Htp(HtpConfig::host_default()),
            BackendKind::Gpu | BackendKind::Cpu => BackendConfig::default_for(kind),
        };
        let entry = match Backend::open(
            config,
            &BackendOptions {
                library: None,
                log_level: None,
            },
        ) {
            Ok(b) => {
                let dev = Device::new(&b);
                let platform = b.platform_info().ok().and_then(|d| d.first().cloned());
                let v = b.api_version().backend_api_version;
                let backend_api = format!("{}.{}.{}", v.major, v.minor, v.patch);
                // What `compile` and `run model.onnx` target without --soc: on x86_64 SoC 60,
                // which the emulator's platform info does not report (it says SoC 30, v68).
                let target = qnnx_engine::Target::host_default(kind);
                let emulated = kind == BackendKind::Htp
                    && qnn::HtpDeviceConfig::host_default().soc_model.is_some();
                json!({
                    "backend": format!("{kind:?}"),
                    "ok": dev.is_ok(),
                    "library": b.library_path(),
                    "build_id": b.build_id().ok(),
                    "provider": b.provider_name(),
                    "core_api": format!("{:?}", b.api_version().core_api_version),
                    "backend_api": backend_api,
                    // The tested release this library is (qnn_sys::releases), by build id.
                    "qnn_release": b.release().map(|r| r.qnn),
                    "tested": b.release().is_some(),
                    "device": dev.err().map(|e| e.to_string()).unwrap_or_else(|| "created".into()),
                    "platform_soc_model": platform.as_ref().and_then(|p| p.htp.map(|h| h.soc_model)),
                    "platform_arch": platform.as_ref().and_then(|p| p.htp.map(|h| h.arch)),
                    "platform_from": if emulated { "emulator" } else { "device" },
                    "default_target": {
                        "describe": target.describe(),
                        "soc_model": target.soc_model,
                        "soc": target.soc().map(|s| s.name),
                        "htp_arch": target.arch().map(|a| a.number()),
                    },
                })
            }
            Err(e) => {
                json!({ "backend": format!("{kind:?}"), "ok": false, "error": e.to_string() })
            }
        };
        backends.push(entry);
    }
    // The HTP library in use (or the first one found) and the device's HTP arch, for the
    // device-side files (stub, skel, catalog) it needs on a Snapdragon device.
    let htp_library = backends[0]["library"]
        .as_str()
        .or(libs[0]["found"].as_str())
        .map(PathBuf::from);
    let htp_arch = backends[0]["platform_arch"]
        .as_u64()
        .map(|a| a as u32)
        .filter(|&a| a > 0);
    let (device_files, device_files_text) = htp_device_files(htp_library.as_deref(), htp_arch);
    let cache = crate::cache::summary(cli);
    let tested: Vec<Value> = qnn::qnn_sys::releases::TESTED
        .iter()
        .map(|r| json!({ "qnn": r.qnn, "wheel": r.wheel, "build_id": r.build_id }))
        .collect();
    let report = json!({
        "libraries": libs,
        "backends": backends,
        "tested_releases": tested,
        "htp_device_files": device_files,
        "cache": cache,
    });
    emit(cli, &report, || {
        let mut s = String::from("QNN libraries:\n");
        for l in &libs {
            let found = l["found"].as_str().unwrap_or("not found");
            s += &format!("  {:<7} {found}\n", l["library"].as_str().unwrap_or(""));
        }
        s += "Backends:\n";
        for b in &backends {
            let name = b["backend"].as_str().unwrap_or("");
            if b["ok"] == true {
                let release = match b["qnn_release"].as_str() {
                    Some(q) => format!("QNN {q}, tested"),
                    None => "a release qnnx has not been tested with".to_string(),
                };
                s += &format!(
                    "  {name:<4} ok: build {} ({release}; {}, backend API {})\n",
                    b["build_id"].as_str().unwrap_or("?"),
                    b["provider"].as_str().unwrap_or("?"),
                    b["backend_api"].as_str().unwrap_or("?"),
                );
                s += &soc_lines(b);
            } else {
                let why = b["error"]
                    .as_str()
                    .or(b["device"].as_str())
                    .unwrap_or("failed");
                s += &format!("  {name:<4} unavailable: {why}\n");
            }
        }
        s += "Tested QNN releases (scripts/setup-runtime --qnn Q installs one):\n";
        for r in qnn::qnn_sys::releases::TESTED {
            let loaded = backends
                .iter()
                .any(|b| b["qnn_release"].as_str() == Some(r.qnn));
            s += &format!(
                "  QNN {:<8} onnxruntime-qnn {}  {}{}\n",
                r.qnn,
                r.wheel,
                r.build_id,
                if loaded { "  (loaded)" } else { "" }
            );
        }
        s += &device_files_text;
        s += &format!("Cache:\n  {}\n", crate::cache::describe(&cache));
        s += "Run `scripts/setup-runtime` (or set QNN_SDK_ROOT / QNN_LIB_DIR) if a library is missing.\n";
        s
    });
    Ok(ExitCode::SUCCESS)
}

/// `doctor`'s lines on a started backend's SoC: what compiles target by default and what the
/// library's platform info reports, each labelled (on x86_64 they differ: SoC 60 against the
/// emulator's own SoC 30).
fn soc_lines(b: &Value) -> String {
    if b["backend"] != "Htp" {
        return String::new();
    }
    let t = &b["default_target"];
    let target = match (
        t["soc"].as_str(),
        t["soc_model"].as_u64(),
        t["htp_arch"].as_u64(),
    ) {
        (Some(name), Some(m), Some(a)) => format!("{name} (SoC {m}, HTP v{a})"),
        _ => t["describe"].as_str().unwrap_or("?").to_string(),
    };
    let mut s = format!("       compiles for {target} by default (--soc picks another)\n");
    if let (Some(m), Some(a)) = (
        b["platform_soc_model"].as_u64(),
        b["platform_arch"].as_u64(),
    ) {
        let name = u32::try_from(m)
            .ok()
            .and_then(qnn::soc::by_model)
            .map(|s| format!(" ({})", s.name))
            .unwrap_or_default();
        s += &match b["platform_from"].as_str() {
            Some("emulator") => format!(
                "       the emulator's platform info reports SoC {m}{name}, HTP v{a} (its own \
                 default, not the compile target)\n"
            ),
            _ => format!("       the device reports SoC {m}{name}, HTP v{a}\n"),
        };
    }
    s
}

/// `doctor`'s report of the HTP library's device-side files (`qnn-sys/README.md`): JSON and text.
/// On x86_64 the library is the emulator and needs none. Elsewhere the files of `arch` (the
/// device's, from platform info) are listed, or of every arch whose stub sits beside the
/// library when the arch is unknown.
fn htp_device_files(library: Option<&Path>, arch: Option<u32>) -> (Value, String) {
    use qnn::diagnostics::{
        htp_companions, missing_htp_companions_in, needs_device_files, stub_archs, CompanionEnv,
        Files, RealFiles,
    };
    use qnn::qnn_sys::loader::Os;
    let cpu = std::env::consts::ARCH;
    if !needs_device_files(cpu) {
        let why = format!("not needed on {cpu}: the HTP library is the emulator (no stub or skel)");
        return (
            json!({ "needed": false, "reason": why }),
            format!("HTP device-side files:\n  {why}\n"),
        );
    }
    let Some(library) = library else {
        return (
            json!({ "needed": true, "library": null, "files": [] }),
            "HTP device-side files:\n  unknown: no HTP library found\n".into(),
        );
    };
    let dir = library
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let archs = match arch {
        Some(a) => vec![a],
        None => stub_archs(Os::current(), RealFiles.names_in(dir)),
    };
    let mut files = Vec::new();
    let mut text = format!(
        "HTP device-side files (beside/for {}):\n",
        library.display()
    );
    for &a in &archs {
        for c in htp_companions(library, a).files {
            let dirs = c.search.dir_names();
            text += &format!(
                "  v{a} {:<14} {:<26} {}\n",
                c.role.describe(),
                c.name,
                match (&c.found, c.role.needed_to_start()) {
                    (Some(d), _) => format!("found in {}", d.display()),
                    (None, needed) => format!(
                        "{} (looked for {}: {})",
                        if needed {
                            "MISSING"
                        } else {
                            "missing, needed to build graphs here"
                        },
                        c.search.rule,
                        dirs.join(", ")
                    ),
                }
            );
            files.push(json!({
                "arch": a,
                "role": c.role.describe(),
                "name": c.name,
                "needed_to_start": c.role.needed_to_start(),
                "rule": c.search.rule,
                "searched": dirs,
                "found": c.found,
                "elsewhere": c.elsewhere,
            }));
        }
    }
    let missing = missing_htp_companions_in(
        library,
        Os::current(),
        arch,
        &CompanionEnv::from_process(),
        &RealFiles,
    );
    if let Some(m) = &missing {
        text += &format!("  => {m}\n");
    }
    (
        json!({
            "needed": true,
            "library": library,
            "archs": archs,
            "arch_from": if arch.is_some() { "platform info" } else { "stubs beside the library" },
            "files": files,
            "missing": missing,
        }),
        text,
    )
}
