//! Pure readers for the few Linux sysfs files the host collector needs: CPU lists, the Intel
//! hybrid (P/E core) layout, NUMA nodes and per-CPU frequency.
//!
//! Every function takes the sysfs root as an argument (normally `/sys`) so tests can point it
//! at a fixture tree. Nothing here panics on file contents: a file that cannot be read or
//! parsed becomes a problem string that names the path and what is missing because of it, and
//! the rest of the answer is still returned. A file that does not exist is usually not a
//! problem at all: it just means the kernel or hardware does not offer that information.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::snapshot::{CoreKind, NumaNode};

/// Largest logical CPU id accepted in a CPU list. The kernel's own limit (`NR_CPUS`) is at
/// most 8192 today; the bound only stops a corrupt file from making us allocate gigabytes.
pub const MAX_CPU_ID: u32 = 65_535;

/// Why a kernel CPU list (`0-3,8,10-11`) could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("empty entry in CPU list `{list}`")]
    EmptyEntry { list: String },
    #[error("`{token}` is not a CPU number")]
    NotANumber { token: String },
    #[error("CPU range `{entry}` is missing a number")]
    MissingNumber { entry: String },
    #[error("CPU range `{start}-{end}` runs backwards")]
    ReversedRange { start: u32, end: u32 },
    #[error("CPU {id} is above the largest supported CPU id {MAX_CPU_ID}")]
    TooLarge { id: u32 },
}

/// Why one sysfs file gave no usable value.
#[derive(Debug, Error)]
pub enum SysfsError {
    #[error("could not read {}: {}", path.display(), describe_io_error(source))]
    Read { path: PathBuf, source: io::Error },
    #[error("could not parse {}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
}

impl SysfsError {
    /// The file is simply absent, which for most sysfs entries means "not offered here".
    pub fn is_not_found(&self) -> bool {
        matches!(self, SysfsError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// The problem line shown to the user: the error, then what is missing because of it.
    pub fn problem(&self, consequence: &str) -> String {
        format!("{self}; {consequence}")
    }
}

/// A value read from sysfs together with the problems met while reading it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readout<T> {
    pub value: T,
    pub problems: Vec<String>,
}

/// Logical CPU id → performance or efficiency core.
pub type CoreKindMap = BTreeMap<u32, CoreKind>;

/// The static part of a NUMA node: its id and the CPUs that belong to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaTopologyNode {
    pub id: u32,
    /// Empty for memory-only nodes (GH200 exposes several for GPU memory) or when the
    /// node's `cpulist` could not be read (a problem then says so).
    pub cpus: Vec<u32>,
}

/// The changing part of a NUMA node, from its `meminfo`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeMemory {
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
}

/// Parses the kernel's cpulist format (`0-3,8,10-11`) into sorted, unique CPU ids.
///
/// Surrounding whitespace and the trailing newline of a sysfs file are ignored, and an empty
/// list is valid (a memory-only NUMA node has one).
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, CpuListError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    // A set rather than a Vec: overlapping ranges in a corrupt file must not multiply memory.
    let mut cpus = BTreeSet::new();
    for entry in text.split(',') {
        let (start, end) = parse_cpu_range(entry, text)?;
        cpus.extend(start..=end);
    }
    Ok(cpus.into_iter().collect())
}

fn parse_cpu_range(entry: &str, whole_list: &str) -> Result<(u32, u32), CpuListError> {
    let entry = entry.trim();
    if entry.is_empty() {
        return Err(CpuListError::EmptyEntry {
            list: whole_list.to_owned(),
        });
    }
    let (start, end) = match entry.split_once('-') {
        Some((start, end)) if start.trim().is_empty() || end.trim().is_empty() => {
            return Err(CpuListError::MissingNumber {
                entry: entry.to_owned(),
            })
        }
        Some((start, end)) => (parse_cpu_id(start)?, parse_cpu_id(end)?),
        None => {
            let id = parse_cpu_id(entry)?;
            (id, id)
        }
    };
    if start > end {
        return Err(CpuListError::ReversedRange { start, end });
    }
    Ok((start, end))
}

fn parse_cpu_id(token: &str) -> Result<u32, CpuListError> {
    let token = token.trim();
    // `u32::from_str` would accept a leading `+`, which the kernel never writes.
    let id = if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
        token.parse::<u32>().ok()
    } else {
        None
    };
    match id {
        Some(id) if id <= MAX_CPU_ID => Ok(id),
        Some(id) => Err(CpuListError::TooLarge { id }),
        None => Err(CpuListError::NotANumber {
            token: token.to_owned(),
        }),
    }
}

/// Reads the Intel hybrid layout: `devices/cpu_core/cpus` lists the P cores and
/// `devices/cpu_atom/cpus` the E cores (`devices/cpu_lowpower/cpus`, the low-power E cores of
/// some mobile parts, count as E cores too). `None` when none of these files exists (not a
/// hybrid CPU, or a kernel too old to say).
pub fn read_hybrid_layout(root: &Path) -> Readout<Option<CoreKindMap>> {
    let mut readout = Readout::default();
    let mut kinds: Option<CoreKindMap> = None;
    for (pmu, kind) in [
        ("cpu_core", CoreKind::Performance),
        ("cpu_atom", CoreKind::Efficiency),
        ("cpu_lowpower", CoreKind::Efficiency),
    ] {
        let path = root.join("devices").join(pmu).join("cpus");
        match read_cpu_list_file(&path) {
            Ok(cpus) => {
                let map = kinds.get_or_insert_with(CoreKindMap::new);
                map.extend(cpus.into_iter().map(|cpu| (cpu, kind)));
            }
            Err(error) if error.is_not_found() => {}
            Err(error) => {
                // The file exists, so the CPU is hybrid: keep whatever the other file gave.
                kinds.get_or_insert_with(CoreKindMap::new);
                readout
                    .problems
                    .push(error.problem(&format!("{} labels are not shown", kind_label(kind))));
            }
        }
    }
    readout.value = kinds;
    readout
}

fn kind_label(kind: CoreKind) -> &'static str {
    match kind {
        CoreKind::Performance => "P-core",
        CoreKind::Efficiency => "E-core",
    }
}

/// The directory that holds `node<N>` entries.
pub fn numa_node_dir(root: &Path) -> PathBuf {
    root.join("devices").join("system").join("node")
}

/// Lists the NUMA nodes and their CPUs, sorted by node id.
///
/// No `devices/system/node` directory (a kernel without NUMA support, or not Linux) gives an
/// empty list and no problem. A node whose `cpulist` cannot be read is still listed, with no
/// CPUs, so its memory can be shown.
pub fn read_numa_topology(root: &Path) -> Readout<Vec<NumaTopologyNode>> {
    let mut readout = Readout::default();
    let node_dir = numa_node_dir(root);
    let entries = match fs::read_dir(&node_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return readout,
        Err(error) => {
            readout.problems.push(format!(
                "could not list {}: {}; NUMA nodes are not shown",
                node_dir.display(),
                describe_io_error(&error)
            ));
            return readout;
        }
    };
    let mut node_ids: Vec<u32> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| parse_node_dir_name(&entry.file_name().to_string_lossy()))
        .collect();
    // Numeric order: `node10` must come after `node2`.
    node_ids.sort_unstable();
    for id in node_ids {
        let path = node_dir.join(format!("node{id}")).join("cpulist");
        let cpus = read_cpu_list_file(&path).unwrap_or_else(|error| {
            readout
                .problems
                .push(error.problem(&format!("the CPUs of NUMA node {id} are not shown")));
            Vec::new()
        });
        readout.value.push(NumaTopologyNode { id, cpus });
    }
    readout
}

/// `node12` → 12; anything else in the node directory (`online`, `has_cpu`, `power`) → None.
fn parse_node_dir_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("node")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Reads `node<id>/meminfo` for one node.
pub fn read_node_memory(root: &Path, id: u32) -> Result<NodeMemory, SysfsError> {
    let path = numa_node_dir(root)
        .join(format!("node{id}"))
        .join("meminfo");
    let text = read_text(&path)?;
    parse_node_meminfo(&text).map_err(|reason| SysfsError::Malformed { path, reason })
}

/// Parses a node `meminfo` (`Node 0 MemTotal:       131890736 kB` lines) for total and free
/// memory in bytes. Other lines are ignored; having neither value is an error.
pub fn parse_node_meminfo(text: &str) -> Result<NodeMemory, String> {
    let mut memory = NodeMemory::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        // Skip the `Node <N>` prefix; the file already belongs to one node.
        let (Some(_), Some(_), Some(key)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let slot = match key {
            "MemTotal:" => &mut memory.total_bytes,
            "MemFree:" => &mut memory.free_bytes,
            _ => continue,
        };
        let key = key.trim_end_matches(':');
        *slot = Some(parse_kib_value(key, fields.next(), fields.next())?);
    }
    if memory.total_bytes.is_none() && memory.free_bytes.is_none() {
        return Err("no MemTotal or MemFree line".to_owned());
    }
    Ok(memory)
}

fn parse_kib_value(key: &str, value: Option<&str>, unit: Option<&str>) -> Result<u64, String> {
    let value = value.unwrap_or("");
    let kib: u64 = value
        .parse()
        .map_err(|_| format!("`{value}` is not a number in the {key} line"))?;
    match unit {
        Some("kB") | None => {}
        Some(other) => return Err(format!("unexpected unit `{other}` in the {key} line")),
    }
    kib.checked_mul(1024)
        .ok_or_else(|| format!("{kib} kB in the {key} line is too large"))
}

/// Adds this tick's memory figures to the (static) node list.
pub fn numa_nodes_with_memory(
    root: &Path,
    topology: &[NumaTopologyNode],
) -> Readout<Vec<NumaNode>> {
    let mut readout: Readout<Vec<NumaNode>> = Readout::default();
    for node in topology {
        let memory = read_node_memory(root, node.id).unwrap_or_else(|error| {
            readout
                .problems
                .push(error.problem(&format!("NUMA memory for node {} is not shown", node.id)));
            NodeMemory::default()
        });
        readout.value.push(NumaNode {
            id: node.id,
            cpus: node.cpus.clone(),
            memory_total_bytes: memory.total_bytes,
            memory_free_bytes: memory.free_bytes,
        });
    }
    readout
}

/// Topology and memory in one go, for callers that do not keep the topology between ticks.
pub fn read_numa_nodes(root: &Path) -> Readout<Vec<NumaNode>> {
    let topology = read_numa_topology(root);
    let mut nodes = numa_nodes_with_memory(root, &topology.value);
    let mut problems = topology.problems;
    problems.append(&mut nodes.problems);
    Readout {
        value: nodes.value,
        problems,
    }
}

/// `cpu<N>/cpufreq/scaling_cur_freq`, the current frequency of one logical CPU in kHz.
pub fn cpu_frequency_path(root: &Path, cpu: u32) -> PathBuf {
    root.join("devices")
        .join("system")
        .join("cpu")
        .join(format!("cpu{cpu}"))
        .join("cpufreq")
        .join("scaling_cur_freq")
}

/// Current frequency of one logical CPU in MHz; `Ok(None)` when the kernel has no cpufreq
/// driver for it (common in VMs and containers).
pub fn read_cpu_frequency_mhz(root: &Path, cpu: u32) -> Result<Option<u64>, SysfsError> {
    let path = cpu_frequency_path(root, cpu);
    let text = match read_text(&path) {
        Ok(text) => text,
        Err(error) if error.is_not_found() => return Ok(None),
        Err(error) => return Err(error),
    };
    let khz: u64 = text.trim().parse().map_err(|_| SysfsError::Malformed {
        reason: format!("`{}` is not a frequency in kHz", text.trim()),
        path,
    })?;
    Ok(Some(khz / 1000))
}

fn read_cpu_list_file(path: &Path) -> Result<Vec<u32>, SysfsError> {
    let text = read_text(path)?;
    parse_cpu_list(&text).map_err(|error| SysfsError::Malformed {
        path: path.to_path_buf(),
        reason: error.to_string(),
    })
}

fn read_text(path: &Path) -> Result<String, SysfsError> {
    fs::read_to_string(path).map_err(|source| SysfsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// `Permission denied (os error 13)` → `permission denied`: short enough to sit inside a
/// sentence, which is how problems are shown.
pub fn describe_io_error(error: &io::Error) -> String {
    let text = error.to_string();
    let text = match text.rsplit_once(" (os error ") {
        Some((description, _code)) => description.to_owned(),
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// Builders for fake sysfs trees, shared with the host collector's tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::fs;
    use std::path::Path;

    /// Writes `contents` to `root/relative`, creating parent directories.
    pub fn write(root: &Path, relative: &str, contents: &str) {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(path, contents).unwrap();
    }

    /// A node `meminfo` as the kernel writes it (abridged), sizes in kB.
    pub fn node_meminfo(node: u32, total_kib: u64, free_kib: u64) -> String {
        let used = total_kib - free_kib;
        format!(
            "Node {node} MemTotal:       {total_kib} kB\n\
             Node {node} MemFree:        {free_kib} kB\n\
             Node {node} MemUsed:        {used} kB\n\
             Node {node} SwapCached:            0 kB\n\
             Node {node} Active:          5234112 kB\n\
             Node {node} FilePages:       7340032 kB\n\
             Node {node} HugePages_Total:     0\n\
             Node {node} HugePages_Free:      0\n"
        )
    }

    pub fn node(root: &Path, id: u32, cpulist: &str, total_kib: u64, free_kib: u64) {
        let dir = format!("devices/system/node/node{id}");
        write(root, &format!("{dir}/cpulist"), &format!("{cpulist}\n"));
        write(
            root,
            &format!("{dir}/meminfo"),
            &node_meminfo(id, total_kib, free_kib),
        );
    }

    /// GH200-like: two nodes of 72 Grace cores and ~480 GB LPDDR5X each.
    pub fn gh200(root: &Path) {
        write(root, "devices/system/node/online", "0-1\n");
        write(root, "devices/system/node/has_cpu", "0-1\n");
        node(root, 0, "0-71", 491_520_000, 470_000_000);
        node(root, 1, "72-143", 491_520_000, 480_000_000);
    }

    /// Intel Core Ultra 7 265F: 8 P cores (0-7) and 12 E cores (8-19), one NUMA node.
    pub fn core_ultra_265f(root: &Path) {
        write(root, "devices/cpu_core/cpus", "0-7\n");
        write(root, "devices/cpu_atom/cpus", "8-19\n");
        node(root, 0, "0-19", 65_536_000, 40_000_000);
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn cpu_list_accepts_the_kernel_format() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Ok(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Ok(vec![5]));
        assert_eq!(parse_cpu_list("0-71\n"), Ok((0..=71).collect()));
        assert_eq!(parse_cpu_list("7-7"), Ok(vec![7]));
    }

    #[test]
    fn cpu_list_tolerates_whitespace_and_empty_lists() {
        assert_eq!(parse_cpu_list(" 0 - 2 , 4\n"), Ok(vec![0, 1, 2, 4]));
        assert_eq!(parse_cpu_list(""), Ok(vec![]));
        assert_eq!(parse_cpu_list("\n"), Ok(vec![]));
    }

    #[test]
    fn cpu_list_sorts_and_deduplicates() {
        assert_eq!(parse_cpu_list("8,0-2,1"), Ok(vec![0, 1, 2, 8]));
    }

    #[test]
    fn cpu_list_rejects_bad_input_with_a_clear_error() {
        assert_eq!(
            parse_cpu_list("0-3,,8"),
            Err(CpuListError::EmptyEntry {
                list: "0-3,,8".into()
            })
        );
        assert!(matches!(
            parse_cpu_list("0-3,"),
            Err(CpuListError::EmptyEntry { .. })
        ));
        assert_eq!(
            parse_cpu_list("0-x"),
            Err(CpuListError::NotANumber { token: "x".into() })
        );
        assert_eq!(
            parse_cpu_list("-3"),
            Err(CpuListError::MissingNumber { entry: "-3".into() })
        );
        assert_eq!(
            parse_cpu_list("4-"),
            Err(CpuListError::MissingNumber { entry: "4-".into() })
        );
        assert_eq!(
            parse_cpu_list("+3"),
            Err(CpuListError::NotANumber { token: "+3".into() })
        );
        assert_eq!(
            parse_cpu_list("0-1-2"),
            Err(CpuListError::NotANumber {
                token: "1-2".into()
            })
        );
        assert_eq!(
            parse_cpu_list("0-31:2/4"),
            Err(CpuListError::NotANumber {
                token: "31:2/4".into()
            })
        );
        assert_eq!(
            parse_cpu_list("9-3"),
            Err(CpuListError::ReversedRange { start: 9, end: 3 })
        );
        assert_eq!(
            parse_cpu_list("0-4294967295"),
            Err(CpuListError::TooLarge { id: u32::MAX })
        );
        assert_eq!(
            parse_cpu_list("99999999999"),
            Err(CpuListError::NotANumber {
                token: "99999999999".into()
            })
        );
        assert_eq!(
            CpuListError::ReversedRange { start: 9, end: 3 }.to_string(),
            "CPU range `9-3` runs backwards"
        );
    }

    #[test]
    fn hybrid_layout_of_a_core_ultra_265f() {
        let root = tempfile::tempdir().unwrap();
        core_ultra_265f(root.path());
        let readout = read_hybrid_layout(root.path());
        assert!(readout.problems.is_empty(), "{:?}", readout.problems);
        let kinds = readout.value.expect("hybrid layout");
        assert_eq!(kinds.len(), 20);
        assert!((0..8).all(|cpu| kinds[&cpu] == CoreKind::Performance));
        assert!((8..20).all(|cpu| kinds[&cpu] == CoreKind::Efficiency));
    }

    #[test]
    fn low_power_e_cores_count_as_efficiency_cores() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "devices/cpu_core/cpus", "0-3\n");
        write(root.path(), "devices/cpu_atom/cpus", "4-7\n");
        write(root.path(), "devices/cpu_lowpower/cpus", "8-9\n");
        let kinds = read_hybrid_layout(root.path())
            .value
            .expect("hybrid layout");
        assert_eq!(kinds.len(), 10);
        assert_eq!(kinds[&3], CoreKind::Performance);
        assert_eq!(kinds[&4], CoreKind::Efficiency);
        assert_eq!(kinds[&9], CoreKind::Efficiency);
    }

    #[test]
    fn no_hybrid_layout_without_the_pmu_directories() {
        let root = tempfile::tempdir().unwrap();
        gh200(root.path());
        let readout = read_hybrid_layout(root.path());
        assert_eq!(readout.value, None);
        assert!(readout.problems.is_empty());
    }

    #[test]
    fn malformed_hybrid_file_is_a_problem_and_keeps_the_other_kind() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "devices/cpu_core/cpus", "zero-seven\n");
        write(root.path(), "devices/cpu_atom/cpus", "8-19\n");
        let readout = read_hybrid_layout(root.path());
        let kinds = readout.value.expect("hybrid layout");
        assert_eq!(kinds.get(&0), None);
        assert_eq!(kinds.get(&8), Some(&CoreKind::Efficiency));
        let expected_path = root.path().join("devices/cpu_core/cpus");
        assert_eq!(
            readout.problems,
            vec![format!(
                "could not parse {}: `zero` is not a CPU number; P-core labels are not shown",
                expected_path.display()
            )]
        );
    }

    #[test]
    fn gh200_numa_nodes() {
        let root = tempfile::tempdir().unwrap();
        gh200(root.path());
        let readout = read_numa_nodes(root.path());
        assert!(readout.problems.is_empty(), "{:?}", readout.problems);
        let nodes = readout.value;
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].id, 0);
        assert_eq!(nodes[0].cpus, (0..72).collect::<Vec<_>>());
        assert_eq!(nodes[1].id, 1);
        assert_eq!(nodes[1].cpus, (72..144).collect::<Vec<_>>());
        assert_eq!(nodes[0].memory_total_bytes, Some(491_520_000 * 1024));
        assert_eq!(nodes[0].memory_free_bytes, Some(470_000_000 * 1024));
        assert_eq!(nodes[1].memory_free_bytes, Some(480_000_000 * 1024));
    }

    #[test]
    fn no_node_directory_means_no_numa_nodes_and_no_problem() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "devices/system/cpu/online", "0-3\n");
        let readout = read_numa_nodes(root.path());
        assert!(readout.value.is_empty());
        assert!(readout.problems.is_empty());
    }

    #[test]
    fn nodes_sort_numerically_and_memory_only_nodes_have_no_cpus() {
        let root = tempfile::tempdir().unwrap();
        for id in [10, 2, 1] {
            node(root.path(), id, "", 0, 0);
        }
        node(root.path(), 0, "0-71", 491_520_000, 470_000_000);
        let readout = read_numa_nodes(root.path());
        assert!(readout.problems.is_empty(), "{:?}", readout.problems);
        let ids: Vec<u32> = readout.value.iter().map(|node| node.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 10]);
        assert!(readout.value[3].cpus.is_empty());
        assert_eq!(readout.value[3].memory_total_bytes, Some(0));
    }

    #[test]
    fn unreadable_meminfo_is_a_problem_and_other_nodes_remain() {
        let root = tempfile::tempdir().unwrap();
        gh200(root.path());
        // A directory where the file should be fails to read even when the tests run as root.
        let meminfo = root.path().join("devices/system/node/node1/meminfo");
        fs::remove_file(&meminfo).unwrap();
        fs::create_dir(&meminfo).unwrap();

        let readout = read_numa_nodes(root.path());
        assert_eq!(readout.value.len(), 2);
        assert_eq!(
            readout.value[0].memory_total_bytes,
            Some(491_520_000 * 1024)
        );
        assert_eq!(readout.value[1].cpus, (72..144).collect::<Vec<_>>());
        assert_eq!(readout.value[1].memory_total_bytes, None);
        assert_eq!(readout.value[1].memory_free_bytes, None);
        assert_eq!(
            readout.problems,
            vec![format!(
                "could not read {}: is a directory; NUMA memory for node 1 is not shown",
                meminfo.display()
            )]
        );
    }

    #[test]
    fn malformed_meminfo_is_a_problem_and_other_nodes_remain() {
        let root = tempfile::tempdir().unwrap();
        gh200(root.path());
        write(
            root.path(),
            "devices/system/node/node0/meminfo",
            "\u{0}\u{1}garbage ~~~\nnot meminfo at all\n",
        );
        let readout = read_numa_nodes(root.path());
        assert_eq!(readout.value.len(), 2);
        assert_eq!(readout.value[0].memory_total_bytes, None);
        assert_eq!(
            readout.value[1].memory_total_bytes,
            Some(491_520_000 * 1024)
        );
        let meminfo = root.path().join("devices/system/node/node0/meminfo");
        assert_eq!(
            readout.problems,
            vec![format!(
                "could not parse {}: no MemTotal or MemFree line; NUMA memory for node 0 is not shown",
                meminfo.display()
            )]
        );
    }

    #[test]
    fn meminfo_with_a_bad_number_names_the_line() {
        let text = "Node 0 MemTotal:       lots kB\nNode 0 MemFree: 1 kB\n";
        assert_eq!(
            parse_node_meminfo(text),
            Err("`lots` is not a number in the MemTotal line".to_owned())
        );
        assert_eq!(
            parse_node_meminfo("Node 0 MemTotal: 1 MB\n"),
            Err("unexpected unit `MB` in the MemTotal line".to_owned())
        );
        assert!(parse_node_meminfo("Node 0 MemTotal: 18446744073709551615 kB\n").is_err());
    }

    #[test]
    fn malformed_cpulist_keeps_the_node_for_its_memory() {
        let root = tempfile::tempdir().unwrap();
        gh200(root.path());
        write(root.path(), "devices/system/node/node1/cpulist", "72-\n");
        let readout = read_numa_nodes(root.path());
        assert_eq!(readout.value.len(), 2);
        assert!(readout.value[1].cpus.is_empty());
        assert_eq!(
            readout.value[1].memory_total_bytes,
            Some(491_520_000 * 1024)
        );
        let cpulist = root.path().join("devices/system/node/node1/cpulist");
        assert_eq!(
            readout.problems,
            vec![format!(
                "could not parse {}: CPU range `72-` is missing a number; the CPUs of NUMA node 1 are not shown",
                cpulist.display()
            )]
        );
    }

    #[test]
    fn cpu_frequency_from_cpufreq() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "devices/system/cpu/cpu3/cpufreq/scaling_cur_freq",
            "3187500\n",
        );
        write(
            root.path(),
            "devices/system/cpu/cpu4/cpufreq/scaling_cur_freq",
            "fast\n",
        );
        assert_eq!(read_cpu_frequency_mhz(root.path(), 3).unwrap(), Some(3187));
        assert_eq!(read_cpu_frequency_mhz(root.path(), 0).unwrap(), None);
        assert!(matches!(
            read_cpu_frequency_mhz(root.path(), 4),
            Err(SysfsError::Malformed { .. })
        ));
    }

    #[test]
    fn io_errors_read_as_part_of_a_sentence() {
        let error = io::Error::from_raw_os_error(13);
        assert_eq!(describe_io_error(&error), "permission denied");
        let custom = io::Error::other("Broken thing");
        assert_eq!(describe_io_error(&custom), "broken thing");
    }
}
