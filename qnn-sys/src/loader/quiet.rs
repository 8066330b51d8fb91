//! Opening a library with stdout silenced: the x86_64 `libQnnHtp.so` prints a banner on fd 1
//! from a constructor while `dlopen` runs (docs/qnn-notes.md §1).

use std::path::Path;

use super::LoadError;

/// Opens a library with stdout silenced (see the module docs).
pub(super) fn open_quietly(path: &Path) -> Result<libloading::Library, LoadError> {
    let _quiet = StdoutSilencer::new();
    open_raw(path).map_err(|e| LoadError::Dlopen {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(unix)]
fn open_raw(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading a library runs its constructors; QNN libraries are trusted code chosen by
    // the search order above.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Into::into)
}

#[cfg(windows)]
fn open_raw(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::windows::{Library, LOAD_WITH_ALTERED_SEARCH_PATH};
    const _: () = assert!(ALTERED_SEARCH_PATH == LOAD_WITH_ALTERED_SEARCH_PATH);
    let (path, flags) = windows_load(path);
    // SAFETY: as on Unix.
    unsafe { Library::load_with_flags(&path, flags) }.map(Into::into)
}

/// `LOAD_WITH_ALTERED_SEARCH_PATH` of `LoadLibraryExW`.
const ALTERED_SEARCH_PATH: u32 = 0x0000_0008;

/// The path and flags `LoadLibraryExW` is given for `path`. A path with a folder is made
/// absolute and loaded with the altered search path, so that Windows resolves the HTP stub DLL
/// (`QnnHtpV73Stub.dll`, ...) from the library's own folder. Microsoft leaves that flag
/// undefined for a relative path, so the bare file name of the search's last step gets none:
/// the standard search, which starts in the folder of the executable (beside `qnnx.exe`), then
/// System32 and `PATH`.
#[cfg_attr(not(windows), allow(dead_code))]
fn windows_load(path: &Path) -> (std::path::PathBuf, u32) {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => (
            std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            ALTERED_SEARCH_PATH,
        ),
        _ => (path.to_path_buf(), 0),
    }
}

/// Redirects fd 1 to `/dev/null` (or stderr) while alive. Process-wide, so a global lock
/// serialises users.
pub struct StdoutSilencer {
    #[cfg(unix)]
    saved: Option<i32>,
    #[cfg(unix)]
    _guard: std::sync::MutexGuard<'static, ()>,
}

#[cfg(unix)]
static STDOUT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl StdoutSilencer {
    #[cfg(unix)]
    fn new() -> StdoutSilencer {
        // SAFETY: a fresh fd we own, or -1 (then stdout is left alone).
        let devnull = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY) };
        StdoutSilencer::redirect_to(devnull, true)
    }

    /// Points fd 1 at `fd` (closed here when `close` says it is ours) while alive.
    #[cfg(unix)]
    fn redirect_to(fd: i32, close: bool) -> StdoutSilencer {
        use std::io::Write;
        let guard = STDOUT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _ = std::io::stdout().flush();
        // SAFETY: plain fd syscalls on fds we own; every failure leaves stdout untouched.
        let saved = unsafe {
            libc::fflush(std::ptr::null_mut());
            if fd < 0 {
                None
            } else {
                let saved = libc::dup(1);
                let moved = saved >= 0 && libc::dup2(fd, 1) >= 0;
                if close {
                    libc::close(fd);
                }
                if !moved && saved >= 0 {
                    libc::close(saved);
                }
                (moved && saved >= 0).then_some(saved)
            }
        };
        StdoutSilencer {
            saved,
            _guard: guard,
        }
    }

    #[cfg(not(unix))]
    fn new() -> StdoutSilencer {
        StdoutSilencer {}
    }
}

impl Drop for StdoutSilencer {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(saved) = self.saved.take() {
            // SAFETY: restores the fd saved in `new`.
            unsafe {
                libc::fflush(std::ptr::null_mut());
                libc::dup2(saved, 1);
                libc::close(saved);
            }
        }
    }
}

/// Sends what is written to stdout (fd 1) to stderr until the guard is dropped: for QNN calls
/// of releases that print progress on stdout (the HTP `graphFinalize` of QNN 2.47 to 2.49,
/// [`crate::releases::Release::htp_finalize_prints`]), where stdout is a program's output
/// (`qnnx --json`). Process-wide: another thread's stdout goes to stderr meanwhile; nothing is
/// lost. On Windows nothing is redirected.
pub fn stdout_to_stderr() -> StdoutSilencer {
    #[cfg(unix)]
    {
        StdoutSilencer::redirect_to(2, false)
    }
    #[cfg(not(unix))]
    {
        StdoutSilencer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_loads_a_bare_name_by_the_standard_search_and_a_path_beside_its_stub() {
        assert_eq!(
            windows_load(Path::new("QnnHtp.dll")),
            ("QnnHtp.dll".into(), 0)
        );
        assert_eq!(
            windows_load(Path::new("/sdk/lib/QnnHtp.dll")),
            ("/sdk/lib/QnnHtp.dll".into(), ALTERED_SEARCH_PATH)
        );
        let (path, flags) = windows_load(Path::new("runtime/qnn/QnnHtp.dll"));
        assert!(path.is_absolute() && path.ends_with("runtime/qnn/QnnHtp.dll"));
        assert_eq!(flags, ALTERED_SEARCH_PATH);
    }
}
