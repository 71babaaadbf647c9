//! The exported NVML C functions: exactly the ones nvml-wrapper 0.13 calls for Rigdeck's
//! telemetry, with NVML's argument checks and return codes.
//!
//! Every export runs inside [`guard`], so a bug here becomes NVML_ERROR_UNKNOWN instead of
//! a panic unwinding into C. Pointer arguments are null-checked (NVML answers
//! NVML_ERROR_INVALID_ARGUMENT) but otherwise trusted to be as large as the C prototype
//! says, exactly as libnvidia-ml trusts them.

// The safety contract of each function is NVML's documented C API; repeating it as a
// `# Safety` section on 35 functions would add nothing.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use nvml_wrapper_sys::bindings as sys;
use sys::{
    nvmlClockType_t, nvmlDevice_t, nvmlFieldValue_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlPciInfo_t,
    nvmlPcieUtilCounter_t, nvmlProcessInfo_t, nvmlTemperatureSensors_t, nvmlUtilization_t,
    nvmlValue_t,
};

use crate::codes::*;
use crate::rig::{parse_pci_bus_id, to_u32, Clocks, Gpu, Pcie, Scalar};
use crate::state::{self, handle_for, with_gpu, with_rig};

/// NVML's "no MIG instance" marker in `nvmlProcessInfo_t`; nvml-wrapper maps it to `None`.
const NO_INSTANCE_ID: c_uint = 0xFFFF_FFFF;

/// Keeps panics from crossing the C boundary (undefined behaviour) and folds the
/// `Result` style used inside into a return code.
fn guard(f: impl FnOnce() -> Result<(), nvmlReturn_t>) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// Writes one out-parameter after the null check NVML does.
unsafe fn put<T>(out: *mut T, value: T) -> Result<(), nvmlReturn_t> {
    if out.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    out.write(value);
    Ok(())
}

/// Copies `s` plus its NUL into a caller buffer of `len` bytes; NVML answers
/// INSUFFICIENT_SIZE rather than truncating identity strings.
unsafe fn put_c_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), nvmlReturn_t> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if bytes.len() >= len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
    buf.add(bytes.len()).write(0);
    Ok(())
}

/// An optional rig value at `now`, or NOT_SUPPORTED when the rig leaves it out.
fn value(v: Option<&Scalar>, now: f64) -> Result<c_uint, nvmlReturn_t> {
    v.map(|v| v.at_u32(now)).ok_or(NOT_SUPPORTED)
}

/// Watts in the rig, milliwatts on the wire (NVML's unit for power).
fn milliwatts(v: Option<&Scalar>, now: f64) -> Result<c_uint, nvmlReturn_t> {
    v.map(|w| to_u32(w.at(now) * 1000.0)).ok_or(NOT_SUPPORTED)
}

/// A query answered by one `unsigned int` computed from the GPU.
unsafe fn device_uint(
    device: nvmlDevice_t,
    out: *mut c_uint,
    f: impl FnOnce(&Gpu, f64) -> Result<c_uint, nvmlReturn_t>,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_gpu(device, |gpu, _, now| f(gpu, now))?;
        put(out, v)
    })
}

fn pcie_field<T>(gpu: &Gpu, f: impl FnOnce(&Pcie) -> Option<T>) -> Result<T, nvmlReturn_t> {
    gpu.pcie.as_ref().and_then(f).ok_or(NOT_SUPPORTED)
}

/// Picks the current (or max) clock for an NVML clock type. The graphics domain falls back
/// to the SM clock because on the GPUs modelled here they are the same.
fn clock(
    clocks: Option<&Clocks>,
    clock_type: nvmlClockType_t,
    max: bool,
    now: f64,
) -> Result<c_uint, nvmlReturn_t> {
    let clocks = clocks.ok_or(NOT_SUPPORTED)?;
    let pick = |cur: &Option<Scalar>, top: &Option<Scalar>| if max { *top } else { *cur };
    let chosen = match clock_type {
        sys::nvmlClockType_enum_NVML_CLOCK_GRAPHICS => {
            pick(&clocks.graphics_mhz, &clocks.graphics_max_mhz)
                .or_else(|| pick(&clocks.sm_mhz, &clocks.sm_max_mhz))
        }
        sys::nvmlClockType_enum_NVML_CLOCK_SM => pick(&clocks.sm_mhz, &clocks.sm_max_mhz),
        sys::nvmlClockType_enum_NVML_CLOCK_MEM => pick(&clocks.mem_mhz, &clocks.mem_max_mhz),
        sys::nvmlClockType_enum_NVML_CLOCK_VIDEO => pick(&clocks.video_mhz, &clocks.video_max_mhz),
        _ => return Err(INVALID_ARGUMENT),
    };
    value(chosen.as_ref(), now)
}

// ---------------------------------------------------------------------------------------
// Library lifetime and system queries
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    guard(|| match state::init() {
        SUCCESS => Ok(()),
        code => Err(code),
    })
}

/// Flags (NO_GPUS, NO_ATTACH) change nothing for a double: it never fails for lack of
/// GPUs and has nothing to attach.
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    nvmlInit_v2()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard(|| match state::shutdown() {
        SUCCESS => Ok(()),
        code => Err(code),
    })
}

/// Works without init, like NVML's; the strings are static and never freed.
#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    error_string(result).as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_rig(|rig, _| rig.driver_version.clone().ok_or(NOT_SUPPORTED))?;
        put_c_str(version, length, &v)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cuda_driver_version: *mut c_int,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_rig(|rig, _| rig.cuda_driver_version.ok_or(NOT_SUPPORTED))?;
        put(cuda_driver_version, v)
    })
}

/// The rig's name for the pid if it gives one, else the real `/proc/<pid>/comm` (so tests
/// can list their own pid), else NOT_FOUND. Cropped to `length`, as NVML documents.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        if name.is_null() || length == 0 {
            return Err(INVALID_ARGUMENT);
        }
        let from_rig = with_rig(|rig, _| {
            Ok(rig
                .gpus
                .iter()
                .flat_map(|g| g.processes.iter().flatten())
                .find(|p| p.pid == pid && p.name.is_some())
                .and_then(|p| p.name.clone()))
        })?;
        // Read /proc outside the state lock: it is the only slow-ish thing here.
        let found = from_rig.or_else(|| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|s| s.trim_end_matches('\n').to_owned())
        });
        let mut found = found.ok_or(NOT_FOUND)?;
        let max = length as usize - 1;
        if found.len() > max {
            // Crop on a char boundary so the caller still gets valid UTF-8.
            let mut cut = max;
            while !found.is_char_boundary(cut) {
                cut -= 1;
            }
            found.truncate(cut);
        }
        put_c_str(name, length, &found)
    })
}

// ---------------------------------------------------------------------------------------
// Device enumeration and identity
// ---------------------------------------------------------------------------------------

/// Lost GPUs still count: they are still on the list NVML enumerates, just unreachable.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    guard(|| {
        let n = with_rig(|rig, _| Ok(rig.gpus.len()))?;
        put(device_count, c_uint::try_from(n).unwrap_or(c_uint::MAX))
    })
}

/// A lost GPU cannot be opened (nvidia-smi: "Unable to determine the device handle for
/// GPU ...: GPU is lost"), so this answers GPU_IS_LOST for it too.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| {
        let handle = with_rig(|rig, _| {
            let gpu = rig.gpus.get(index as usize).ok_or(INVALID_ARGUMENT)?;
            if gpu.lost {
                return Err(GPU_IS_LOST);
            }
            Ok(handle_for(index as usize))
        })?;
        put(device, handle)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let i = with_gpu(device, |_, i, _| Ok(i))?;
        put(index, c_uint::try_from(i).unwrap_or(c_uint::MAX))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_gpu(device, |gpu, _, _| Ok(gpu.name.clone()))?;
        put_c_str(name, length, &v)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_gpu(device, |gpu, _, _| Ok(gpu.uuid.clone()))?;
        put_c_str(uuid, length, &v)
    })
}

/// `busId` is the rig's string verbatim (so tests compare like with like); `busIdLegacy`
/// is the 4-digit-domain form. The device id carries only NVIDIA's vendor id (0x10DE):
/// nothing in Rigdeck reads the product id.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let info = with_gpu(device, |gpu, _, _| {
            let loc = parse_pci_bus_id(&gpu.pci_bus_id).ok_or(UNKNOWN)?;
            let legacy = format!(
                "{:04X}:{:02X}:{:02X}.{:X}",
                loc.domain & 0xFFFF,
                loc.bus,
                loc.device,
                loc.function
            );
            let mut info = nvmlPciInfo_t {
                busIdLegacy: [0; 16],
                domain: loc.domain,
                bus: loc.bus,
                device: loc.device,
                pciDeviceId: 0x0000_10DE,
                pciSubSystemId: 0,
                busId: [0; 32],
            };
            copy_into(&mut info.busIdLegacy, &legacy);
            copy_into(&mut info.busId, &gpu.pci_bus_id);
            Ok(info)
        })?;
        put(pci, info)
    })
}

/// Fills a fixed C char array, always leaving a terminating NUL (the rig's bus id was
/// validated to fit, so nothing is cut in practice).
fn copy_into(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
}

// ---------------------------------------------------------------------------------------
// Memory, utilization, thermals, power
// ---------------------------------------------------------------------------------------

/// NVML checks the caller's struct version (NVML_STRUCT_VERSION(Memory, 2)) and so does
/// the double, so a caller passing the wrong layout is caught here, not in production.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    const VERSION_2: c_uint = (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);
    guard(|| {
        let (total, used) = with_gpu(device, |gpu, _, now| {
            Ok((gpu.memory_total_bytes(), gpu.memory_used_bytes(now)))
        })?;
        if memory.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        if (*memory).version != VERSION_2 {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        // No driver-reserved slice: keeps used + free == total, which tests can rely on.
        (*memory).total = total;
        (*memory).reserved = 0;
        (*memory).used = used;
        (*memory).free = total - used;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    guard(|| {
        let info = with_gpu(device, |gpu, _, now| {
            let total = gpu.memory_total_bytes();
            let used = gpu.memory_used_bytes(now);
            Ok(nvmlMemory_t {
                total,
                free: total - used,
                used,
            })
        })?;
        put(memory, info)
    })
}

/// Supported when the rig gives either figure; a missing one of the pair reads 0.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    guard(|| {
        let u = with_gpu(device, |gpu, _, now| {
            if gpu.utilization_gpu.is_none() && gpu.utilization_memory.is_none() {
                return Err(NOT_SUPPORTED);
            }
            Ok(nvmlUtilization_t {
                gpu: value(gpu.utilization_gpu.as_ref(), now).unwrap_or(0),
                memory: value(gpu.utilization_memory.as_ref(), now).unwrap_or(0),
            })
        })?;
        put(utilization, u)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor_type: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, temp, |gpu, now| {
        if sensor_type != sys::nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        value(gpu.temperature_c.as_ref(), now)
    })
}

/// A rig with `fan_pct` has one fan; a fanless card (passive data-centre module) has none
/// to report, which NVML answers as NOT_SUPPORTED.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(
    device: nvmlDevice_t,
    num_fans: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, num_fans, |gpu, _| {
        gpu.fan_pct.map(|_| 1).ok_or(NOT_SUPPORTED)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: nvmlDevice_t,
    fan: c_uint,
    speed: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, speed, |gpu, now| {
        let pct = value(gpu.fan_pct.as_ref(), now)?;
        if fan != 0 {
            return Err(INVALID_ARGUMENT);
        }
        Ok(pct)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, power, |gpu, now| {
        milliwatts(gpu.power_w.as_ref(), now)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, limit, |gpu, now| {
        milliwatts(gpu.power_limit_w.as_ref(), now)
    })
}

// ---------------------------------------------------------------------------------------
// Clocks and memory bus
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock_mhz: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, clock_mhz, |gpu, now| {
        clock(gpu.clocks.as_ref(), clock_type, false, now)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock_mhz: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, clock_mhz, |gpu, now| {
        clock(gpu.clocks.as_ref(), clock_type, true, now)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryBusWidth(
    device: nvmlDevice_t,
    bus_width: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, bus_width, |gpu, _| {
        gpu.memory_bus_width_bits.ok_or(NOT_SUPPORTED)
    })
}

// ---------------------------------------------------------------------------------------
// PCIe link
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: nvmlDevice_t,
    curr_link_gen: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, curr_link_gen, |gpu, _| pcie_field(gpu, |p| p.gen))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    device: nvmlDevice_t,
    max_link_gen: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, max_link_gen, |gpu, _| {
        pcie_field(gpu, |p| p.max_gen)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: nvmlDevice_t,
    curr_link_width: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, curr_link_width, |gpu, _| {
        pcie_field(gpu, |p| p.width)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    device: nvmlDevice_t,
    max_link_width: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, max_link_width, |gpu, _| {
        pcie_field(gpu, |p| p.max_width)
    })
}

/// KB/s over NVML's 20 ms window; counter 0 is TX, 1 is RX.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value_kbps: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, value_kbps, |gpu, now| {
        let which = match counter {
            sys::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => |p: &Pcie| p.tx_kbps,
            sys::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => |p: &Pcie| p.rx_kbps,
            _ => return Err(INVALID_ARGUMENT),
        };
        pcie_field(gpu, which).map(|v| v.at_u32(now))
    })
}

// ---------------------------------------------------------------------------------------
// Throttling, capabilities, topology
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    clocks_throttle_reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    guard(|| {
        let mask = with_gpu(device, |gpu, _, _| gpu.throttle_mask().ok_or(NOT_SUPPORTED))?;
        put(clocks_throttle_reasons, mask)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    guard(|| {
        let [ma, mi] = with_gpu(device, |gpu, _, _| {
            gpu.compute_capability.ok_or(NOT_SUPPORTED)
        })?;
        if major.is_null() || minor.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        put(major, ma)?;
        put(minor, mi)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(
    device: nvmlDevice_t,
    node: *mut c_uint,
) -> nvmlReturn_t {
    device_uint(device, node, |gpu, _| gpu.numa_node.ok_or(NOT_SUPPORTED))
}

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

/// NVML's two-call protocol: with `*info_count` too small (0 and a null buffer is the
/// "how many?" query nvml-wrapper makes) the answer is INSUFFICIENT_SIZE with the needed
/// count set; with no processes it is SUCCESS and 0. nvml-wrapper then calls again with
/// headroom and truncates to the count written back.
unsafe fn put_processes(
    list: &[nvmlProcessInfo_t],
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> Result<(), nvmlReturn_t> {
    if info_count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let needed = c_uint::try_from(list.len()).map_err(|_| UNKNOWN)?;
    let capacity = *info_count;
    *info_count = needed;
    if needed == 0 {
        return Ok(());
    }
    if capacity < needed {
        return Err(INSUFFICIENT_SIZE);
    }
    if infos.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    ptr::copy_nonoverlapping(list.as_ptr(), infos, list.len());
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let list = with_gpu(device, |gpu, _, now| {
            let processes = gpu.processes.as_ref().ok_or(NOT_SUPPORTED)?;
            Ok(processes
                .iter()
                .map(|p| nvmlProcessInfo_t {
                    pid: p.pid,
                    usedGpuMemory: crate::rig::mib_to_bytes(p.used_mib.at(now)),
                    gpuInstanceId: NO_INSTANCE_ID,
                    computeInstanceId: NO_INSTANCE_ID,
                })
                .collect::<Vec<_>>())
        })?;
        put_processes(&list, info_count, infos)
    })
}

/// LLM rigs are headless compute boxes: the double never reports graphics contexts.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        with_gpu(device, |_, _, _| Ok(()))?;
        put_processes(&[], info_count, infos)
    })
}

// ---------------------------------------------------------------------------------------
// Field values
// ---------------------------------------------------------------------------------------

/// Only NVML_FI_DEV_MEMORY_TEMP is modelled; every other field id gets a per-field
/// NOT_SUPPORTED while the call as a whole succeeds, as on real hardware.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    values_count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    guard(|| {
        let memory_temp = with_gpu(device, |gpu, _, now| {
            Ok(gpu.memory_temperature_c.map(|t| t.at_u32(now)))
        })?;
        let count = usize::try_from(values_count).map_err(|_| INVALID_ARGUMENT)?;
        if count == 0 || values.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let now_us = (state::now_s() * 1e6) as i64;
        for field in std::slice::from_raw_parts_mut(values, count) {
            field.timestamp = now_us;
            field.latencyUsec = 0;
            match (field.fieldId, memory_temp) {
                (sys::field_id::NVML_FI_DEV_MEMORY_TEMP, Some(celsius)) => {
                    field.valueType = sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
                    // Clear all 8 bytes first so no stale bytes sit beside the u32.
                    field.value = nvmlValue_t { ullVal: 0 };
                    field.value.uiVal = celsius;
                    field.nvmlReturn = SUCCESS;
                }
                _ => field.nvmlReturn = NOT_SUPPORTED,
            }
        }
        Ok(())
    })
}
