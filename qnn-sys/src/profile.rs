//! `QnnProfile.h` and `HTP/QnnHtpProfile.h`: profile levels, event types and units, and the
//! event records `profileGetEventData` / `profileGetExtendedEventData` fill. Written from the
//! headers of `qualcomm/geniex-qairt-plugin` (`qnn-api/include/`, commit fb1c582, QNN 2.36.1;
//! docs/qnn-notes.md §2) and checked against the 2.51 HTP library (docs/qnn-notes.md §14).

use std::ffi::c_char;

use crate::types::Scalar;

/// `QnnProfile_Level_t`.
pub mod level {
    /// `QNN_PROFILE_LEVEL_BASIC`: whole-call events (init, finalize, execute).
    pub const BASIC: u32 = 1;
    /// `QNN_PROFILE_LEVEL_DETAILED`: adds per-node sub-events of execute.
    pub const DETAILED: u32 = 2;
}

/// `QnnProfile_EventType_t` values of `QnnProfile.h`.
pub mod event_type {
    pub const INIT: u32 = 100;
    pub const FINALIZE: u32 = 300;
    pub const EXECUTE: u32 = 400;
    pub const NODE: u32 = 404;
    pub const EXECUTE_QUEUE_WAIT: u32 = 405;
    pub const EXECUTE_PREPROCESS: u32 = 406;
    pub const EXECUTE_DEVICE: u32 = 407;
    pub const EXECUTE_POSTPROCESS: u32 = 408;
    pub const DEINIT: u32 = 500;
    pub const TRACE: u32 = 600;
    /// `QNN_PROFILE_EVENTTYPE_BACKEND`: backend-specific types are this or above.
    pub const BACKEND: u32 = 1000;
}

/// `QNN_HTP_PROFILE_EVENTTYPE_*` of `HTP/QnnHtpProfile.h`.
pub mod htp_event_type {
    pub const CONTEXT_LOAD_BIN_HOST_RPC_TIME_MICROSEC: u32 = 1002;
    pub const CONTEXT_LOAD_BIN_HTP_RPC_TIME_MICROSEC: u32 = 1003;
    pub const CONTEXT_LOAD_BIN_ACCEL_TIME_MICROSEC: u32 = 1004;
    pub const GRAPH_FINALIZE_HOST_RPC_TIME_MICROSEC: u32 = 2001;
    pub const GRAPH_FINALIZE_HTP_RPC_TIME_MICROSEC: u32 = 2002;
    pub const GRAPH_FINALIZE_ACCEL_TIME_MICROSEC: u32 = 2003;
    /// A heading with no value; the estimates below are its siblings or sub-events.
    pub const GRAPH_FINALIZE_PERF_ESTIMATE: u32 = 2004;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_MODE: u32 = 2005;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_CYCLES: u32 = 2006;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_LOWER_CYCLES: u32 = 2007;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_SIM_EXEC_UPPER_CYCLES: u32 = 2008;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_BANDWIDTH_STATS: u32 = 2009;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_BANDWIDTH_STATS_HTP_ID: u32 = 2010;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_INPUT_FILL: u32 = 2011;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_INTERMEDIATE_FILL: u32 = 2012;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_INTERMEDIATE_SPILL: u32 = 2013;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_INTER_HTP_FILL: u32 = 2014;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_INTER_HTP_SPILL: u32 = 2015;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_OUTPUT_SPILL: u32 = 2016;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_MISSING_COST_OPS: u32 = 2017;
    pub const GRAPH_FINALIZE_PERF_ESTIMATE_MISSING_COST_OPID: u32 = 2018;
    pub const GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC: u32 = 3001;
    pub const GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC: u32 = 3002;
    /// Detailed level: its sub-events are one `NODE` event per node, in cycles.
    pub const GRAPH_EXECUTE_ACCEL_TIME_CYCLE: u32 = 3003;
    /// Its sub-events may be one `NODE` event per node, in microseconds.
    pub const GRAPH_EXECUTE_ACCEL_TIME_MICROSEC: u32 = 3004;
    pub const GRAPH_EXECUTE_MISC_ACCEL_TIME_MICROSEC: u32 = 3005;
    pub const GRAPH_EXECUTE_YIELD_INSTANCE_RELEASE_TIME: u32 = 3006;
    pub const GRAPH_EXECUTE_YIELD_INSTANCE_WAIT_TIME: u32 = 3007;
    pub const GRAPH_EXECUTE_YIELD_INSTANCE_RESTORE_TIME: u32 = 3008;
    pub const GRAPH_EXECUTE_YIELD_COUNT: u32 = 3009;
    pub const GRAPH_EXECUTE_VTCM_ACQUIRE_TIME: u32 = 3010;
    pub const GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME: u32 = 3011;
    pub const GRAPH_EXECUTE_ACCEL_EXCL_WAIT_TIME_MICROSEC: u32 = 3012;
    pub const GRAPH_DEINIT_HOST_RPC_TIME_MICROSEC: u32 = 4001;
    pub const GRAPH_DEINIT_HTP_RPC_TIME_MICROSEC: u32 = 4002;
    pub const GRAPH_DEINIT_ACCEL_TIME_MICROSEC: u32 = 4003;
    pub const NODE_WAIT: u32 = 5001;
    pub const NODE_OVERLAP: u32 = 5002;
    pub const NODE_WAIT_OVERLAP: u32 = 5003;
    pub const NODE_RESOURCEMASK: u32 = 5004;
    pub const NODE_CRITICAL_BG_OP_ID: u32 = 5005;
    pub const NODE_WAIT_BG_OP_ID: u32 = 5006;
    pub const GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE: u32 = 6001;
    pub const GRAPH_NUMBER_OF_HVX_THREADS: u32 = 8001;
}

/// `QnnProfile_EventUnit_t`.
pub mod unit {
    pub const MICROSEC: u32 = 1;
    pub const BYTES: u32 = 2;
    pub const CYCLES: u32 = 3;
    pub const COUNT: u32 = 4;
    pub const OBJECT: u32 = 5;
    pub const NONE: u32 = 6;
    pub const BACKEND: u32 = 1000;
}

/// `QnnProfile_EventId_t`: an event handle, valid until its profile is freed.
pub type EventId = u64;

/// `QnnProfile_EventData_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EventData {
    pub event_type: u32,
    pub unit: u32,
    pub value: u64,
    pub identifier: *const c_char,
}

/// `Qnn_OpaqueObject_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OpaqueObject {
    pub data: *mut std::ffi::c_void,
    pub len: u64,
}

/// `QnnProfile_BackendOpaqueObject_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BackendOpaqueObject {
    pub opaque_object: OpaqueObject,
    pub file_name: *const c_char,
}

/// The value union of `QnnProfile_ExtendedEventDataV1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ExtendedValue {
    pub value: Scalar,
    pub backend_opaque_object: BackendOpaqueObject,
}

/// `QnnProfile_ExtendedEventDataV1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExtendedEventDataV1 {
    pub event_type: u32,
    pub unit: u32,
    pub value: ExtendedValue,
    pub timestamp: u64,
    pub identifier: *const c_char,
}

/// `QnnProfile_ExtendedEventData_t` (`version` 1 is the only one defined).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExtendedEventData {
    pub version: u32,
    pub v1: ExtendedEventDataV1,
}

/// `QNN_PROFILE_DATA_VERSION_1`.
pub const EXTENDED_DATA_VERSION_1: u32 = 1;

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<EventData>() == 24);
    assert!(offset_of!(EventData, value) == 8);
    assert!(offset_of!(EventData, identifier) == 16);
    assert!(size_of::<BackendOpaqueObject>() == 24);
    assert!(size_of::<ExtendedValue>() == 24);
    assert!(offset_of!(ExtendedEventDataV1, value) == 8);
    assert!(offset_of!(ExtendedEventDataV1, timestamp) == 32);
    assert!(offset_of!(ExtendedEventDataV1, identifier) == 40);
    assert!(size_of::<ExtendedEventDataV1>() == 48);
    assert!(offset_of!(ExtendedEventData, v1) == 8);
    assert!(size_of::<ExtendedEventData>() == 56);
};
