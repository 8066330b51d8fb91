//! The unsafe boundary: one function table and one checked-call macro. Grep for `qnn_call!` to
//! see every QNN call this crate makes.

use std::ffi::{c_char, CStr};
use std::sync::Arc;

use qnn_sys::{BackendLibrary, Config, ConfigValue, CoreFunctions};

use crate::error::ApiError;

/// A core function table and what keeps it valid.
pub(crate) struct Api {
    pub(crate) f: CoreFunctions,
    /// For messages: the library path.
    pub(crate) library: String,
    _lib: Option<Arc<BackendLibrary>>,
}

impl Api {
    pub(crate) fn from_library(lib: Arc<BackendLibrary>) -> Api {
        Api {
            f: *lib.functions(),
            library: lib.path().display().to_string(),
            _lib: Some(lib),
        }
    }

    /// A real library's table with some slots replaced (fault injection over the real QNN).
    #[cfg(test)]
    pub(crate) fn wrapping(lib: Arc<BackendLibrary>, f: CoreFunctions) -> Api {
        Api {
            f,
            library: format!("{} (fault-injecting wrapper)", lib.path().display()),
            _lib: Some(lib),
        }
    }

    /// A table that is not backed by a loaded library (tests inject faults this way).
    #[cfg(any(test, feature = "fake"))]
    pub(crate) fn from_table(f: CoreFunctions, name: &str) -> Api {
        Api {
            f,
            library: name.to_string(),
            _lib: None,
        }
    }

    /// Builds the error for a failed call right away, while QNN's state still describes it.
    pub(crate) fn error(
        &self,
        call: &'static str,
        handle: u64,
        context: Option<String>,
    ) -> crate::Error {
        let code = (handle & 0xFFFF) as u32;
        ApiError {
            call,
            code,
            handle,
            name: qnn_sys::errors::name(code),
            family: qnn_sys::errors::family(code),
            message: self.message(handle),
            context,
            log: crate::log::take_recent(),
        }
        .into()
    }

    /// `errorGetMessage`, which fails for codes the backend does not own (the 3xxxx system codes).
    fn message(&self, handle: u64) -> Option<String> {
        let get = self.f.errorGetMessage?;
        let mut msg: *const c_char = std::ptr::null();
        // SAFETY: the out-pointer is valid; the returned string is owned by the library.
        let rc = unsafe { get(handle, &mut msg) };
        if rc != 0 || msg.is_null() {
            return None;
        }
        // SAFETY: non-null NUL-terminated string from the library.
        let s = unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .trim()
            .to_string();
        (!s.is_empty()).then_some(s)
    }
}

/// Calls one function-table slot and turns its status into `Result<(), Error>`.
///
/// `qnn_call!(api, slot(args...))` or `qnn_call!(api, slot(args...); || context_string)`; the
/// context closure runs only on failure. `qnn_call!(api, table => slot(args...))` calls a slot
/// of another table the library handed out (the HTP perf infrastructure), reporting errors
/// through `api`. Must be used inside an `unsafe` block whose `SAFETY` comment justifies the
/// arguments.
macro_rules! qnn_call {
    ($api:expr, $table:expr => $slot:ident ( $($arg:expr),* $(,)? )) => {
        $crate::api::qnn_call!(@call $api, $table, $slot ( $($arg),* ), || None)
    };
    ($api:expr, $slot:ident ( $($arg:expr),* $(,)? )) => {
        $crate::api::qnn_call!(@call $api, $api.f, $slot ( $($arg),* ), || None)
    };
    ($api:expr, $slot:ident ( $($arg:expr),* $(,)? ); $ctx:expr) => {
        $crate::api::qnn_call!(@call $api, $api.f, $slot ( $($arg),* ), || Some(($ctx)()))
    };
    (@call $api:expr, $table:expr, $slot:ident ( $($arg:expr),* ), $context:expr) => {{
        let api: &$crate::api::Api = &$api;
        match $table.$slot {
            None => Err($crate::Error::NotProvided {
                call: stringify!($slot),
                library: api.library.clone(),
            }),
            Some(f) => {
                $crate::log::clear_recent();
                let rc = f($($arg),*);
                if rc == 0 {
                    Ok(())
                } else {
                    Err(api.error(stringify!($slot), rc, ($context)()))
                }
            }
        }
    }};
}

pub(crate) use qnn_call;

/// Copies a NUL-terminated string owned by QNN.
pub(crate) fn owned_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: QNN returns NUL-terminated strings that outlive this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A NULL-terminated `Q*_Config_t*` list whose entries are CUSTOM configs pointing at
/// backend-specific structs. Borrows the structs, so they outlive every call using the list.
pub(crate) struct CustomConfigs<'a> {
    // The pointers in `list` target this Vec's heap buffer, which does not move with `self`.
    _configs: Vec<Config>,
    list: Vec<*const Config>,
    _customs: std::marker::PhantomData<&'a mut ()>,
}

impl<'a> CustomConfigs<'a> {
    pub(crate) fn new<T>(customs: &'a mut [T]) -> CustomConfigs<'a> {
        let configs: Vec<Config> = customs
            .iter_mut()
            .map(|c| Config {
                option: qnn_sys::consts::CONFIG_OPTION_CUSTOM,
                value: ConfigValue {
                    custom_config: (c as *mut T).cast(),
                },
            })
            .collect();
        let mut list: Vec<*const Config> = configs.iter().map(|c| c as *const Config).collect();
        list.push(std::ptr::null());
        CustomConfigs {
            _configs: configs,
            list,
            _customs: std::marker::PhantomData,
        }
    }

    /// The list for a QNN call, or NULL when empty (QNN accepts NULL for "no configs").
    pub(crate) fn as_ptr(&self) -> *const *const Config {
        if self.list.len() == 1 {
            std::ptr::null()
        } else {
            self.list.as_ptr()
        }
    }
}
