//! The HTP performance mode a session runs in: a DCVS vote made when a session or graph is
//! loaded ([`vote`]) and withdrawn when the returned [`PerformanceVote`] is dropped. The mode
//! names and the values voted are `qnn::HtpPerformanceMode`'s (ONNX Runtime's QNN EP's).
//!
//! A performance mode is a hint: a library that refuses the vote (a device or release without
//! the perf infrastructure, or one answering QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED) gets
//! one warning per QNN call and code in the process, and the model runs at the default clocks.
//! The x86_64 emulator accepts every mode; the vote changes nothing measurable there (its
//! "HTP" is the host CPU).

use std::collections::HashSet;
use std::sync::Mutex;

use qnn::{BackendConfig, HtpPerformanceMode, PowerConfig};

use crate::error::{Error, Result};
use crate::registry::Runtime;

/// A performance mode voted for a runtime's HTP, held for as long as the session using it.
#[derive(Debug)]
pub struct PerformanceVote {
    mode: HtpPerformanceMode,
    /// The client the vote was made through; `None` when none could be created, or for
    /// `default` (nothing is voted).
    config: Option<PowerConfig>,
    applied: bool,
}

impl PerformanceVote {
    /// The mode asked for.
    pub fn mode(&self) -> HtpPerformanceMode {
        self.mode
    }

    /// Whether the library accepted the vote (`default` sends nothing and counts as applied).
    pub fn applied(&self) -> bool {
        self.applied
    }

    /// The power config client id, when one was created.
    pub fn client_id(&self) -> Option<u32> {
        self.config.as_ref().map(PowerConfig::id)
    }
}

/// Votes `mode` for `rt`'s HTP. Only a non-HTP runtime is an error ([`Error::Target`]); a QNN
/// failure is warned about ([`warn_once`]) and gives a vote that is not [`applied`].
///
/// [`applied`]: PerformanceVote::applied
pub fn vote(rt: &Runtime, mode: HtpPerformanceMode) -> Result<PerformanceVote> {
    if !matches!(rt.backend.config(), BackendConfig::Htp(_)) {
        return Err(Error::Target(format!(
            "an HTP performance mode applies to the HTP backend, not the {}",
            rt.backend.kind()
        )));
    }
    if mode == HtpPerformanceMode::Default {
        return Ok(PerformanceVote {
            mode,
            config: None,
            applied: true,
        });
    }
    let mut config = match PowerConfig::new(&rt.device) {
        Ok(c) => c,
        Err(e) => {
            warn_once(mode, &e);
            return Ok(PerformanceVote {
                mode,
                config: None,
                applied: false,
            });
        }
    };
    let applied = match config.set(mode) {
        Ok(()) => true,
        Err(e) => {
            warn_once(mode, &e);
            false
        }
    };
    tracing::debug!(target: "qnnx", "HTP performance mode {mode}: client {}, applied {applied}", config.id());
    Ok(PerformanceVote {
        mode,
        config: Some(config),
        applied,
    })
}

static WARNED: Mutex<Option<HashSet<(String, u32)>>> = Mutex::new(None);

/// Warns that `mode` was not applied, once per QNN call and code in the process (a library
/// that refuses one vote refuses the next sessions' too). Returns whether it warned.
fn warn_once(mode: HtpPerformanceMode, e: &qnn::Error) -> bool {
    let key = match e {
        qnn::Error::Api(a) => (a.call.to_string(), a.code),
        other => (other.to_string(), 0),
    };
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if !warned.get_or_insert_with(HashSet::new).insert(key) {
        return false;
    }
    tracing::warn!(
        target: "qnnx",
        "HTP performance mode {mode} not applied ({e}); the model runs at the HTP's default \
         clocks (this warning is given once per QNN code)"
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(call: &'static str, code: u32) -> qnn::Error {
        qnn::ApiError {
            call,
            code,
            handle: code as u64,
            name: qnn::qnn_sys::errors::name(code),
            family: qnn::qnn_sys::errors::family(code),
            message: None,
            context: None,
            log: Vec::new(),
        }
        .into()
    }

    #[test]
    fn an_unsupported_vote_warns_once_per_code() {
        let unsupported = api_error("setPowerConfig", 13004);
        assert!(warn_once(HtpPerformanceMode::Burst, &unsupported));
        assert!(!warn_once(HtpPerformanceMode::PowerSaver, &unsupported));
        assert!(warn_once(
            HtpPerformanceMode::Burst,
            &api_error("createPowerConfigId", 13004)
        ));
        assert!(warn_once(
            HtpPerformanceMode::Burst,
            &api_error("setPowerConfig", 1000)
        ));
    }
}
