//! The daemon's own footprint as Prometheus gauges for `/metrics`: live tokio tasks, open
//! file descriptors and resident memory, so a leak shows on a dashboard before it bites.

use rigdeck_core::gateway::metrics::PromText;

/// Writes the daemon's gauges (a reading Linux does not offer is left out).
pub fn write(out: &mut PromText) {
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    out.family(
        "rigdeck_daemon_tasks",
        "gauge",
        "Tasks alive in the daemon.",
    );
    out.sample("rigdeck_daemon_tasks", &[], tasks as f64);
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        out.family(
            "rigdeck_daemon_open_fds",
            "gauge",
            "File descriptors the daemon holds open.",
        );
        out.sample("rigdeck_daemon_open_fds", &[], fds.count() as f64);
    }
    if let Some(bytes) = resident_bytes() {
        out.family(
            "rigdeck_daemon_resident_bytes",
            "gauge",
            "The daemon's resident memory.",
        );
        out.sample("rigdeck_daemon_resident_bytes", &[], bytes as f64);
    }
}

/// `VmRSS` from `/proc/self/status`.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}
