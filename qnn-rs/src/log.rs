//! QNN's log callback, forwarded to `tracing` (target `qnn`).
//!
//! The level passed to QNN comes from [`LogLevel`] or, when unset, from `QNN_LOG_LEVEL`
//! (`error`, `warn`, `info`, `verbose`, `debug`; default `warn`). QNN logs some harmless lines at
//! ERROR level (for example `unexpected GraphHtpSettings option 66` on every `graphCreate`), so
//! return codes, not log levels, decide failure. Error and warning lines are also kept per thread
//! for the duration of one QNN call and attached to the `ApiError` if the call fails.

use std::cell::RefCell;
use std::ffi::{c_char, CStr};

use qnn_sys::consts::log_level;

/// QNN's `QnnLog_Level_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Verbose = 4,
    Debug = 5,
}

impl LogLevel {
    /// `QNN_LOG_LEVEL` from the environment, or `Warn`.
    pub fn from_env() -> LogLevel {
        std::env::var("QNN_LOG_LEVEL")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(LogLevel::Warn)
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<LogLevel, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "error" | "1" => LogLevel::Error,
            "warn" | "warning" | "2" => LogLevel::Warn,
            "info" | "3" => LogLevel::Info,
            "verbose" | "4" => LogLevel::Verbose,
            "debug" | "5" => LogLevel::Debug,
            _ => {
                return Err(format!(
                    "unknown QNN log level {s:?} (error, warn, info, verbose, debug)"
                ))
            }
        })
    }
}

const RECENT_CAP: usize = 16;

thread_local! {
    static RECENT: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Forgets the lines kept for the previous call on this thread.
pub(crate) fn clear_recent() {
    RECENT.with(|r| r.borrow_mut().clear());
}

/// Error and warning lines logged on this thread since [`clear_recent`].
pub(crate) fn take_recent() -> Vec<String> {
    RECENT.with(|r| std::mem::take(&mut *r.borrow_mut()))
}

/// Lines QNN logs at ERROR level that are not errors (docs/qnn-notes.md gotcha 15).
fn is_known_noise(msg: &str) -> bool {
    msg.contains("unexpected GraphHtpSettings option")
}

/// The callback handed to `logCreate`.
pub(crate) unsafe extern "C" fn callback(
    fmt: *const c_char,
    level: u32,
    _timestamp: u64,
    args: qnn_sys::VaListRaw,
) {
    if fmt.is_null() {
        return;
    }
    // Never unwind into C.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: QNN passes a valid format string and its matching va_list.
        let msg = unsafe { format(fmt, args) };
        let msg = msg.trim_end();
        let noise = is_known_noise(msg);
        if level <= log_level::WARN && !noise {
            RECENT.with(|r| {
                let mut r = r.borrow_mut();
                if r.len() < RECENT_CAP {
                    r.push(msg.to_string());
                }
            });
        }
        match level {
            _ if noise => tracing::debug!(target: "qnn", "{msg}"),
            log_level::ERROR => tracing::error!(target: "qnn", "{msg}"),
            log_level::WARN => tracing::warn!(target: "qnn", "{msg}"),
            log_level::INFO => tracing::info!(target: "qnn", "{msg}"),
            log_level::VERBOSE => tracing::debug!(target: "qnn", "{msg}"),
            _ => tracing::trace!(target: "qnn", "{msg}"),
        }
    });
}

#[cfg(unix)]
unsafe fn format(fmt: *const c_char, args: qnn_sys::VaListRaw) -> String {
    extern "C" {
        fn vsnprintf(
            buf: *mut c_char,
            n: usize,
            fmt: *const c_char,
            ap: *mut std::ffi::c_void,
        ) -> i32;
    }
    let mut buf = vec![0u8; 1024];
    // SAFETY: the buffer is writable for its length; a va_list may be consumed only once, so a
    // longer message is cut rather than formatted twice.
    let n = unsafe { vsnprintf(buf.as_mut_ptr().cast(), buf.len(), fmt, args) };
    if n < 0 {
        // SAFETY: `fmt` is NUL-terminated.
        return unsafe { CStr::from_ptr(fmt) }
            .to_string_lossy()
            .into_owned();
    }
    let len = (n as usize).min(buf.len() - 1);
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

#[cfg(not(unix))]
unsafe fn format(fmt: *const c_char, _args: qnn_sys::VaListRaw) -> String {
    // The MSVC runtime exports no plain `vsnprintf`; log the format string unformatted.
    // SAFETY: `fmt` is NUL-terminated.
    unsafe { CStr::from_ptr(fmt) }
        .to_string_lossy()
        .into_owned()
}
