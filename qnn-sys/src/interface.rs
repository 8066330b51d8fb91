//! The QNN core function table (`QNN_INTERFACE_VER_TYPE`, core API 2.27) and the provider record
//! (`QnnInterface_t`) that `QnnInterface_getProviders` returns. Slot order is ABI: the table is
//! append-only across releases, so a newer library (2.40 has 74 slots) is read through this
//! 68-slot prefix. Arguments of types we never build are declared as untyped pointers.

use std::ffi::{c_char, c_void};

use crate::types::*;

type H = Handle;
type R = ErrorHandle;
type P = *mut c_void;
type CP = *const c_void;

macro_rules! function_table {
    ($( $(#[$m:meta])* $name:ident : fn($($arg:ty),*); )*) => {
        /// `QNN_INTERFACE_VER_TYPE`: the core function table, by value inside [`Interface`].
        /// Any slot may be NULL when the backend does not provide it.
        #[repr(C)]
        #[derive(Clone, Copy)]
        #[allow(non_snake_case)]
        pub struct CoreFunctions {
            $( $(#[$m])* pub $name: Option<unsafe extern "C" fn($($arg),*) -> R>, )*
        }

        impl CoreFunctions {
            /// Slot names in table order, as spelled in the C header.
            pub const SLOT_NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Whether each slot is filled, in table order.
            pub fn filled(&self) -> Vec<bool> {
                vec![$(self.$name.is_some()),*]
            }
        }
    };
}

function_table! {
    /// `QnnProperty_hasCapability(key)`.
    propertyHasCapability: fn(u32);
    /// `QnnBackend_create(log, config, &backend)`.
    backendCreate: fn(H, *const *const BackendConfig, *mut H);
    /// `QnnBackend_setConfig(backend, config)`.
    backendSetConfig: fn(H, *const *const BackendConfig);
    /// `QnnBackend_getApiVersion(&version)`.
    backendGetApiVersion: fn(*mut ApiVersion);
    /// `QnnBackend_getBuildId(&id)`.
    backendGetBuildId: fn(*mut *const c_char);
    /// `QnnBackend_registerOpPackage(backend, path, provider, target)`.
    backendRegisterOpPackage: fn(H, *const c_char, *const c_char, *const c_char);
    /// `QnnBackend_getSupportedOperations(backend, &n, &ops)`.
    backendGetSupportedOperations: fn(H, *mut u32, *mut *const OperationName);
    /// `QnnBackend_validateOpConfig(backend, opConfig)`: the op config is passed by value.
    backendValidateOpConfig: fn(H, OpConfig);
    /// `QnnBackend_free(backend)`.
    backendFree: fn(H);
    /// `QnnContext_create(backend, device, config, &context)`.
    contextCreate: fn(H, H, *const *const ContextConfig, *mut H);
    /// `QnnContext_setConfig(context, config)`.
    contextSetConfig: fn(H, *const *const ContextConfig);
    /// `QnnContext_getBinarySize(context, &size)`.
    contextGetBinarySize: fn(H, *mut ContextBinarySize);
    /// `QnnContext_getBinary(context, buffer, size, &written)`.
    contextGetBinary: fn(H, P, ContextBinarySize, *mut ContextBinarySize);
    /// `QnnContext_createFromBinary(backend, device, config, buffer, size, &context, profile)`.
    contextCreateFromBinary: fn(H, H, *const *const ContextConfig, CP, ContextBinarySize, *mut H, H);
    /// `QnnContext_free(context, profile)`.
    contextFree: fn(H, H);
    /// `QnnGraph_create(context, name, config, &graph)`.
    graphCreate: fn(H, *const c_char, *const *const GraphConfig, *mut H);
    /// `QnnGraph_createSubgraph(graph, name, &subgraph)`.
    graphCreateSubgraph: fn(H, *const c_char, *mut H);
    /// `QnnGraph_setConfig(graph, config)`.
    graphSetConfig: fn(H, *const *const GraphConfig);
    /// `QnnGraph_addNode(graph, opConfig)`: the op config is passed by value.
    graphAddNode: fn(H, OpConfig);
    /// `QnnGraph_finalize(graph, profile, signal)`.
    graphFinalize: fn(H, H, H);
    /// `QnnGraph_retrieve(context, name, &graph)`.
    graphRetrieve: fn(H, *const c_char, *mut H);
    /// `QnnGraph_execute(graph, inputs, nIn, outputs, nOut, profile, signal)`.
    graphExecute: fn(H, *const Tensor, u32, *mut Tensor, u32, H, H);
    /// `QnnGraph_executeAsync(graph, inputs, nIn, outputs, nOut, profile, signal, notify, param)`.
    graphExecuteAsync: fn(H, *const Tensor, u32, *mut Tensor, u32, H, H, P, P);
    /// `QnnTensor_createContextTensor(context, &tensor)`.
    tensorCreateContextTensor: fn(H, *mut Tensor);
    /// `QnnTensor_createGraphTensor(graph, &tensor)`: assigns `tensor.id`.
    tensorCreateGraphTensor: fn(H, *mut Tensor);
    /// `QnnLog_create(callback, maxLevel, &log)`.
    logCreate: fn(LogCallback, u32, *mut H);
    /// `QnnLog_setLogLevel(log, maxLevel)`.
    logSetLogLevel: fn(H, u32);
    /// `QnnLog_free(log)`.
    logFree: fn(H);
    /// `QnnProfile_create(backend, level, &profile)`.
    profileCreate: fn(H, u32, *mut H);
    /// `QnnProfile_setConfig(profile, config)`.
    profileSetConfig: fn(H, *const CP);
    /// `QnnProfile_getEvents(profile, &ids, &n)`.
    profileGetEvents: fn(H, *mut CP, *mut u32);
    /// `QnnProfile_getSubEvents(event, &ids, &n)`.
    profileGetSubEvents: fn(u64, *mut CP, *mut u32);
    /// `QnnProfile_getEventData(event, &data)`.
    profileGetEventData: fn(u64, P);
    /// `QnnProfile_getExtendedEventData(event, &data)`.
    profileGetExtendedEventData: fn(u64, P);
    /// `QnnProfile_free(profile)`.
    profileFree: fn(H);
    /// `QnnMem_register(context, descriptors, n, handles)`.
    memRegister: fn(H, CP, u32, *mut H);
    /// `QnnMem_deRegister(handles, n)`.
    memDeRegister: fn(*const H, u32);
    /// `QnnDevice_getPlatformInfo(log, &info)`.
    deviceGetPlatformInfo: fn(H, *mut *const PlatformInfo);
    /// `QnnDevice_freePlatformInfo(log, info)`.
    deviceFreePlatformInfo: fn(H, *const PlatformInfo);
    /// `QnnDevice_getInfrastructure(&infra)`.
    deviceGetInfrastructure: fn(*mut P);
    /// `QnnDevice_create(log, config, &device)`.
    deviceCreate: fn(H, *const *const DeviceConfig, *mut H);
    /// `QnnDevice_setConfig(device, config)`.
    deviceSetConfig: fn(H, *const *const DeviceConfig);
    /// `QnnDevice_getInfo(device, &info)`.
    deviceGetInfo: fn(H, *mut *const PlatformInfo);
    /// `QnnDevice_free(device)`.
    deviceFree: fn(H);
    /// `QnnSignal_create(backend, config, &signal)`.
    signalCreate: fn(H, *const CP, *mut H);
    /// `QnnSignal_setConfig(signal, config)`.
    signalSetConfig: fn(H, *const CP);
    /// `QnnSignal_trigger(signal)`.
    signalTrigger: fn(H);
    /// `QnnSignal_free(signal)`.
    signalFree: fn(H);
    /// `QnnError_getMessage(error, &message)`.
    errorGetMessage: fn(ErrorHandle, *mut *const c_char);
    /// `QnnError_getVerboseMessage(error, &message)`.
    errorGetVerboseMessage: fn(ErrorHandle, *mut *const c_char);
    /// `QnnError_freeVerboseMessage(message)`.
    errorFreeVerboseMessage: fn(*const c_char);
    /// `QnnGraph_prepareExecutionEnvironment(graph, envs, n)`.
    graphPrepareExecutionEnvironment: fn(H, *mut P, u32);
    /// `QnnGraph_releaseExecutionEnvironment(graph, envs, n)`.
    graphReleaseExecutionEnvironment: fn(H, *const CP, u32);
    /// `QnnGraph_getProperty(graph, properties)`.
    graphGetProperty: fn(H, *mut P);
    /// `QnnContext_validateBinary(backend, device, config, buffer, size)`.
    contextValidateBinary: fn(H, H, *const *const ContextConfig, CP, ContextBinarySize);
    /// `QnnContext_createFromBinaryWithSignal(..., profile, signal)`.
    contextCreateFromBinaryWithSignal: fn(H, H, *const *const ContextConfig, CP, ContextBinarySize, *mut H, H, H);
    /// `QnnContext_createFromBinaryListAsync(backend, device, params, config, signal)`.
    contextCreateFromBinaryListAsync: fn(H, H, *const CP, *const *const ContextConfig, H);
    /// `QnnTensor_updateGraphTensors(graph, tensors, n)`.
    tensorUpdateGraphTensors: fn(H, *const *const Tensor, u64);
    /// `QnnTensor_updateContextTensors(context, tensors, n)`.
    tensorUpdateContextTensors: fn(H, *const *const Tensor, u64);
    /// `QnnContext_getBinarySectionSize(context, graph, section, &size)`.
    contextGetBinarySectionSize: fn(H, H, u32, *mut ContextBinarySize);
    /// `QnnContext_getBinarySection(context, graph, section, buffer, &written, profile, signal)`.
    contextGetBinarySection: fn(H, H, u32, CP, *mut ContextBinarySize, H, H);
    /// `QnnContext_applyBinarySection(context, graph, section, buffer, profile, signal)`.
    contextApplyBinarySection: fn(H, H, u32, CP, H, H);
    /// `QnnBackend_getProperty(backend, properties)`.
    backendGetProperty: fn(H, *mut P);
    /// `QnnContext_getProperty(context, properties)`.
    contextGetProperty: fn(H, *mut P);
    /// `QnnContext_getIncrementalBinary(context, &buffer, &start, &written)`.
    contextGetIncrementalBinary: fn(H, *mut CP, *mut ContextBinarySize, *mut ContextBinarySize);
    /// `QnnContext_releaseIncrementalBinary(context, buffer, start)`.
    contextReleaseIncrementalBinary: fn(H, CP, ContextBinarySize);
    /// `QnnContext_finalize(context, profile)`.
    contextFinalize: fn(H, H);
    /// `QnnGlobalConfig_set(config)`.
    globalConfigSet: fn(*const CP);
}

/// `QnnInterface_t`: one provider record. The library's record is longer than ours when its
/// table has more slots; never copy it by value beyond this size.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Interface {
    pub backend_id: u32,
    pub provider_name: *const c_char,
    pub api_version: ApiVersion,
    pub functions: CoreFunctions,
}

/// `QnnInterface_getProviders(&providerList, &numProviders)`.
pub type GetProvidersFn = unsafe extern "C" fn(*mut *const *const Interface, *mut u32) -> R;

/// Symbol name of the core provider entry point.
pub const GET_PROVIDERS_SYMBOL: &[u8] = b"QnnInterface_getProviders\0";

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<CoreFunctions>() == 68 * 8);
    assert!(offset_of!(CoreFunctions, backendValidateOpConfig) == 7 * 8);
    assert!(offset_of!(CoreFunctions, graphExecute) == 21 * 8);
    assert!(offset_of!(CoreFunctions, tensorCreateGraphTensor) == 24 * 8);
    assert!(offset_of!(CoreFunctions, deviceCreate) == 40 * 8);
    assert!(offset_of!(CoreFunctions, errorGetMessage) == 48 * 8);
    assert!(offset_of!(CoreFunctions, globalConfigSet) == 67 * 8);
    assert!(offset_of!(Interface, provider_name) == 8);
    assert!(offset_of!(Interface, api_version) == 16);
    assert!(offset_of!(Interface, functions) == 40);
    assert!(size_of::<Interface>() == 584);
};
