//! Drives `libnvml_double.so` through nvml-wrapper's public API, loaded the way production
//! code loads it (`Nvml::builder().lib_path(..).init()`), against every rig fixture and
//! through live rewrites of a rig file.
//!
//! NVML state and environment variables are process-global, so every test that touches the
//! library takes `SERIAL` and drops its `Nvml` before releasing it. Checks of what the double
//! prints to stderr run in a child process (this same test binary) so the output can be read.

use std::ffi::{c_char, c_uint, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_MEMORY_TEMP;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings as sys;
use serde_json::{json, Value};

const RIG_ENV: &str = "RIGDECK_NVML_DOUBLE_RIG";
const LIB_ENV: &str = "RIGDECK_NVML_LIBRARY";
/// Set in the child process to say which stderr scenario to run.
const CHILD_ENV: &str = "RIGDECK_NVML_DOUBLE_TEST_CHILD";
const MIB: u64 = 1024 * 1024;
/// Comfortably past the double's 100 ms re-check interval.
const RECHECK_WAIT: Duration = Duration::from_millis(150);

static SERIAL: Mutex<()> = Mutex::new(());

/// A failed test must not poison the lock for the others.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `RIGDECK_NVML_LIBRARY` if set, else the cdylib cargo built for this test run. `cargo test`
/// rebuilds `<target>/debug/deps/libnvml_double.so` (the rlib crate type makes it build the
/// lib first) but only `cargo build` copies it up to `<target>/debug/`, so `deps/` is
/// looked at first and the up-level copy, possibly stale, only as a fallback.
fn library() -> PathBuf {
    if let Some(p) = std::env::var_os(LIB_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let file = format!(
        "{}nvml_double{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let exe = std::env::current_exe().expect("path of the test executable");
    let deps = exe.parent();
    let candidates = [deps, deps.and_then(Path::parent)];
    let found = candidates
        .into_iter()
        .flatten()
        .map(|dir| dir.join(&file))
        .find(|path| path.is_file());
    match found {
        Some(path) => path,
        None => panic!(
            "{file} not found next to {}; run `cargo build -p rigdeck-nvml-double` first \
             (or set {LIB_ENV} to its path)",
            exe.display()
        ),
    }
}

/// This package's folder, as cargo says when it runs the test (a test binary built from another
/// checkout sharing the target folder would otherwise carry that checkout's path).
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

fn fixture(name: &str) -> PathBuf {
    manifest_dir().join("../../tests/fixtures/rigs").join(name)
}

/// Points the double at `rig` and initializes NVML through it, as production does.
fn open(rig: &Path) -> Result<Nvml, NvmlError> {
    std::env::set_var(RIG_ENV, rig);
    let lib = library();
    Nvml::builder().lib_path(lib.as_os_str()).init()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("fixture readable");
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(
        path,
        serde_json::to_vec_pretty(value).expect("serializable"),
    )
    .expect("rig written");
}

// ---------------------------------------------------------------------------------------
// Comparing what NVML answers with what the rig file says
// ---------------------------------------------------------------------------------------

/// The range a rig value can take, times `scale`: a point for a number, [min, max] for a wave.
fn range(v: &Value, scale: f64) -> (f64, f64) {
    if let Some(n) = v.as_f64() {
        return (n * scale, n * scale);
    }
    let w = &v["wave"];
    let (min, max) = (w["min"].as_f64(), w["max"].as_f64());
    match (min, max) {
        (Some(min), Some(max)) => (min * scale, max * scale),
        _ => panic!("not a number or wave: {v}"),
    }
}

fn assert_in(got: f64, v: &Value, scale: f64, what: &str) {
    let (lo, hi) = range(v, scale);
    // Rounding to whole units may land half a unit outside the exact range.
    assert!(
        got >= (lo - 0.5).floor() && got <= (hi + 0.5).ceil(),
        "{what}: {got} not in [{lo}, {hi}] (rig value {v})"
    );
}

/// A rig field present means the query succeeds and `check` judges the value; absent means
/// `NotSupported`.
fn present_or_not_supported<T: std::fmt::Debug>(
    res: Result<T, NvmlError>,
    field: &Value,
    what: &str,
    check: impl FnOnce(T, &Value),
) {
    if field.is_null() {
        assert!(
            matches!(res, Err(NvmlError::NotSupported)),
            "{what}: rig leaves it out, expected NotSupported, got {res:?}"
        );
    } else {
        match res {
            Ok(v) => check(v, field),
            Err(e) => panic!("{what}: expected a value for {field}, got {e:?}"),
        }
    }
}

fn throttle_bit(name: &str) -> ThrottleReasons {
    match name {
        "gpu_idle" => ThrottleReasons::GPU_IDLE,
        "applications_clocks_setting" => ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
        "sw_power_cap" => ThrottleReasons::SW_POWER_CAP,
        "hw_slowdown" => ThrottleReasons::HW_SLOWDOWN,
        "sync_boost" => ThrottleReasons::SYNC_BOOST,
        "sw_thermal_slowdown" => ThrottleReasons::SW_THERMAL_SLOWDOWN,
        "hw_thermal_slowdown" => ThrottleReasons::HW_THERMAL_SLOWDOWN,
        "hw_power_brake_slowdown" => ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
        "display_clock_setting" => ThrottleReasons::DISPLAY_CLOCK_SETTING,
        other => panic!("unknown throttle reason in fixture: {other}"),
    }
}

/// Checks every query Rigdeck makes on every GPU against the rig file's JSON.
fn check_against_rig(nvml: &Nvml, rig: &Value, label: &str) {
    match rig["driver_version"].as_str() {
        Some(v) => assert_eq!(nvml.sys_driver_version().expect("driver version"), v),
        None => assert!(matches!(
            nvml.sys_driver_version(),
            Err(NvmlError::NotSupported)
        )),
    }
    present_or_not_supported(
        nvml.sys_cuda_driver_version(),
        &rig["cuda_driver_version"],
        "cuda driver version",
        |got, want| assert_eq!(Some(i64::from(got)), want.as_i64()),
    );

    let gpus = rig["gpus"].as_array().expect("gpus list");
    assert_eq!(
        nvml.device_count().expect("device count") as usize,
        gpus.len(),
        "{label}: device count"
    );
    for (i, g) in gpus.iter().enumerate() {
        let at = |what: &str| format!("{label} gpu {i} {what}");
        let dev = nvml
            .device_by_index(i as u32)
            .unwrap_or_else(|e| panic!("{}: {e:?}", at("handle")));
        check_gpu(nvml, &dev, i, g, &at);
    }
}

fn check_gpu(nvml: &Nvml, dev: &Device, i: usize, g: &Value, at: &dyn Fn(&str) -> String) {
    assert_eq!(dev.index().expect("index") as usize, i, "{}", at("index"));
    assert_eq!(dev.name().expect("name"), g["name"].as_str().expect("name"));
    assert_eq!(dev.uuid().expect("uuid"), g["uuid"].as_str().expect("uuid"));
    let pci = dev.pci_info().expect("pci info");
    assert_eq!(pci.bus_id, g["pci_bus_id"].as_str().expect("bus id"));

    // Memory: total exact; used as given, or the processes' sum; free is the rest.
    let mem = dev.memory_info().expect("memory info");
    let total = g["memory_total_mib"].as_u64().expect("total") * MIB;
    assert_eq!(mem.total, total, "{}", at("memory total"));
    assert_eq!(mem.used + mem.free, total, "{}", at("used + free"));
    if g["memory_used_mib"].is_null() {
        let (mut lo, mut hi) = (0.0, 0.0);
        for p in g["processes"].as_array().into_iter().flatten() {
            let (a, b) = range(&p["used_mib"], MIB as f64);
            lo += a;
            hi += b;
        }
        let sum = json!({"wave": {"min": lo, "max": hi.min(total as f64), "period_s": 1}});
        assert_in(mem.used as f64, &sum, 1.0, &at("memory used (sum)"));
    } else {
        assert_in(
            mem.used as f64,
            &g["memory_used_mib"],
            MIB as f64,
            &at("memory used"),
        );
    }

    if g["utilization_gpu"].is_null() && g["utilization_memory"].is_null() {
        assert!(matches!(
            dev.utilization_rates(),
            Err(NvmlError::NotSupported)
        ));
    } else {
        let u = dev.utilization_rates().expect("utilization");
        if !g["utilization_gpu"].is_null() {
            assert_in(
                f64::from(u.gpu),
                &g["utilization_gpu"],
                1.0,
                &at("util gpu"),
            );
        }
        if !g["utilization_memory"].is_null() {
            assert_in(
                f64::from(u.memory),
                &g["utilization_memory"],
                1.0,
                &at("util mem"),
            );
        }
    }

    let scalar = |what: &'static str, scale: f64| {
        move |got: u32, want: &Value| assert_in(f64::from(got), want, scale, what)
    };
    present_or_not_supported(
        dev.temperature(TemperatureSensor::Gpu),
        &g["temperature_c"],
        &at("temperature"),
        scalar("temperature", 1.0),
    );
    present_or_not_supported(dev.num_fans(), &g["fan_pct"], &at("fans"), |n, _| {
        assert_eq!(n, 1)
    });
    present_or_not_supported(
        dev.fan_speed(0),
        &g["fan_pct"],
        &at("fan speed"),
        scalar("fan", 1.0),
    );
    present_or_not_supported(
        dev.power_usage(),
        &g["power_w"],
        &at("power"),
        scalar("power mW", 1000.0),
    );
    present_or_not_supported(
        dev.enforced_power_limit(),
        &g["power_limit_w"],
        &at("power limit"),
        scalar("power limit mW", 1000.0),
    );

    let clocks = &g["clocks"];
    present_or_not_supported(
        dev.clock_info(Clock::SM),
        &clocks["sm_mhz"],
        &at("sm clock"),
        scalar("sm", 1.0),
    );
    present_or_not_supported(
        dev.max_clock_info(Clock::SM),
        &clocks["sm_max_mhz"],
        &at("sm max"),
        scalar("sm max", 1.0),
    );
    present_or_not_supported(
        dev.clock_info(Clock::Memory),
        &clocks["mem_mhz"],
        &at("mem clock"),
        scalar("mem", 1.0),
    );
    present_or_not_supported(
        dev.max_clock_info(Clock::Memory),
        &clocks["mem_max_mhz"],
        &at("mem max"),
        scalar("mem max", 1.0),
    );
    if clocks["graphics_mhz"].is_null() {
        // The graphics domain answers the SM clock when the rig gives no graphics clock.
        present_or_not_supported(
            dev.clock_info(Clock::Graphics),
            &clocks["sm_mhz"],
            &at("graphics clock"),
            scalar("graphics", 1.0),
        );
    }
    present_or_not_supported(
        dev.memory_bus_width(),
        &g["memory_bus_width_bits"],
        &at("bus width"),
        scalar("bus width", 1.0),
    );

    let pcie = &g["pcie"];
    present_or_not_supported(
        dev.current_pcie_link_gen(),
        &pcie["gen"],
        &at("pcie gen"),
        scalar("gen", 1.0),
    );
    present_or_not_supported(
        dev.max_pcie_link_gen(),
        &pcie["max_gen"],
        &at("pcie max gen"),
        scalar("max gen", 1.0),
    );
    present_or_not_supported(
        dev.current_pcie_link_width(),
        &pcie["width"],
        &at("pcie width"),
        scalar("width", 1.0),
    );
    present_or_not_supported(
        dev.max_pcie_link_width(),
        &pcie["max_width"],
        &at("pcie max width"),
        scalar("max width", 1.0),
    );
    present_or_not_supported(
        dev.pcie_throughput(PcieUtilCounter::Send),
        &pcie["tx_kbps"],
        &at("pcie tx"),
        scalar("tx", 1.0),
    );
    present_or_not_supported(
        dev.pcie_throughput(PcieUtilCounter::Receive),
        &pcie["rx_kbps"],
        &at("pcie rx"),
        scalar("rx", 1.0),
    );

    present_or_not_supported(
        dev.current_throttle_reasons(),
        &g["throttle_reasons"],
        &at("throttle reasons"),
        |got, want| {
            let expected = want
                .as_array()
                .expect("list")
                .iter()
                .map(|n| throttle_bit(n.as_str().expect("name")))
                .fold(ThrottleReasons::empty(), |a, b| a | b);
            assert_eq!(got, expected);
        },
    );
    present_or_not_supported(
        dev.cuda_compute_capability(),
        &g["compute_capability"],
        &at("compute capability"),
        |got, want| assert_eq!(json!([got.major, got.minor]), *want),
    );
    present_or_not_supported(
        dev.numa_node_id(),
        &g["numa_node"],
        &at("numa node"),
        scalar("numa", 1.0),
    );

    // Memory temperature only exists as an NVML field value; its absence is a per-field
    // NotSupported inside a successful call.
    let fields = dev
        .field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP), FieldId(83)])
        .expect("field values call");
    assert_eq!(fields.len(), 2);
    let sample = fields[0].as_ref().expect("memory temp sample");
    assert_eq!(sample.field.0, NVML_FI_DEV_MEMORY_TEMP);
    match (&sample.value, &g["memory_temperature_c"]) {
        (Ok(SampleValue::U32(t)), want) if !want.is_null() => {
            assert_in(f64::from(*t), want, 1.0, &at("memory temperature"))
        }
        (Err(NvmlError::NotSupported), want) if want.is_null() => {}
        (got, want) => panic!("{}: got {got:?}, rig says {want}", at("memory temp")),
    }
    let other = fields[1].as_ref().expect("energy sample");
    assert!(matches!(other.value, Err(NvmlError::NotSupported)));

    // Processes: same pids in the same order, VRAM within the rig's range, names answered.
    present_or_not_supported(
        dev.running_compute_processes(),
        &g["processes"],
        &at("processes"),
        |got, want| {
            let want = want.as_array().expect("process list");
            assert_eq!(got.len(), want.len(), "{}", at("process count"));
            for (p, w) in got.iter().zip(want) {
                assert_eq!(u64::from(p.pid), w["pid"].as_u64().expect("pid"));
                match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => {
                        assert_in(bytes as f64, &w["used_mib"], MIB as f64, &at("proc vram"))
                    }
                    UsedGpuMemory::Unavailable => panic!("{}: used unavailable", at("proc")),
                }
                assert_eq!(p.gpu_instance_id, None);
                if let Some(name) = w["name"].as_str() {
                    assert_eq!(nvml.sys_process_name(p.pid, 64).expect("name"), name);
                }
            }
        },
    );
    if let Some(want) = g["processes"].as_array() {
        assert_eq!(
            dev.running_compute_processes_count().expect("count") as usize,
            want.len()
        );
    }
    assert!(dev
        .running_graphics_processes()
        .expect("graphics processes")
        .is_empty());
}

// ---------------------------------------------------------------------------------------
// The fixtures
// ---------------------------------------------------------------------------------------

/// The headline facts each fixture must carry, straight from the rig descriptions.
struct Expect {
    file: &'static str,
    names: &'static [&'static str],
    memory_mib: u64,
    compute_capability: (i32, i32),
    bus_width: u32,
    mem_max_mhz: &'static [u32],
    power_limit_w: u32,
    gen: u32,
    max_gen: u32,
    widths: &'static [u32],
    max_width: u32,
    numa: Option<&'static [u32]>,
}

const RTX3090: &str = "NVIDIA GeForce RTX 3090";
const PRO6000: &str = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition";
const GH200: &str = "NVIDIA GH200 480GB";
const RTX5060TI: &str = "NVIDIA GeForce RTX 5060 Ti";

const EXPECTED: &[Expect] = &[
    Expect {
        file: "4x3090.json",
        names: &["NVIDIA GeForce RTX 3090 Ti", RTX3090, RTX3090, RTX3090],
        memory_mib: 24576,
        compute_capability: (8, 6),
        bus_width: 384,
        mem_max_mhz: &[10501, 9751, 9751, 9751],
        power_limit_w: 200,
        gen: 4,
        max_gen: 4,
        widths: &[16, 8, 8, 1],
        max_width: 16,
        numa: Some(&[0, 0, 0, 0]),
    },
    Expect {
        file: "4xpro6000.json",
        names: &[PRO6000, PRO6000, PRO6000, PRO6000],
        memory_mib: 97887,
        compute_capability: (12, 0),
        bus_width: 512,
        mem_max_mhz: &[14001, 14001, 14001, 14001],
        power_limit_w: 600,
        gen: 3,
        max_gen: 5,
        widths: &[8, 16, 8, 16],
        max_width: 16,
        numa: Some(&[0, 0, 0, 0]),
    },
    Expect {
        file: "2xgh200.json",
        names: &[GH200, GH200],
        memory_mib: 97871,
        compute_capability: (9, 0),
        bus_width: 5120,
        mem_max_mhz: &[2619, 2619],
        power_limit_w: 900,
        gen: 5,
        max_gen: 5,
        widths: &[16, 16],
        max_width: 16,
        numa: Some(&[0, 1]),
    },
    Expect {
        file: "2x5060ti.json",
        names: &[RTX5060TI, RTX5060TI],
        memory_mib: 16311,
        compute_capability: (12, 0),
        bus_width: 128,
        mem_max_mhz: &[14001, 14001],
        power_limit_w: 180,
        gen: 5,
        max_gen: 5,
        widths: &[8, 8],
        max_width: 8,
        numa: None,
    },
    Expect {
        file: "8gpu-bench.json",
        names: &[RTX3090; 8],
        memory_mib: 24576,
        compute_capability: (8, 6),
        bus_width: 384,
        mem_max_mhz: &[9751; 8],
        power_limit_w: 350,
        gen: 4,
        max_gen: 4,
        widths: &[16; 8],
        max_width: 16,
        numa: Some(&[0, 0, 0, 0, 1, 1, 1, 1]),
    },
];

fn check_headline(nvml: &Nvml, e: &Expect) {
    assert_eq!(nvml.device_count().expect("count") as usize, e.names.len());
    assert_eq!(nvml.sys_driver_version().expect("driver"), "580.105.08");
    assert_eq!(nvml.sys_cuda_driver_version().expect("cuda"), 13000);
    let mut uuids = Vec::new();
    for (i, name) in e.names.iter().enumerate() {
        let what = format!("{} gpu {i}", e.file);
        let d = nvml.device_by_index(i as u32).expect("handle");
        assert_eq!(d.name().expect("name"), *name, "{what}");
        uuids.push(d.uuid().expect("uuid"));
        assert_eq!(d.memory_info().expect("mem").total, e.memory_mib * MIB);
        let cc = d.cuda_compute_capability().expect("cc");
        assert_eq!((cc.major, cc.minor), e.compute_capability, "{what}");
        assert_eq!(d.memory_bus_width().expect("bus width"), e.bus_width);
        assert_eq!(
            d.max_clock_info(Clock::Memory).expect("mem max"),
            e.mem_max_mhz[i],
            "{what}"
        );
        assert_eq!(
            d.enforced_power_limit().expect("limit"),
            e.power_limit_w * 1000
        );
        assert_eq!(d.current_pcie_link_gen().expect("gen"), e.gen, "{what}");
        assert_eq!(d.max_pcie_link_gen().expect("max gen"), e.max_gen, "{what}");
        assert_eq!(
            d.current_pcie_link_width().expect("width"),
            e.widths[i],
            "{what}"
        );
        assert_eq!(d.max_pcie_link_width().expect("max width"), e.max_width);
        match e.numa {
            Some(nodes) => assert_eq!(d.numa_node_id().expect("numa"), nodes[i], "{what}"),
            None => assert!(matches!(d.numa_node_id(), Err(NvmlError::NotSupported))),
        }
    }
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), e.names.len(), "{}: UUIDs distinct", e.file);
}

#[test]
fn every_fixture_reads_back_through_nvml_wrapper() {
    let _serial = serial();
    for e in EXPECTED {
        let path = fixture(e.file);
        let nvml = open(&path).unwrap_or_else(|err| panic!("{}: init failed: {err:?}", e.file));
        check_headline(&nvml, e);
        check_against_rig(&nvml, &read_json(&path), e.file);
        nvml.shutdown().expect("shutdown");
    }
}

#[test]
fn fixtures_use_waves_so_live_charts_move() {
    for e in EXPECTED {
        let rig = read_json(&fixture(e.file));
        let gpus = rig["gpus"].as_array().expect("gpus");
        let has_wave = |g: &Value, key: &str| g[key].get("wave").is_some();
        assert!(
            gpus.iter().any(|g| has_wave(g, "utilization_gpu")),
            "{}: no utilization wave",
            e.file
        );
        assert!(gpus.iter().any(|g| has_wave(g, "temperature_c")));
        assert!(gpus.iter().any(|g| has_wave(g, "power_w")));
        let busy = gpus
            .iter()
            .flat_map(|g| g["processes"].as_array().into_iter().flatten())
            .count();
        assert!(busy >= 1, "{}: no process holds VRAM", e.file);
        if e.file == "8gpu-bench.json" {
            for key in ["utilization_gpu", "temperature_c", "power_w", "fan_pct"] {
                assert!(gpus.iter().all(|g| has_wave(g, key)), "bench: {key}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Optional fields, live rewrites, NVML protocol details
// ---------------------------------------------------------------------------------------

fn minimal_gpu(i: u32) -> Value {
    json!({
        "name": "NVIDIA Test GPU",
        "uuid": format!("GPU-00000000-0000-4000-8000-00000000000{i}"),
        "pci_bus_id": format!("00000000:0{i}:00.0"),
        "memory_total_mib": 8192
    })
}

#[test]
fn absent_fields_answer_not_supported() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bare.json");
    let rig = json!({"gpus": [minimal_gpu(1)]});
    write_json(&path, &rig);

    let nvml = open(&path).expect("init");
    // The generic check asserts NotSupported for everything the rig leaves out.
    check_against_rig(&nvml, &rig, "bare");
    let d = nvml.device_by_index(0).expect("handle");
    assert!(matches!(
        d.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d.running_compute_processes(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d.current_throttle_reasons(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d.clock_info(Clock::Video),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(d.memory_info().expect("mem").used, 0);
    assert!(matches!(
        nvml.sys_driver_version(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        nvml.device_by_index(1),
        Err(NvmlError::InvalidArg)
    ));
}

/// The example GPU from the rig format description, all values fixed and pairwise
/// different, so a swapped pair (TX/RX, SM/memory clock, GPU/memory utilization) shows.
#[test]
fn example_rig_answers_exact_values() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("example.json");
    let rig = json!({
        "driver_version": "580.105.08",
        "cuda_driver_version": 13000,
        "gpus": [{
            "name": "NVIDIA GeForce RTX 3090",
            "uuid": "GPU-5f0c1a3e-0000-4000-8000-000000000001",
            "pci_bus_id": "00000000:01:00.0",
            "memory_total_mib": 24576,
            "memory_used_mib": 1200,
            "utilization_gpu": 35,
            "utilization_memory": 20,
            "temperature_c": 55,
            "memory_temperature_c": 70,
            "fan_pct": 40,
            "power_w": 180,
            "power_limit_w": 200,
            "clocks": {"sm_mhz": 1800, "sm_max_mhz": 2100, "mem_mhz": 9751, "mem_max_mhz": 9752},
            "memory_bus_width_bits": 384,
            "pcie": {"gen": 3, "max_gen": 4, "width": 1, "max_width": 16,
                     "tx_kbps": 1000, "rx_kbps": 2000},
            "throttle_reasons": ["sw_power_cap", "hw_slowdown"],
            "compute_capability": [8, 6],
            "numa_node": 0,
            "processes": [{"pid": 1234, "used_mib": 1000, "name": "llama-server"}],
            "lost": false
        }]
    });
    write_json(&path, &rig);
    let nvml = open(&path).expect("init");
    let d = nvml.device_by_index(0).expect("handle");

    let pci = d.pci_info().expect("pci");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 1, 0));
    let mem = d.memory_info().expect("mem");
    assert_eq!((mem.used, mem.free), (1200 * MIB, (24576 - 1200) * MIB));
    let u = d.utilization_rates().expect("util");
    assert_eq!((u.gpu, u.memory), (35, 20));
    assert_eq!(d.temperature(TemperatureSensor::Gpu).expect("temp"), 55);
    assert_eq!(d.fan_speed(0).expect("fan"), 40);
    assert!(matches!(d.fan_speed(1), Err(NvmlError::InvalidArg)));
    assert_eq!(d.power_usage().expect("power"), 180_000);
    assert_eq!(d.enforced_power_limit().expect("limit"), 200_000);
    assert_eq!(d.clock_info(Clock::SM).expect("sm"), 1800);
    assert_eq!(d.clock_info(Clock::Graphics).expect("graphics"), 1800);
    assert_eq!(d.clock_info(Clock::Memory).expect("mem clock"), 9751);
    assert_eq!(d.max_clock_info(Clock::SM).expect("sm max"), 2100);
    assert_eq!(d.max_clock_info(Clock::Memory).expect("mem max"), 9752);
    assert!(matches!(
        d.clock_info(Clock::Video),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(d.current_pcie_link_gen().expect("gen"), 3);
    assert_eq!(d.max_pcie_link_gen().expect("max gen"), 4);
    assert_eq!(d.current_pcie_link_width().expect("width"), 1);
    assert_eq!(d.max_pcie_link_width().expect("max width"), 16);
    assert_eq!(d.pcie_throughput(PcieUtilCounter::Send).expect("tx"), 1000);
    assert_eq!(
        d.pcie_throughput(PcieUtilCounter::Receive).expect("rx"),
        2000
    );
    assert_eq!(
        d.current_throttle_reasons().expect("throttle"),
        ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_SLOWDOWN
    );
    let fields = d
        .field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)])
        .expect("fields");
    match &fields[0] {
        Ok(sample) => assert!(matches!(sample.value, Ok(SampleValue::U32(70)))),
        Err(e) => panic!("memory temp sample: {e:?}"),
    }
    let procs = d.running_compute_processes().expect("procs");
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, 1234);
    assert_eq!(procs[0].used_gpu_memory, UsedGpuMemory::Used(1000 * MIB));
    assert_eq!(
        nvml.sys_process_name(1234, 64).expect("name"),
        "llama-server"
    );
    assert_eq!(nvml.sys_process_name(1234, 6).expect("cropped"), "llama");
}

#[test]
fn rewriting_the_rig_shows_up_on_the_next_query() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("live.json");
    let mut rig = json!({
        "driver_version": "580.105.08",
        "gpus": [minimal_gpu(1), minimal_gpu(2)]
    });
    rig["gpus"][0]["pcie"] = json!({"gen": 4, "max_gen": 4, "width": 16, "max_width": 16});
    rig["gpus"][0]["temperature_c"] = json!(50);
    rig["gpus"][0]["processes"] = json!([
        {"pid": 1001, "used_mib": 1000, "name": "llama-server"},
        {"pid": 1002, "used_mib": 500, "name": "whisper-server"}
    ]);
    write_json(&path, &rig);

    let nvml = open(&path).expect("init");
    let d0 = nvml.device_by_index(0).expect("gpu 0");
    let d1 = nvml.device_by_index(1).expect("gpu 1");
    assert_eq!(d0.current_pcie_link_width().expect("width"), 16);
    assert_eq!(d0.running_compute_processes().expect("procs").len(), 2);
    assert_eq!(d0.memory_info().expect("mem").used, 1500 * MIB);

    // The link drops to x1, the card heats up, whisper exits.
    rig["gpus"][0]["pcie"]["width"] = json!(1);
    rig["gpus"][0]["temperature_c"] = json!(91);
    rig["gpus"][0]["processes"] = json!([{"pid": 1001, "used_mib": 1000, "name": "llama-server"}]);
    write_json(&path, &rig);
    std::thread::sleep(RECHECK_WAIT);
    assert_eq!(d0.current_pcie_link_width().expect("width"), 1);
    assert_eq!(d0.temperature(TemperatureSensor::Gpu).expect("temp"), 91);
    let procs = d0.running_compute_processes().expect("procs");
    assert_eq!(procs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![1001]);
    assert_eq!(d0.memory_info().expect("mem").used, 1000 * MIB);

    // GPU 1 falls off the bus: old handle and new lookups say so; it still counts.
    rig["gpus"][1]["lost"] = json!(true);
    write_json(&path, &rig);
    std::thread::sleep(RECHECK_WAIT);
    assert!(matches!(d1.name(), Err(NvmlError::GpuLost)));
    assert!(matches!(d1.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        d1.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)]),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(nvml.device_by_index(1), Err(NvmlError::GpuLost)));
    assert_eq!(nvml.device_count().expect("count"), 2);
    assert_eq!(d0.name().expect("gpu 0 unaffected"), "NVIDIA Test GPU");

    // The card comes back.
    rig["gpus"][1]["lost"] = json!(false);
    write_json(&path, &rig);
    std::thread::sleep(RECHECK_WAIT);
    assert_eq!(d1.name().expect("gpu 1 back"), "NVIDIA Test GPU");
}

/// What nvml-wrapper does not expose: raw return codes for NVML's size and argument rules,
/// init reference counting, and calls before init.
#[test]
fn raw_nvml_protocol() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("raw.json");
    let mut rig = json!({"driver_version": "580.105.08", "gpus": [minimal_gpu(1)]});
    rig["gpus"][0]["power_w"] = json!(100);
    rig["gpus"][0]["processes"] = json!([
        {"pid": 11, "used_mib": 10},
        {"pid": 12, "used_mib": 20}
    ]);
    write_json(&path, &rig);
    std::env::set_var(RIG_ENV, &path);

    // SAFETY: loading our own test double, whose initializers are side-effect free.
    let lib = unsafe { sys::NvmlLib::new(library()) }.expect("dlopen the double");
    unsafe {
        let mut n: c_uint = 0;
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(&mut n),
            sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED
        );
        assert_eq!(
            lib.nvmlShutdown(),
            sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED
        );
        let text = CStr::from_ptr(lib.nvmlErrorString(sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST));
        assert_eq!(text.to_str().expect("utf-8"), "GPU is lost");

        assert_eq!(lib.nvmlInit_v2(), sys::nvmlReturn_enum_NVML_SUCCESS);
        assert_eq!(lib.nvmlInitWithFlags(0), sys::nvmlReturn_enum_NVML_SUCCESS);
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(&mut n),
            sys::nvmlReturn_enum_NVML_SUCCESS
        );
        assert_eq!(n, 1);
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(ptr::null_mut()),
            sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );

        let mut dev: sys::nvmlDevice_t = ptr::null_mut();
        assert_eq!(
            lib.nvmlDeviceGetHandleByIndex_v2(7, &mut dev),
            sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            lib.nvmlDeviceGetHandleByIndex_v2(0, &mut dev),
            sys::nvmlReturn_enum_NVML_SUCCESS
        );
        let mut mw: c_uint = 0;
        assert_eq!(
            lib.nvmlDeviceGetPowerUsage(ptr::null_mut(), &mut mw),
            sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            lib.nvmlDeviceGetPowerUsage(dev, ptr::null_mut()),
            sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            lib.nvmlDeviceGetPowerUsage(dev, &mut mw),
            sys::nvmlReturn_enum_NVML_SUCCESS
        );
        assert_eq!(mw, 100_000);

        // Buffers: too small is INSUFFICIENT_SIZE, never a truncated identity string.
        let mut small = [0 as c_char; 4];
        assert_eq!(
            lib.nvmlDeviceGetName(dev, small.as_mut_ptr(), 4),
            sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(
            lib.nvmlSystemGetDriverVersion(small.as_mut_ptr(), 4),
            sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );

        // Process list: count query, too-small buffer, then the real call.
        let mut count: c_uint = 0;
        assert_eq!(
            lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, &mut count, ptr::null_mut()),
            sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(count, 2);
        let mut infos = [std::mem::zeroed::<sys::nvmlProcessInfo_t>(); 3];
        count = 1;
        assert_eq!(
            lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, &mut count, infos.as_mut_ptr()),
            sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(count, 2);
        count = 3;
        assert_eq!(
            lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, &mut count, infos.as_mut_ptr()),
            sys::nvmlReturn_enum_NVML_SUCCESS
        );
        assert_eq!(count, 2);
        assert_eq!((infos[0].pid, infos[1].pid), (11, 12));
        assert_eq!(infos[1].usedGpuMemory, 20 * MIB);
        count = 0;
        assert_eq!(
            lib.nvmlDeviceGetGraphicsRunningProcesses_v3(dev, &mut count, ptr::null_mut()),
            sys::nvmlReturn_enum_NVML_SUCCESS
        );
        assert_eq!(count, 0);

        // Field values: an empty request is an invalid argument.
        assert_eq!(
            lib.nvmlDeviceGetFieldValues(dev, 0, ptr::null_mut()),
            sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );

        // Process names: unknown pid is NOT_FOUND; a real pid falls back to /proc.
        let mut name = [0 as c_char; 64];
        assert_eq!(
            lib.nvmlSystemGetProcessName(u32::MAX - 1, name.as_mut_ptr(), 64),
            sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND
        );
        if cfg!(target_os = "linux") {
            assert_eq!(
                lib.nvmlSystemGetProcessName(std::process::id(), name.as_mut_ptr(), 64),
                sys::nvmlReturn_enum_NVML_SUCCESS
            );
            let comm = std::fs::read_to_string("/proc/self/comm").expect("comm");
            assert_eq!(
                CStr::from_ptr(name.as_ptr()).to_str().expect("utf-8"),
                comm.trim_end()
            );
        }

        // Two inits need two shutdowns.
        assert_eq!(lib.nvmlShutdown(), sys::nvmlReturn_enum_NVML_SUCCESS);
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(&mut n),
            sys::nvmlReturn_enum_NVML_SUCCESS
        );
        assert_eq!(lib.nvmlShutdown(), sys::nvmlReturn_enum_NVML_SUCCESS);
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(&mut n),
            sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED
        );
    }
}

// ---------------------------------------------------------------------------------------
// What the double prints to stderr (checked in a child process)
// ---------------------------------------------------------------------------------------

/// Runs `child_scenario` in a copy of this test binary and returns its stderr.
fn run_child(scenario: &str, rig: Option<&Path>) -> String {
    let exe = std::env::current_exe().expect("test executable");
    let mut cmd = Command::new(exe);
    cmd.args([
        "child_scenario",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, scenario)
    .env(LIB_ENV, library());
    match rig {
        Some(rig) => cmd.env(RIG_ENV, rig),
        None => cmd.env_remove(RIG_ENV),
    };
    let out = cmd.output().expect("child ran");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child {scenario} failed:\n{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// Not a test on its own: the body of `run_child`, a no-op in a normal run.
#[test]
fn child_scenario() {
    let Ok(scenario) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lib = library();
    let init = || Nvml::builder().lib_path(lib.as_os_str()).init();
    match scenario.as_str() {
        "init-fails" => assert!(matches!(init(), Err(NvmlError::Unknown))),
        "fails-then-recovers" => {
            assert!(matches!(init(), Err(NvmlError::Unknown)));
            // A later init in the same process reads the env var afresh.
            std::env::set_var(RIG_ENV, fixture("2x5060ti.json"));
            let nvml = init().expect("good rig after a bad one");
            assert_eq!(nvml.device_count().expect("count"), 2);
        }
        "goes-bad-mid-run" => {
            let rig = PathBuf::from(std::env::var_os(RIG_ENV).expect("rig env"));
            let nvml = init().expect("init");
            let d = nvml.device_by_index(0).expect("handle");
            assert_eq!(d.current_pcie_link_width().expect("width"), 1);
            // Half-written: the last good version stays in play and is reported once.
            std::fs::write(&rig, "{ not json").expect("break rig");
            for _ in 0..3 {
                std::thread::sleep(RECHECK_WAIT);
                assert_eq!(nvml.device_count().expect("last good version"), 1);
                assert_eq!(d.current_pcie_link_width().expect("still x1"), 1);
            }
            // A second, different bad version is reported again.
            std::fs::write(&rig, "{ still not json").expect("break rig again");
            std::thread::sleep(RECHECK_WAIT);
            assert_eq!(d.name().expect("last good version"), "NVIDIA Test GPU");
        }
        other => panic!("unknown child scenario {other}"),
    }
}

#[test]
fn init_failures_say_which_file_and_where() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("rig.json");
    let text = "{\n  \"gpus\": [\n    {\"name\": \"x\" \"uuid\": \"y\"}\n]}\n";
    std::fs::write(&broken, text).expect("write");
    let err = run_child("init-fails", Some(&broken));
    let expected = format!(
        "rigdeck nvml double: rig file '{}' is not valid: \
         expected `,` or `}}` at line 3 column 18",
        broken.display()
    );
    assert!(err.contains(&expected), "stderr was: {err}");
    assert_eq!(err.matches("rigdeck nvml double").count(), 1, "{err}");

    // Parses as JSON but breaks a rule serde cannot check.
    let invalid = dir.path().join("invalid.json");
    let mut rig = json!({"gpus": [minimal_gpu(1)]});
    rig["gpus"][0]["pci_bus_id"] = json!("not-a-bus-id");
    write_json(&invalid, &rig);
    let err = run_child("init-fails", Some(&invalid));
    assert!(
        err.contains("invalid.json' is not valid: gpus[0].pci_bus_id: expected DDDDDDDD:BB:DD.F"),
        "{err}"
    );

    let err = run_child("init-fails", None);
    assert!(err.contains("RIGDECK_NVML_DOUBLE_RIG is not set"), "{err}");

    let missing = dir.path().join("nope.json");
    let err = run_child("init-fails", Some(&missing));
    assert!(err.contains("nope.json' cannot be read"), "{err}");

    let err = run_child("fails-then-recovers", Some(&missing));
    assert_eq!(err.matches("rigdeck nvml double").count(), 1, "{err}");
}

#[test]
fn a_rig_that_goes_bad_mid_run_keeps_the_last_good_version() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rig.json");
    let mut rig = json!({"gpus": [minimal_gpu(1)]});
    rig["gpus"][0]["pcie"] = json!({"width": 1});
    write_json(&path, &rig);
    let err = run_child("goes-bad-mid-run", Some(&path));
    assert_eq!(
        err.matches("still answering from the last good version")
            .count(),
        2,
        "one line per bad version; stderr was: {err}"
    );
    assert!(
        err.contains("is not valid: key must be a string at line 1 column 3"),
        "{err}"
    );
}
