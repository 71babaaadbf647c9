//! NVML return codes under short names, and the static strings `nvmlErrorString` hands out.
//!
//! The numeric values come from nvml-wrapper-sys so they are exactly what nvml-wrapper maps
//! back into `NvmlError` variants.

use std::ffi::CStr;

use nvml_wrapper_sys::bindings as sys;

pub use sys::nvmlReturn_t;

pub const SUCCESS: nvmlReturn_t = sys::nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: nvmlReturn_t = sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: nvmlReturn_t = sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: nvmlReturn_t = sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NOT_FOUND: nvmlReturn_t = sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: nvmlReturn_t = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const GPU_IS_LOST: nvmlReturn_t = sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub const ARGUMENT_VERSION_MISMATCH: nvmlReturn_t =
    sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: nvmlReturn_t = sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// Text for a return code, worded like libnvidia-ml's. The strings are `'static` because
/// NVML's contract is that callers never free what `nvmlErrorString` returns.
pub fn error_string(code: nvmlReturn_t) -> &'static CStr {
    match code {
        sys::nvmlReturn_enum_NVML_SUCCESS => c"Success",
        sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED => c"Uninitialized",
        sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => c"Not Supported",
        sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => c"Insufficient Permissions",
        sys::nvmlReturn_enum_NVML_ERROR_ALREADY_INITIALIZED => c"Already Initialized",
        sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND => c"Not Found",
        sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER => c"Insufficient External Power",
        sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT => c"Timeout",
        sys::nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE => c"Interrupt request issue",
        sys::nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND => c"NVML Shared Library Not Found",
        sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND => c"Function Not Found",
        sys::nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM => c"Corrupted infoROM",
        sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => c"GPU is lost",
        sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED => c"GPU requires restart",
        sys::nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM => {
            c"The operating system has blocked the request"
        }
        sys::nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH => {
            c"RM has detected an NVML/RM version mismatch"
        }
        sys::nvmlReturn_enum_NVML_ERROR_IN_USE => c"In use by another client",
        sys::nvmlReturn_enum_NVML_ERROR_MEMORY => c"Insufficient Memory",
        sys::nvmlReturn_enum_NVML_ERROR_NO_DATA => c"No data",
        sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        sys::nvmlReturn_enum_NVML_ERROR_DEPRECATED => c"Deprecated",
        sys::nvmlReturn_enum_NVML_ERROR_NOT_READY => c"Not Ready",
        sys::nvmlReturn_enum_NVML_ERROR_GPU_NOT_FOUND => c"GPU not found",
        sys::nvmlReturn_enum_NVML_ERROR_INVALID_STATE => c"Invalid state",
        _ => c"Unknown Error",
    }
}
