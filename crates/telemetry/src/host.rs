//! Host telemetry collector: CPU, memory, load, NUMA nodes and the free space of model folders,
//! produced as one [`HostSnapshot`] per tick.
//!
//! The daemon samples at 1 Hz and must stay under 1 % of one core, so the work is split:
//! - read once at construction: CPU model, physical core count, the hybrid P/E layout, NUMA
//!   node CPU lists and which CPUs have a cpufreq driver (none of these change while running);
//! - read every tick: CPU usage (`/proc/stat`), memory (`/proc/meminfo`), load average,
//!   hostname, node `meminfo` files and `statvfs` of the file systems holding model folders;
//! - read less often: the mount list (every 30 s) and CPU frequencies (as often as their cost
//!   allows, see `FrequencySampler`).
//!
//! Nothing here panics or returns an error: what cannot be read becomes a line in
//! [`HostSnapshot::problems`] and the rest of the snapshot is still filled in.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sysinfo::{CpuRefreshKind, Disk, DiskRefreshKind, Disks, MemoryRefreshKind, System};

use crate::snapshot::{CoreLoad, CpuSnapshot, FolderSpace, HostMemory, HostSnapshot, LoadAverage};
use crate::sysfs::{self, describe_io_error, CoreKindMap, NumaTopologyNode};

/// Mounts rarely change; re-reading `/proc/mounts` (and `statvfs` of every mount) each tick
/// would be wasted work.
const DISK_LIST_MAX_AGE: Duration = Duration::from_secs(30);

/// Reading CPU frequencies may cost far more than a file read: on some ARM servers (CPPC) each
/// `scaling_cur_freq` samples hardware counters on that CPU. Frequencies are re-read only after
/// this many times the last read's cost has passed, which caps them at 0.5 % of one core.
const FREQUENCY_COST_FACTOR: u32 = 200;

/// However slow the reads, frequencies are never older than this.
const MAX_FREQUENCY_INTERVAL: Duration = Duration::from_secs(60);

/// Produces [`HostSnapshot`]s. Keep one alive between ticks: CPU usage is the difference
/// between two readings.
pub struct HostCollector {
    sysfs_root: PathBuf,
    /// `None` only where sysinfo does not support the platform (a problem says so).
    system: Option<System>,
    disks: Option<Disks>,
    disks_listed_at: Option<Instant>,
    model_folders: Vec<PathBuf>,
    facts: StaticFacts,
    frequencies: FrequencySampler,
}

/// What is read once: it does not change while the machine runs.
struct StaticFacts {
    cpu_model: Option<String>,
    physical_cores: Option<u32>,
    core_kinds: Option<CoreKindMap>,
    numa_topology: Vec<NumaTopologyNode>,
    /// Start-up problems. They are repeated in every snapshot because the values they explain
    /// stay missing.
    problems: Vec<String>,
}

impl HostCollector {
    /// `sysfs_root` is normally `/sys`; tests pass a fixture tree. CPU usage, memory, mounts and
    /// load average always come from the running machine through sysinfo.
    pub fn new(sysfs_root: PathBuf, model_folders: Vec<PathBuf>) -> Self {
        let mut problems = Vec::new();
        let system = start_system(&mut problems);
        let disks = match Disks::new() {
            Ok(disks) => Some(disks),
            Err(error) => {
                problems.push(format!(
                    "could not start sysinfo's disk list: {error}; model folder space is not shown"
                ));
                None
            }
        };
        let facts = read_static_facts(&sysfs_root, system.as_ref(), problems);
        let cpu_ids = system.as_ref().map(kernel_cpu_ids).unwrap_or_default();
        let frequencies = FrequencySampler::new(&sysfs_root, &cpu_ids);
        Self {
            sysfs_root,
            system,
            disks,
            disks_listed_at: None,
            model_folders,
            facts,
            frequencies,
        }
    }

    /// Replaces the folders whose free space is reported; takes effect on the next sample.
    pub fn set_model_folders(&mut self, folders: Vec<PathBuf>) {
        self.model_folders = folders;
    }

    /// Takes one reading. Never fails: problems are listed in the snapshot.
    pub fn sample(&mut self) -> HostSnapshot {
        let mut problems = self.facts.problems.clone();
        let (cpu, memory) = self.sample_cpu_and_memory();
        let numa = sysfs::numa_nodes_with_memory(&self.sysfs_root, &self.facts.numa_topology);
        problems.extend(numa.problems);
        let model_folders = self.sample_model_folders(&mut problems);
        HostSnapshot {
            hostname: System::host_name().ok().filter(|name| !name.is_empty()),
            cpu,
            memory,
            load_average: load_average(),
            numa_nodes: numa.value,
            model_folders,
            problems,
        }
    }

    fn sample_cpu_and_memory(&mut self) -> (CpuSnapshot, HostMemory) {
        let mut cpu = CpuSnapshot {
            model: self.facts.cpu_model.clone(),
            physical_cores: self.facts.physical_cores,
            ..CpuSnapshot::default()
        };
        let Some(system) = self.system.as_mut() else {
            return (cpu, HostMemory::default());
        };
        system.refresh_cpu_usage();
        system.refresh_memory_specifics(MemoryRefreshKind::everything());
        self.frequencies
            .refresh_if_due(&self.sysfs_root, Instant::now());

        cpu.usage_pct = sane_percent(system.global_cpu_usage());
        cpu.cores = system
            .cpus()
            .iter()
            .enumerate()
            .map(|(index, core)| {
                let id = kernel_cpu_id(index, core.name());
                CoreLoad {
                    id,
                    usage_pct: sane_percent(core.usage()),
                    frequency_mhz: self.frequencies.mhz(id),
                    kind: self
                        .facts
                        .core_kinds
                        .as_ref()
                        .and_then(|kinds| kinds.get(&id).copied()),
                }
            })
            .collect();
        cpu.logical_cores = u32::try_from(cpu.cores.len()).unwrap_or(u32::MAX);
        (cpu, memory_of(system))
    }

    fn sample_model_folders(&mut self, problems: &mut Vec<String>) -> Vec<FolderSpace> {
        if self.model_folders.is_empty() {
            return Vec::new();
        }
        let locations: Vec<FolderLocation> = self
            .model_folders
            .iter()
            .map(|folder| locate_folder(folder, problems))
            .collect();
        let relisted = self.relist_disks_if_stale();
        let Some(disks) = self.disks.as_mut() else {
            // No disk list at all: a start-up problem already says so.
            return self
                .model_folders
                .iter()
                .zip(&locations)
                .map(|(folder, location)| folder_space(folder, location, None))
                .collect();
        };
        let matches: Vec<Option<usize>> = locations
            .iter()
            .map(|location| {
                let anchor = location.anchor.as_deref()?;
                longest_mount_prefix(anchor, disks.iter().map(Disk::mount_point))
            })
            .collect();
        if !relisted {
            refresh_space(disks, &matches);
        }
        folder_spaces(&self.model_folders, &locations, &matches, disks, problems)
    }

    /// Re-reads the mount list when it is older than [`DISK_LIST_MAX_AGE`]; true if it did
    /// (which also refreshed the space of every listed disk).
    fn relist_disks_if_stale(&mut self) -> bool {
        let Some(disks) = self.disks.as_mut() else {
            return false;
        };
        let now = Instant::now();
        let stale = self
            .disks_listed_at
            .is_none_or(|listed_at| now.duration_since(listed_at) >= DISK_LIST_MAX_AGE);
        if stale {
            disks.refresh_specifics(true, DiskRefreshKind::nothing().with_storage());
            self.disks_listed_at = Some(now);
        }
        stale
    }
}

fn start_system(problems: &mut Vec<String>) -> Option<System> {
    match System::new() {
        Ok(mut system) => {
            // Fills the CPU list (with brands) and takes the first usage reading, so the first
            // sample already has a baseline to difference against.
            system.refresh_cpu_list(CpuRefreshKind::nothing().with_usage());
            Some(system)
        }
        Err(error) => {
            problems.push(format!(
                "could not start sysinfo: {error}; CPU and memory figures are not shown"
            ));
            None
        }
    }
}

fn read_static_facts(
    root: &Path,
    system: Option<&System>,
    mut problems: Vec<String>,
) -> StaticFacts {
    let cpu_model = system
        .and_then(|system| system.cpus().first())
        .map(|cpu| cpu.brand().trim().to_owned())
        .filter(|brand| !brand.is_empty());
    // sysinfo parses all of /proc/cpuinfo for this, so it is done once.
    let physical_cores = System::physical_core_count()
        .ok()
        .and_then(|count| u32::try_from(count).ok())
        .filter(|&count| count > 0);
    let hybrid = sysfs::read_hybrid_layout(root);
    problems.extend(hybrid.problems);
    let numa = sysfs::read_numa_topology(root);
    problems.extend(numa.problems);
    StaticFacts {
        cpu_model,
        physical_cores,
        core_kinds: hybrid.value,
        numa_topology: numa.value,
        problems,
    }
}

fn memory_of(system: &System) -> HostMemory {
    let total = system.total_memory();
    let available = system.available_memory();
    let swap_total = system.total_swap();
    // Computed here with saturation rather than taken from sysinfo, which subtracts unchecked.
    HostMemory {
        total_bytes: total,
        used_bytes: total.saturating_sub(available),
        available_bytes: available,
        swap_total_bytes: swap_total,
        swap_used_bytes: swap_total.saturating_sub(system.free_swap()),
    }
}

fn load_average() -> Option<LoadAverage> {
    let load = System::load_average().ok()?;
    let all_zero = load.one == 0.0 && load.five == 0.0 && load.fifteen == 0.0;
    // Only Linux (and other Unixes, which do report non-zero values) has a load average; all
    // zeros elsewhere means "not supported", not "idle".
    if all_zero && !cfg!(target_os = "linux") {
        return None;
    }
    Some(LoadAverage {
        one: load.one,
        five: load.five,
        fifteen: load.fifteen,
    })
}

fn sane_percent(value: f32) -> f32 {
    if value.is_finite() {
        value.clamp(0.0, 100.0)
    } else {
        0.0
    }
}

/// sysinfo lists CPUs in `/proc/stat` order, which skips offline CPUs, so the position is not
/// the kernel's CPU number; the name (`cpu12`) is.
fn kernel_cpu_id(index: usize, name: &str) -> u32 {
    name.strip_prefix("cpu")
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| u32::try_from(index).unwrap_or(u32::MAX))
}

fn kernel_cpu_ids(system: &System) -> Vec<u32> {
    system
        .cpus()
        .iter()
        .enumerate()
        .map(|(index, cpu)| kernel_cpu_id(index, cpu.name()))
        .collect()
}

/// Current CPU frequencies from `cpufreq`, read directly rather than through sysinfo: sysinfo
/// numbers CPUs by list position (wrong when some are offline) and falls back to parsing all
/// of `/proc/cpuinfo` once per CPU where there is no cpufreq driver, far too slow for 1 Hz on
/// a 144-CPU machine.
struct FrequencySampler {
    /// CPUs that had a cpufreq file at start-up; CPUs without one never get a frequency.
    cpus: Vec<u32>,
    latest_mhz: HashMap<u32, u64>,
    next_read: Option<Instant>,
}

impl FrequencySampler {
    fn new(root: &Path, cpu_ids: &[u32]) -> Self {
        let cpus = cpu_ids
            .iter()
            .copied()
            .filter(|&cpu| sysfs::cpu_frequency_path(root, cpu).exists())
            .collect();
        Self {
            cpus,
            latest_mhz: HashMap::new(),
            next_read: None,
        }
    }

    fn refresh_if_due(&mut self, root: &Path, now: Instant) {
        if self.cpus.is_empty() || self.next_read.is_some_and(|due| now < due) {
            return;
        }
        let started = Instant::now();
        for &cpu in &self.cpus {
            match sysfs::read_cpu_frequency_mhz(root, cpu) {
                Ok(Some(mhz)) if mhz > 0 => {
                    self.latest_mhz.insert(cpu, mhz);
                }
                Ok(_) => {
                    self.latest_mhz.remove(&cpu);
                }
                Err(error) => {
                    // Not a problem line: a CPU going offline makes this happen, and the
                    // frequency is simply shown as unknown.
                    tracing::debug!("CPU frequency: {error}");
                    self.latest_mhz.remove(&cpu);
                }
            }
        }
        let interval = started
            .elapsed()
            .saturating_mul(FREQUENCY_COST_FACTOR)
            .min(MAX_FREQUENCY_INTERVAL);
        self.next_read = Some(now + interval);
    }

    fn mhz(&self, cpu: u32) -> Option<u64> {
        self.latest_mhz.get(&cpu).copied()
    }
}

/// Where a model folder is on disk this tick.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FolderLocation {
    exists: bool,
    /// Canonical path of the folder, or of its nearest existing ancestor when it does not
    /// exist yet (its space is then what a download into it would get).
    anchor: Option<PathBuf>,
}

fn locate_folder(folder: &Path, problems: &mut Vec<String>) -> FolderLocation {
    let exists = match fs::metadata(folder) {
        Ok(metadata) => {
            if !metadata.is_dir() {
                problems.push(format!(
                    "model folder {} is a file, not a folder; point the setting at the folder \
                     that holds the models",
                    folder.display()
                ));
            }
            true
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => false,
        Err(error) => {
            problems.push(format!(
                "could not check model folder {}: {}; it is shown as missing",
                folder.display(),
                describe_io_error(&error)
            ));
            false
        }
    };
    // Made absolute first so a relative folder still has ancestors up to `/`.
    let absolute = std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf());
    let anchor = absolute
        .ancestors()
        .find_map(|candidate| fs::canonicalize(candidate).ok());
    FolderLocation { exists, anchor }
}

/// Index of the mount point that holds `path`: the longest one that is a whole-component
/// prefix of it (`/mnt/data` holds `/mnt/data/x`, not `/mnt/database`). On a tie the later
/// mount wins, as it hides the earlier one in `/proc/mounts` order.
fn longest_mount_prefix<'a>(
    path: &Path,
    mount_points: impl IntoIterator<Item = &'a Path>,
) -> Option<usize> {
    mount_points
        .into_iter()
        .enumerate()
        .filter(|(_, mount_point)| path.starts_with(mount_point))
        .max_by_key(|(_, mount_point)| mount_point.components().count())
        .map(|(index, _)| index)
}

/// `statvfs` on just the file systems that hold model folders, each once.
fn refresh_space(disks: &mut Disks, matches: &[Option<usize>]) {
    let wanted: BTreeSet<usize> = matches.iter().flatten().copied().collect();
    for index in wanted {
        if let Some(disk) = disks.get_mut(index) {
            disk.refresh_specifics(DiskRefreshKind::nothing().with_storage());
        }
    }
}

fn folder_spaces(
    folders: &[PathBuf],
    locations: &[FolderLocation],
    matches: &[Option<usize>],
    disks: &[Disk],
    problems: &mut Vec<String>,
) -> Vec<FolderSpace> {
    folders
        .iter()
        .zip(locations)
        .zip(matches)
        .map(|((folder, location), matched)| {
            let disk = matched.and_then(|index| disks.get(index));
            let mut space = folder_space(folder, location, disk);
            // sysinfo lists local disks only: a folder on NFS, CIFS or tmpfs is asked directly.
            if let (None, Some(anchor)) = (space.available_bytes, &location.anchor) {
                match statvfs_space(anchor) {
                    Ok((available, total)) => {
                        space.available_bytes = Some(available);
                        space.total_bytes = Some(total);
                    }
                    Err(error) => problems.push(format!(
                        "could not read the free space of model folder {}: {}",
                        folder.display(),
                        describe_io_error(&error)
                    )),
                }
            }
            space
        })
        .collect()
}

/// Available (to an unprivileged user) and total bytes of the file system holding `path`.
pub fn statvfs_space(path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: c_path is a valid NUL-terminated string and stat a writable statvfs buffer.
    if unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the whole buffer.
    let stat = unsafe { stat.assume_init() };
    // The field widths differ between targets (u64 on x86_64 Linux, u32 elsewhere).
    #[allow(clippy::unnecessary_cast)]
    let (fragment, available, blocks) = (
        stat.f_frsize as u64,
        stat.f_bavail as u64,
        stat.f_blocks as u64,
    );
    Ok((available * fragment, blocks * fragment))
}

fn folder_space(folder: &Path, location: &FolderLocation, disk: Option<&Disk>) -> FolderSpace {
    // sysinfo leaves the space at zero when it could not `statvfs` the mount.
    let measured = disk.filter(|disk| disk.total_space() > 0);
    FolderSpace {
        path: folder.display().to_string(),
        exists: location.exists,
        mount_point: disk.map(|disk| disk.mount_point().display().to_string()),
        available_bytes: measured.map(Disk::available_space),
        total_bytes: measured.map(Disk::total_space),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::CoreKind;
    use crate::sysfs::fixtures;

    fn real_collector(folders: Vec<PathBuf>) -> HostCollector {
        HostCollector::new(PathBuf::from("/sys"), folders)
    }

    #[test]
    fn samples_the_real_machine() {
        let models = tempfile::tempdir().unwrap();
        let missing = models.path().join("not-downloaded-yet").join("deeper");
        let mut collector = real_collector(vec![models.path().to_path_buf(), missing.clone()]);
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        let first = collector.sample();
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        let host = collector.sample();
        println!("{host:#?}");
        assert!(first.cpu.logical_cores >= 1);

        assert!(host.cpu.logical_cores >= 1);
        assert_eq!(host.cpu.cores.len(), host.cpu.logical_cores as usize);
        let ids: BTreeSet<u32> = host.cpu.cores.iter().map(|core| core.id).collect();
        assert_eq!(ids.len(), host.cpu.cores.len(), "CPU ids are unique");
        assert!((0.0..=100.0).contains(&host.cpu.usage_pct));
        assert!(host
            .cpu
            .cores
            .iter()
            .all(|core| (0.0..=100.0).contains(&core.usage_pct)));
        if let Some(physical) = host.cpu.physical_cores {
            assert!(physical >= 1 && physical <= host.cpu.logical_cores);
        }

        assert!(host.memory.total_bytes > 0);
        assert!(host.memory.available_bytes <= host.memory.total_bytes);
        assert!(host.memory.used_bytes <= host.memory.total_bytes);
        assert!(host.memory.swap_used_bytes <= host.memory.swap_total_bytes);
        if cfg!(target_os = "linux") {
            assert!(host.load_average.is_some());
        }

        let [present, absent] = host.model_folders.as_slice() else {
            panic!("two model folders expected: {:?}", host.model_folders);
        };
        assert_eq!(present.path, models.path().display().to_string());
        assert!(present.exists);
        assert!(present.mount_point.is_some());
        let available = present.available_bytes.expect("available bytes");
        let total = present.total_bytes.expect("total bytes");
        assert!(total > 0 && available <= total);

        assert_eq!(absent.path, missing.display().to_string());
        assert!(!absent.exists);
        assert_eq!(absent.mount_point, present.mount_point);
        assert!(absent.available_bytes.is_some());
        assert_eq!(absent.total_bytes, present.total_bytes);

        assert!(
            host.problems
                .iter()
                .all(|problem| !problem.contains("model folder")),
            "{:?}",
            host.problems
        );
    }

    #[test]
    fn numa_nodes_come_from_the_sysfs_root() {
        let root = tempfile::tempdir().unwrap();
        fixtures::gh200(root.path());
        let mut collector = HostCollector::new(root.path().to_path_buf(), Vec::new());
        let host = collector.sample();
        assert!(host.problems.is_empty(), "{:?}", host.problems);
        assert_eq!(host.numa_nodes.len(), 2);
        assert_eq!(host.numa_nodes[0].cpus, (0..72).collect::<Vec<_>>());
        assert_eq!(host.numa_nodes[1].cpus, (72..144).collect::<Vec<_>>());
        assert_eq!(
            host.numa_nodes[1].memory_total_bytes,
            Some(491_520_000 * 1024)
        );
        // Not hybrid, and the fixture has no cpufreq: neither kind nor frequency is invented.
        assert!(host.cpu.cores.iter().all(|core| core.kind.is_none()));
        assert!(host
            .cpu
            .cores
            .iter()
            .all(|core| core.frequency_mhz.is_none()));
        assert!(host.model_folders.is_empty());
    }

    #[test]
    fn node_memory_is_reread_each_tick_but_cpu_lists_are_not() {
        let root = tempfile::tempdir().unwrap();
        fixtures::gh200(root.path());
        let mut collector = HostCollector::new(root.path().to_path_buf(), Vec::new());
        assert_eq!(
            collector.sample().numa_nodes[0].memory_free_bytes,
            Some(470_000_000 * 1024)
        );
        fixtures::node(root.path(), 0, "0-3", 491_520_000, 100_000_000);
        let host = collector.sample();
        assert_eq!(
            host.numa_nodes[0].memory_free_bytes,
            Some(100_000_000 * 1024)
        );
        assert_eq!(host.numa_nodes[0].cpus.len(), 72);
    }

    #[test]
    fn no_node_directory_gives_no_numa_nodes() {
        let root = tempfile::tempdir().unwrap();
        let mut collector = HostCollector::new(root.path().to_path_buf(), Vec::new());
        let host = collector.sample();
        assert!(host.numa_nodes.is_empty());
        assert!(host.problems.is_empty(), "{:?}", host.problems);
    }

    #[test]
    fn hybrid_kinds_label_the_cores() {
        let root = tempfile::tempdir().unwrap();
        fixtures::core_ultra_265f(root.path());
        let mut collector = HostCollector::new(root.path().to_path_buf(), Vec::new());
        let host = collector.sample();
        assert!(!host.cpu.cores.is_empty());
        for core in &host.cpu.cores {
            let expected = match core.id {
                0..=7 => Some(CoreKind::Performance),
                8..=19 => Some(CoreKind::Efficiency),
                _ => None,
            };
            assert_eq!(core.kind, expected, "cpu{}", core.id);
        }
    }

    #[test]
    fn frequencies_come_from_cpufreq_under_the_root() {
        let root = tempfile::tempdir().unwrap();
        fixtures::write(
            root.path(),
            "devices/system/cpu/cpu0/cpufreq/scaling_cur_freq",
            "2400000\n",
        );
        let mut collector = HostCollector::new(root.path().to_path_buf(), Vec::new());
        let host = collector.sample();
        let cpu0 = host
            .cpu
            .cores
            .iter()
            .find(|core| core.id == 0)
            .expect("cpu0");
        assert_eq!(cpu0.frequency_mhz, Some(2400));
        assert!(host
            .cpu
            .cores
            .iter()
            .filter(|core| core.id != 0)
            .all(|core| core.frequency_mhz.is_none()));
    }

    #[test]
    fn start_up_problems_are_repeated_and_the_rest_is_kept() {
        let root = tempfile::tempdir().unwrap();
        fixtures::gh200(root.path());
        fixtures::write(root.path(), "devices/system/node/node1/cpulist", "oops\n");
        let meminfo = root.path().join("devices/system/node/node0/meminfo");
        fs::remove_file(&meminfo).unwrap();
        fs::create_dir(&meminfo).unwrap();
        let mut collector = HostCollector::new(root.path().to_path_buf(), Vec::new());
        for _ in 0..2 {
            let host = collector.sample();
            assert_eq!(host.numa_nodes.len(), 2);
            assert_eq!(host.numa_nodes[0].cpus.len(), 72);
            assert_eq!(host.numa_nodes[0].memory_total_bytes, None);
            assert_eq!(
                host.numa_nodes[1].memory_total_bytes,
                Some(491_520_000 * 1024)
            );
            assert_eq!(host.problems.len(), 2, "{:?}", host.problems);
            assert!(host.problems[0].contains("node1/cpulist"));
            assert!(host.problems[0].ends_with("the CPUs of NUMA node 1 are not shown"));
            assert!(host.problems[1].starts_with(&format!(
                "could not read {}: is a directory",
                meminfo.display()
            )));
        }
    }

    #[test]
    fn set_model_folders_takes_effect_on_the_next_sample() {
        let models = tempfile::tempdir().unwrap();
        let mut collector = real_collector(Vec::new());
        assert!(collector.sample().model_folders.is_empty());
        collector.set_model_folders(vec![models.path().to_path_buf()]);
        let host = collector.sample();
        assert_eq!(host.model_folders.len(), 1);
        assert!(host.model_folders[0].exists);
    }

    #[test]
    fn a_folder_on_a_mount_sysinfo_does_not_list_still_gets_its_free_space() {
        // tmpfs stands in for NFS/CIFS: sysinfo's disk list leaves all three out.
        let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
            return; // no /dev/shm on this machine: nothing to check
        };
        let mut collector = real_collector(vec![shm.path().to_path_buf()]);
        let host = collector.sample();
        let folder = &host.model_folders[0];
        assert!(folder.total_bytes.is_some_and(|t| t > 0), "{folder:?}");
        assert!(folder.available_bytes.is_some(), "{folder:?}");
        assert!(
            host.problems.iter().all(|p| !p.contains("model folder")),
            "{:?}",
            host.problems
        );
    }

    #[test]
    fn statvfs_of_a_missing_path_is_an_error_not_a_panic() {
        assert!(statvfs_space(Path::new("/no/such/rigdeck/folder")).is_err());
    }

    #[test]
    fn a_file_given_as_model_folder_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.gguf");
        fs::write(&file, b"GGUF").unwrap();
        let mut problems = Vec::new();
        let location = locate_folder(&file, &mut problems);
        assert!(location.exists);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("is a file, not a folder"));
    }

    #[test]
    fn a_missing_folder_is_anchored_at_its_nearest_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let mut problems = Vec::new();
        let location = locate_folder(&dir.path().join("a/b/c"), &mut problems);
        assert!(!location.exists);
        assert_eq!(location.anchor, Some(fs::canonicalize(dir.path()).unwrap()));
        assert!(problems.is_empty());
    }

    #[test]
    fn a_relative_folder_is_resolved_from_the_working_directory() {
        let mut problems = Vec::new();
        let location = locate_folder(Path::new("surely-not-here/models"), &mut problems);
        assert!(!location.exists);
        assert_eq!(
            location.anchor,
            Some(fs::canonicalize(std::env::current_dir().unwrap()).unwrap())
        );
    }

    #[test]
    fn longest_mount_prefix_matches_whole_components() {
        let mounts = ["/", "/mnt/data", "/mnt/database", "/home"].map(Path::new);
        let find = |path: &str| longest_mount_prefix(Path::new(path), mounts);
        assert_eq!(find("/mnt/data/models"), Some(1));
        assert_eq!(find("/mnt/data"), Some(1));
        assert_eq!(find("/mnt/database/x"), Some(2));
        assert_eq!(find("/mnt/datab"), Some(0));
        assert_eq!(find("/srv"), Some(0));
        assert_eq!(
            longest_mount_prefix(Path::new("/srv"), [Path::new("/home")]),
            None
        );
    }

    #[test]
    fn a_later_mount_on_the_same_point_wins() {
        let mounts = ["/", "/mnt/models", "/mnt/models"].map(Path::new);
        assert_eq!(
            longest_mount_prefix(Path::new("/mnt/models/llama"), mounts),
            Some(2)
        );
    }

    #[test]
    fn cpu_ids_come_from_names_not_positions() {
        assert_eq!(kernel_cpu_id(3, "cpu12"), 12);
        assert_eq!(kernel_cpu_id(3, "weird"), 3);
    }

    #[test]
    fn percentages_are_kept_in_range() {
        assert_eq!(sane_percent(f32::NAN), 0.0);
        assert_eq!(sane_percent(100.4), 100.0);
        assert_eq!(sane_percent(42.5), 42.5);
    }
}
