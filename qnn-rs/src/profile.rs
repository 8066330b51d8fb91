//! `Profile`: QNN's profiling API (`QnnProfile_create`, events and sub-events, free).
//!
//! A profile is created on a backend at a [`ProfileLevel`] and passed to the calls it should
//! record: [`GraphBuilder::finalize_profiled`](crate::GraphBuilder::finalize_profiled),
//! [`Graph::execute_profiled`](crate::Graph::execute_profiled) and
//! [`Context::from_binary_profiled`](crate::Context::from_binary_profiled). Its events
//! accumulate across those calls until it is dropped; [`Profile::events`] reads them as a tree.
//!
//! Nothing here runs unless a caller asks: the plain `finalize`, `execute` and `from_binary`
//! pass a NULL profile handle, and [`handles_created`] counts every handle this process made so
//! tests can check that.
//!
//! What the x86_64 HTP emulator of QNN 2.51 records is in `docs/profiling.md` (measured by
//! `qnn-rs/tests/profile.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use qnn_sys::profile as sys;
use qnn_sys::Handle;

use crate::api::{owned_str, qnn_call};
use crate::backend::{Backend, BackendInner};
use crate::error::Result;

static HANDLES_CREATED: AtomicU64 = AtomicU64::new(0);

/// How many QNN profile handles this process has created (successful `profileCreate` calls).
pub fn handles_created() -> u64 {
    HANDLES_CREATED.load(Ordering::SeqCst)
}

/// `QnnProfile_Level_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProfileLevel {
    /// Whole-call events: finalize, execute, context load, and their backend sub-events.
    Basic,
    /// Adds one event per graph node under the execute events.
    Detailed,
}

impl ProfileLevel {
    fn raw(self) -> u32 {
        match self {
            ProfileLevel::Basic => sys::level::BASIC,
            ProfileLevel::Detailed => sys::level::DETAILED,
        }
    }

    /// `basic` or `detailed`.
    pub fn name(self) -> &'static str {
        match self {
            ProfileLevel::Basic => "basic",
            ProfileLevel::Detailed => "detailed",
        }
    }
}

impl std::str::FromStr for ProfileLevel {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "basic" => Ok(ProfileLevel::Basic),
            "detailed" => Ok(ProfileLevel::Detailed),
            _ => Err(format!(
                "unknown profile level {s:?}: use basic or detailed"
            )),
        }
    }
}

/// `QnnProfile_EventUnit_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventUnit {
    Microseconds,
    Bytes,
    Cycles,
    Count,
    /// A backend object (an opaque blob); `value` is meaningless.
    Object,
    /// A heading with no value.
    None,
    /// A backend-defined unit.
    Other(u32),
}

impl EventUnit {
    fn from_raw(u: u32) -> EventUnit {
        match u {
            sys::unit::MICROSEC => EventUnit::Microseconds,
            sys::unit::BYTES => EventUnit::Bytes,
            sys::unit::CYCLES => EventUnit::Cycles,
            sys::unit::COUNT => EventUnit::Count,
            sys::unit::OBJECT => EventUnit::Object,
            sys::unit::NONE => EventUnit::None,
            other => EventUnit::Other(other),
        }
    }

    /// A short suffix: `us`, `B`, `cycles`, `count`, `object`, `-`, or `unit N`.
    pub fn suffix(self) -> String {
        match self {
            EventUnit::Microseconds => "us".into(),
            EventUnit::Bytes => "B".into(),
            EventUnit::Cycles => "cycles".into(),
            EventUnit::Count => "count".into(),
            EventUnit::Object => "object".into(),
            EventUnit::None => "-".into(),
            EventUnit::Other(u) => format!("unit {u}"),
        }
    }
}

/// One profiling event and its sub-events.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// `QnnProfile_EventType_t`: a `QNN_PROFILE_EVENTTYPE_*` value, or at least 1000 for a
    /// backend's own (see [`Event::type_name`]).
    pub event_type: u32,
    pub unit: EventUnit,
    pub value: u64,
    /// What the event is about: for a node event, the QNN node name.
    pub identifier: String,
    /// Microseconds, from the extended event data, when the backend gives one (non-zero).
    pub timestamp_us: Option<u64>,
    pub sub_events: Vec<Event>,
}

impl Event {
    /// Whether this is a per-node event (`QNN_PROFILE_EVENTTYPE_NODE`).
    pub fn is_node(&self) -> bool {
        self.event_type == sys::event_type::NODE
    }

    /// The header name of the event type (without its `QNN_PROFILE_EVENTTYPE_` or
    /// `QNN_HTP_PROFILE_EVENTTYPE_` prefix), when known.
    pub fn type_name(&self) -> Option<&'static str> {
        event_type_name(self.event_type)
    }

    /// This event and every event below it, depth first, with its depth (0 for `self`).
    pub fn walk(&self) -> Vec<(usize, &Event)> {
        let mut out = Vec::new();
        fn go<'a>(e: &'a Event, d: usize, out: &mut Vec<(usize, &'a Event)>) {
            out.push((d, e));
            for s in &e.sub_events {
                go(s, d + 1, out);
            }
        }
        go(self, 0, &mut out);
        out
    }
}

/// The header name of a core or HTP event type, when known.
pub fn event_type_name(t: u32) -> Option<&'static str> {
    use sys::event_type as c;
    use sys::htp_event_type as h;
    Some(match t {
        c::INIT => "INIT",
        c::FINALIZE => "FINALIZE",
        c::EXECUTE => "EXECUTE",
        c::NODE => "NODE",
        c::EXECUTE_QUEUE_WAIT => "EXECUTE_QUEUE_WAIT",
        c::EXECUTE_PREPROCESS => "EXECUTE_PREPROCESS",
        c::EXECUTE_DEVICE => "EXECUTE_DEVICE",
        c::EXECUTE_POSTPROCESS => "EXECUTE_POSTPROCESS",
        c::DEINIT => "DEINIT",
        c::TRACE => "TRACE",
        h::CONTEXT_LOAD_BIN_HOST_RPC_TIME_MICROSEC => "CONTEXT_LOAD_BIN_HOST_RPC_TIME_MICROSEC",
        h::CONTEXT_LOAD_BIN_HTP_RPC_TIME_MICROSEC => "CONTEXT_LOAD_BIN_HTP_RPC_TIME_MICROSEC",
        h::CONTEXT_LOAD_BIN_ACCEL_TIME_MICROSEC => "CONTEXT_LOAD_BIN_ACCEL_TIME_MICROSEC",
        h::GRAPH_FINALIZE_HOST_RPC_TIME_MICROSEC => "GRAPH_FINALIZE_HOST_RPC_TIME_MICROSEC",
        h::GRAPH_FINALIZE_HTP_RPC_TIME_MICROSEC => "GRAPH_FINALIZE_HTP_RPC_TIME_MICROSEC",
        h::GRAPH_FINALIZE_ACCEL_TIME_MICROSEC => "GRAPH_FINALIZE_ACCEL_TIME_MICROSEC",
        h::GRAPH_FINALIZE_PERF_ESTIMATE => "GRAPH_FINALIZE_PERF_ESTIMATE",
        h::GRAPH_FINALIZE_PERF_ESTIMATE_MODE => "GRAPH_FINALIZE_PERF_ESTIMATE_MODE",
        h::GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_CYCLES => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_CYCLES"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_LOWER_CYCLES => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_LOWER_CYCLES"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_UPPER_CYCLES => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_UPPER_CYCLES"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_BANDWIDTH_STATS => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_BANDWIDTH_STATS"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_BANDWIDTH_STATS_HTP_ID => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_BANDWIDTH_STATS_HTP_ID"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_INPUT_FILL => "GRAPH_FINALIZE_PERF_ESTIMATE_INPUT_FILL",
        h::GRAPH_FINALIZE_PERF_ESTIMATE_INTERMEDIATE_FILL => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_INTERMEDIATE_FILL"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_INTERMEDIATE_SPILL => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_INTERMEDIATE_SPILL"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_INTER_HTP_FILL => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_INTER_HTP_FILL"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_INTER_HTP_SPILL => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_INTER_HTP_SPILL"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_OUTPUT_SPILL => "GRAPH_FINALIZE_PERF_ESTIMATE_OUTPUT_SPILL",
        h::GRAPH_FINALIZE_PERF_ESTIMATE_MISSING_COST_OPS => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_MISSING_COST_OPS"
        }
        h::GRAPH_FINALIZE_PERF_ESTIMATE_MISSING_COST_OPID => {
            "GRAPH_FINALIZE_PERF_ESTIMATE_MISSING_COST_OPID"
        }
        h::GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC => "GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC",
        h::GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC => "GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC",
        h::GRAPH_EXECUTE_ACCEL_TIME_CYCLE => "GRAPH_EXECUTE_ACCEL_TIME_CYCLE",
        h::GRAPH_EXECUTE_ACCEL_TIME_MICROSEC => "GRAPH_EXECUTE_ACCEL_TIME_MICROSEC",
        h::GRAPH_EXECUTE_MISC_ACCEL_TIME_MICROSEC => "GRAPH_EXECUTE_MISC_ACCEL_TIME_MICROSEC",
        h::GRAPH_EXECUTE_YIELD_INSTANCE_RELEASE_TIME => "GRAPH_EXECUTE_YIELD_INSTANCE_RELEASE_TIME",
        h::GRAPH_EXECUTE_YIELD_INSTANCE_WAIT_TIME => "GRAPH_EXECUTE_YIELD_INSTANCE_WAIT_TIME",
        h::GRAPH_EXECUTE_YIELD_INSTANCE_RESTORE_TIME => "GRAPH_EXECUTE_YIELD_INSTANCE_RESTORE_TIME",
        h::GRAPH_EXECUTE_YIELD_COUNT => "GRAPH_EXECUTE_YIELD_COUNT",
        h::GRAPH_EXECUTE_VTCM_ACQUIRE_TIME => "GRAPH_EXECUTE_VTCM_ACQUIRE_TIME",
        h::GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME => "GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME",
        h::GRAPH_EXECUTE_ACCEL_EXCL_WAIT_TIME_MICROSEC => {
            "GRAPH_EXECUTE_ACCEL_EXCL_WAIT_TIME_MICROSEC"
        }
        h::GRAPH_DEINIT_HOST_RPC_TIME_MICROSEC => "GRAPH_DEINIT_HOST_RPC_TIME_MICROSEC",
        h::GRAPH_DEINIT_HTP_RPC_TIME_MICROSEC => "GRAPH_DEINIT_HTP_RPC_TIME_MICROSEC",
        h::GRAPH_DEINIT_ACCEL_TIME_MICROSEC => "GRAPH_DEINIT_ACCEL_TIME_MICROSEC",
        h::NODE_WAIT => "NODE_WAIT",
        h::NODE_OVERLAP => "NODE_OVERLAP",
        h::NODE_WAIT_OVERLAP => "NODE_WAIT_OVERLAP",
        h::NODE_RESOURCEMASK => "NODE_RESOURCEMASK",
        h::NODE_CRITICAL_BG_OP_ID => "NODE_CRITICAL_BG_OP_ID",
        h::NODE_WAIT_BG_OP_ID => "NODE_WAIT_BG_OP_ID",
        h::GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE => "GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE",
        h::GRAPH_NUMBER_OF_HVX_THREADS => "GRAPH_NUMBER_OF_HVX_THREADS",
        _ => return None,
    })
}

/// A QNN profile handle on a backend. `Send` but not `Sync`: QNN writes into the handle during
/// every call it is passed to, so one profile is used by one thread at a time (the attach
/// methods take `&Profile`, which a `!Sync` type cannot share across threads).
pub struct Profile {
    backend: Arc<BackendInner>,
    handle: Handle,
    level: ProfileLevel,
}

// SAFETY: the handle is an opaque value owned by this struct; `!Sync` keeps calls that use it on
// one thread at a time.
unsafe impl Send for Profile {}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("level", &self.level)
            .finish()
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        // SAFETY: created by `profileCreate` on this backend, which the Arc keeps alive; every
        // call it was passed to has returned (they borrow `self`).
        if let Err(e) = unsafe { qnn_call!(self.backend.api, profileFree(self.handle)) } {
            tracing::warn!(target: "qnn", "profileFree: {e}");
        }
    }
}

impl Profile {
    /// `profileCreate` on `backend` at `level`.
    pub fn new(backend: &Backend, level: ProfileLevel) -> Result<Profile> {
        let b = &backend.inner;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: live backend handle; valid out-pointer.
        unsafe {
            qnn_call!(b.api, profileCreate(b.handle, level.raw(), &mut handle);
                || format!("level {}", level.name()))
        }?;
        HANDLES_CREATED.fetch_add(1, Ordering::SeqCst);
        Ok(Profile {
            backend: b.clone(),
            handle,
            level,
        })
    }

    pub fn level(&self) -> ProfileLevel {
        self.level
    }

    pub(crate) fn handle(&self) -> Handle {
        self.handle
    }

    /// Every top-level event recorded so far, each with its sub-events (`profileGetEvents`,
    /// `profileGetSubEvents`, `profileGetEventData`, and `profileGetExtendedEventData` for
    /// timestamps when the backend provides it).
    pub fn events(&self) -> Result<Vec<Event>> {
        let api = &self.backend.api;
        let mut ids: *const std::ffi::c_void = std::ptr::null();
        let mut n = 0u32;
        // SAFETY: live profile handle; valid out-pointers. The id array belongs to the profile.
        unsafe { qnn_call!(api, profileGetEvents(self.handle, &mut ids, &mut n)) }?;
        // SAFETY: QNN returned `n` ids at `ids`, valid until the profile is used again.
        let ids = unsafe { id_slice(ids, n) };
        ids.iter().map(|&id| self.event(id, 0)).collect()
    }

    fn event(&self, id: sys::EventId, depth: usize) -> Result<Event> {
        let api = &self.backend.api;
        let mut data = sys::EventData {
            event_type: 0,
            unit: 0,
            value: 0,
            identifier: std::ptr::null(),
        };
        // SAFETY: `id` came from this profile; `data` is a valid `QnnProfile_EventData_t`.
        unsafe {
            qnn_call!(
                api,
                profileGetEventData(id, (&mut data as *mut sys::EventData).cast())
            )
        }?;
        let timestamp_us = self.timestamp(id);
        let mut sub_events = Vec::new();
        // QNN's trees are shallow (execute > node > node detail); the bound only guards
        // against a library that hands back a cycle.
        if depth < 16 {
            let mut ids: *const std::ffi::c_void = std::ptr::null();
            let mut n = 0u32;
            // SAFETY: as above.
            unsafe { qnn_call!(api, profileGetSubEvents(id, &mut ids, &mut n)) }?;
            // SAFETY: QNN returned `n` ids at `ids`; copied before the next call.
            let ids = unsafe { id_slice(ids, n) };
            for id in ids {
                sub_events.push(self.event(id, depth + 1)?);
            }
        }
        Ok(Event {
            event_type: data.event_type,
            unit: EventUnit::from_raw(data.unit),
            value: data.value,
            identifier: owned_str(data.identifier),
            timestamp_us,
            sub_events,
        })
    }

    /// The extended record's timestamp: optional, so any failure (an older library, an event
    /// kind without one) is no timestamp rather than an error.
    fn timestamp(&self, id: sys::EventId) -> Option<u64> {
        let get = self.backend.api.f.profileGetExtendedEventData?;
        // SAFETY: all-zero is a valid `QnnProfile_ExtendedEventData_t` (null pointers).
        let mut data: sys::ExtendedEventData = unsafe { std::mem::zeroed() };
        data.version = sys::EXTENDED_DATA_VERSION_1;
        // SAFETY: `id` came from this profile; `data` is a valid, writable record.
        let rc = unsafe { get(id, (&mut data as *mut sys::ExtendedEventData).cast()) };
        (rc == 0 && data.version == sys::EXTENDED_DATA_VERSION_1 && data.v1.timestamp != 0)
            .then_some(data.v1.timestamp)
    }
}

/// Copies `n` event ids from QNN's array.
///
/// # Safety
/// `ids` must point at `n` `QnnProfile_EventId_t`s (or be anything when `n` is 0).
unsafe fn id_slice(ids: *const std::ffi::c_void, n: u32) -> Vec<sys::EventId> {
    if n == 0 || ids.is_null() {
        return Vec::new();
    }
    // SAFETY: per the function's contract.
    unsafe { std::slice::from_raw_parts(ids.cast::<sys::EventId>(), n as usize) }.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_name() {
        for l in [ProfileLevel::Basic, ProfileLevel::Detailed] {
            assert_eq!(l.name().parse::<ProfileLevel>(), Ok(l));
        }
        let e = "full".parse::<ProfileLevel>().unwrap_err();
        assert!(e.contains("basic or detailed"), "{e}");
    }

    #[test]
    fn walk_is_depth_first_with_depths() {
        let leaf = |t, id: &str| Event {
            event_type: t,
            unit: EventUnit::Cycles,
            value: 1,
            identifier: id.into(),
            timestamp_us: None,
            sub_events: vec![],
        };
        let mut top = leaf(sys::event_type::EXECUTE, "g");
        let mut mid = leaf(sys::htp_event_type::GRAPH_EXECUTE_ACCEL_TIME_CYCLE, "");
        mid.sub_events = vec![leaf(404, "a"), leaf(404, "b")];
        top.sub_events = vec![mid];
        let w: Vec<(usize, &str)> = top
            .walk()
            .into_iter()
            .map(|(d, e)| (d, e.identifier.as_str()))
            .collect();
        assert_eq!(w, [(0, "g"), (1, ""), (2, "a"), (2, "b")]);
        assert_eq!(top.type_name(), Some("EXECUTE"));
        assert!(top.sub_events[0].sub_events[0].is_node());
        assert_eq!(event_type_name(99_999), None);
    }
}
