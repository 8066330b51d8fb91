//! Installation diagnostics: what a QNN library needs around it to start, checked without QNN.
//!
//! On a device (every CPU but x86_64, whose `libQnnHtp` is an emulator), the HTP library also
//! needs, per HTP architecture (v68, v73, ...), the stub, the skel and on Windows the skel's
//! signed catalog; [`htp_companion_names`] names them, [`companion_search`] states where each is
//! looked for on each OS, and [`htp_companions_in`] / [`missing_htp_companions_in`] report which
//! are missing, for any OS, environment and (fake) filesystem (`device_files.rs`; the rules are
//! in `qnn-sys/README.md`). A failed `backendCreate`/`deviceCreate` of the HTP backend names the
//! missing files ([`with_missing_device_files`]), and `qnnx doctor` lists them.
//!
//! This is the lowest layer that both the safe layer's errors and the front ends' doctor reach:
//! it is not part of `qnn-sys`'s bindings or of finding and opening a library (`qnn_sys::loader`),
//! and it only reads the filesystem and the environment.

mod device_files;

pub use device_files::{
    companion_search, htp_companion_names, htp_companions, htp_companions_in,
    missing_htp_companions_in, needs_device_files, split_dsp_search_path, stub_archs, stub_name,
    stub_pattern, Companion, CompanionEnv, CompanionReport, CompanionRole, CompanionSearch,
    FileList, Files, RealFiles, FASTRPC_DEFAULT_SEARCH_PATH,
};

use std::path::Path;

use qnn_sys::loader::Os;

use crate::error::Error;
use crate::BackendKind;

/// What the device-side file check reads about this machine: OS, CPU, environment, filesystem.
/// Unit tests substitute a fake one (`TEST_HOST`) to exercise the device paths on x86_64.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub(crate) os: Os,
    pub(crate) cpu_arch: String,
    pub(crate) env: CompanionEnv,
    /// `None`: the real filesystem.
    pub(crate) files: Option<FileList>,
}

#[cfg(test)]
thread_local! {
    pub(crate) static TEST_HOST: std::cell::RefCell<Option<Host>> = const { std::cell::RefCell::new(None) };
}

impl Host {
    pub(crate) fn current() -> Host {
        #[cfg(test)]
        if let Some(h) = TEST_HOST.with(|h| h.borrow().clone()) {
            return h;
        }
        Host {
            os: Os::current(),
            cpu_arch: std::env::consts::ARCH.to_string(),
            env: CompanionEnv::from_process(),
            files: None,
        }
    }

    fn missing_htp_files(&self, library: &Path, arch: Option<u32>) -> Option<String> {
        match &self.files {
            Some(f) => missing_htp_companions_in(library, self.os, arch, &self.env, f),
            None => missing_htp_companions_in(library, self.os, arch, &self.env, &RealFiles),
        }
    }
}

/// For a failed `backendCreate`/`deviceCreate` of the HTP backend on a device (not the x86_64
/// emulator, which needs no stub or skel), adds the device-side files that are missing to the
/// error's context: `deviceCreate failed for <what>, with HTP v73 files missing:
/// libQnnHtpV73Skel.so (skel; looked for in ADSP_LIBRARY_PATH: ...): <code>`. `arch` gives the
/// HTP arch when known (only asked on a device); otherwise every arch whose stub sits beside
/// the library is checked. Other errors, and errors with nothing missing, pass unchanged.
pub(crate) fn with_missing_device_files(
    err: Error,
    kind: BackendKind,
    library: &Path,
    arch: impl FnOnce() -> Option<u32>,
) -> Error {
    if kind != BackendKind::Htp {
        return err;
    }
    let host = Host::current();
    if !needs_device_files(&host.cpu_arch) {
        return err;
    }
    let Error::Api(mut api) = err else {
        return err;
    };
    if let Some(missing) = host.missing_htp_files(library, arch()) {
        let what = api
            .context
            .take()
            .unwrap_or_else(|| library.display().to_string());
        api.context = Some(format!("{what}, with {missing}"));
    }
    Error::Api(api)
}
