//! A repository's file listing grouped the way users choose downloads: by quantization.

use crate::download::error::human_bytes;
use crate::repo::RepoFile;
use rigdeck_gguf::split::{MissingParts, SplitName};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// What a group holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// One quantization of the model as GGUF (one file or all parts of a split one).
    Gguf,
    /// A vision projector (`mmproj*.gguf`), loaded beside a model rather than as one.
    Projector,
    /// The unquantized safetensors weights and their index.
    Safetensors,
    /// Anything else: README, config, tokenizer, images…
    Other,
}

/// Files a user downloads together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileGroup {
    pub kind: GroupKind,
    /// What users call it: "UD-IQ2_M", "Q4_K_M", "BF16", "mmproj-F16", "safetensors", or the
    /// file name for Other. Unique within one listing: two models with the same quant get their
    /// first file's path after it, "Q4_K_M (sub/b-Q4_K_M.gguf)".
    pub label: String,
    /// The files, a split model's shards in part order.
    pub files: Vec<RepoFile>,
    pub total_bytes: u64,
    /// Parts of a split GGUF the listing lacks (None when complete or unsplit). Its `prefix` is
    /// the path inside the repository (folder included), so its message names what to look for.
    pub missing: Option<MissingParts>,
}

/// The label of the single group holding all safetensors weights.
const SAFETENSORS_LABEL: &str = "safetensors";
/// llama.cpp's multimodal projectors carry this in their names.
const PROJECTOR_MARK: &str = "mmproj";
/// unsloth's "dynamic" quants put this token before the quant type.
const DYNAMIC_TOKEN: &str = "UD";
/// Labels named in an error message before the rest is counted: a hostile listing with
/// thousands of files must not make a message of thousands of names.
const SHOWN_LABELS: usize = 40;
/// Characters of the user's query repeated in a message.
const SHOWN_QUERY_CHARS: usize = 100;
/// Float and microscaling types written as whole tokens (upper case).
const WHOLE_TOKEN_TYPES: &[&str] = &[
    "F16",
    "F32",
    "F64",
    "BF16",
    "FP16",
    "FP32",
    "FP8",
    "MXFP4",
    "MXFP4_MOE",
    "NVFP4",
];

/// Groups a listing: each GGUF quantization one entry (a split model is one entry with its total
/// size; a quant in its own folder such as `UD-IQ2_M/GLM-5.2-UD-IQ2_M-00001-of-00006.gguf` too),
/// vision projectors (`mmproj*.gguf`) apart, safetensors weights as one group (with their index
/// json), everything else (README.md, config.json, tokenizer files, images...) as Other, one
/// group per file.
///
/// Order: GGUF quants by size (ties by label), then projectors, then safetensors, then Other by
/// path. Labels are unique.
pub fn group(files: &[RepoFile]) -> Vec<FileGroup> {
    // A BTreeMap so the groups come out the same whatever order the hub lists files in.
    let mut ggufs: BTreeMap<GgufKey, Vec<Member<'_>>> = BTreeMap::new();
    let mut safetensors: Vec<&RepoFile> = Vec::new();
    let mut groups: Vec<FileGroup> = Vec::new();
    for file in files {
        match classify(file.path.file_name()) {
            Class::Gguf { projector } => {
                let (key, member) = gguf_key(file, projector);
                ggufs.entry(key).or_default().push(member);
            }
            Class::Safetensors => safetensors.push(file),
            Class::Other => groups.push(other_group(file)),
        }
    }
    groups.extend(
        ggufs
            .into_iter()
            .map(|(key, members)| gguf_group(&key, members)),
    );
    if !safetensors.is_empty() {
        groups.push(safetensors_group(safetensors));
    }
    make_labels_unique(&mut groups);
    groups.sort_by(display_order);
    groups
}

/// The quantization a GGUF file name carries ("Qwen3-8B-UD-Q4_K_XL.gguf" -> "UD-Q4_K_XL"), None
/// when it names none. The label is upper case whatever the name's case ("q4_k_m" -> "Q4_K_M").
pub fn quant_label(file_name: &str) -> Option<String> {
    quant_in(&gguf_stem(file_name))
}

/// The group a user's `REPO:QUANT` asks for, case-insensitive on the label ("q4_k_m" finds
/// "Q4_K_M"). An exact label wins; then the label without unsloth's "UD-" ("Q4_K_XL" finds
/// "UD-Q4_K_XL"); then a label the query begins. Several matches at the first level that has
/// any is an error, as is none: both messages list the quants there are. Other files (README,
/// config…) are not quants and are never chosen.
pub fn find<'a>(groups: &'a [FileGroup], quant: &str) -> Result<&'a FileGroup, String> {
    let choices: Vec<&FileGroup> = groups
        .iter()
        .filter(|g| g.kind != GroupKind::Other)
        .collect();
    if choices.is_empty() {
        return Err(
            "this repository has no GGUF files or safetensors weights to choose from".into(),
        );
    }
    // Labels are unique, so a case-sensitive exact match settles it even where two labels
    // differ only in case; untrimmed first, as a file name may begin with a space.
    let exact = |wanted: &str| choices.iter().copied().find(|g| g.label == wanted);
    let wanted = quant.trim();
    if let Some(group) = exact(quant).or_else(|| exact(wanted)) {
        return Ok(group);
    }
    if wanted.is_empty() {
        return Err(format!(
            "no quantization was named: add one after the repository, e.g. REPO:{}; available: {}",
            first_label(&choices),
            list_labels(&choices)
        ));
    }
    match_by_tiers(&choices, wanted)
}

/// The looser levels of [`find`], the first with any match deciding.
/// What a `REPO[:QUANT]` request downloads, as a label and its files: the named group; the only
/// GGUF quantization when none is named; the whole repository when it has none (safetensors);
/// otherwise an error listing the choices. A split quantization missing parts is refused (it
/// could not be loaded).
pub fn select(
    groups: &[FileGroup],
    quant: Option<&str>,
) -> Result<(String, Vec<RepoFile>), String> {
    let ggufs: Vec<&FileGroup> = groups
        .iter()
        .filter(|g| g.kind == GroupKind::Gguf)
        .collect();
    let group = match (quant, ggufs.as_slice()) {
        (Some(quant), _) => find(groups, quant)?,
        (None, [only]) => only,
        (None, []) => {
            let files = groups.iter().flat_map(|g| g.files.clone()).collect();
            return Ok(("all files".to_owned(), files));
        }
        (None, several) => {
            let labels: Vec<String> = several
                .iter()
                .map(|g| format!("  {} ({})", g.label, human_bytes(g.total_bytes)))
                .collect();
            return Err(format!(
                "this repository has {} quantizations; name one as REPO:QUANT:\n{}",
                several.len(),
                labels.join("\n")
            ));
        }
    };
    if let Some(missing) = &group.missing {
        return Err(format!(
            "{} is an incomplete upload ({missing}); it could not be loaded, so it is not downloaded",
            group.label
        ));
    }
    Ok((group.label.clone(), group.files.clone()))
}

fn match_by_tiers<'a>(choices: &[&'a FileGroup], wanted: &str) -> Result<&'a FileGroup, String> {
    let query = wanted.to_lowercase();
    let same = |label: &str| label == query;
    let same_without_dynamic = |label: &str| strip_dynamic(label) == Some(query.as_str());
    let begins = |label: &str| {
        label.starts_with(&query) || strip_dynamic(label).is_some_and(|l| l.starts_with(&query))
    };
    let tiers: [&dyn Fn(&str) -> bool; 3] = [&same, &same_without_dynamic, &begins];
    for fits in tiers {
        let hits: Vec<&FileGroup> = choices
            .iter()
            .copied()
            .filter(|g| fits(&g.label.to_lowercase()))
            .collect();
        match hits.as_slice() {
            [] => {}
            [one] => return Ok(*one),
            several => {
                return Err(format!(
                    "'{}' could mean {}: write one of them in full",
                    shown_query(wanted),
                    list_labels(several)
                ))
            }
        }
    }
    Err(format!(
        "this repository has no quantization '{}'; available: {}",
        shown_query(wanted),
        list_labels(choices)
    ))
}

/// A lower-cased label without unsloth's dynamic prefix.
fn strip_dynamic(label: &str) -> Option<&str> {
    label.strip_prefix("ud-")
}

fn shown_query(wanted: &str) -> String {
    wanted.chars().take(SHOWN_QUERY_CHARS).collect()
}

fn first_label(choices: &[&FileGroup]) -> String {
    choices.first().map(|g| g.label.clone()).unwrap_or_default()
}

/// "Q4_K_M, Q8_0" — at most [`SHOWN_LABELS`], the rest counted.
fn list_labels(groups: &[&FileGroup]) -> String {
    let shown: Vec<&str> = groups
        .iter()
        .take(SHOWN_LABELS)
        .map(|g| g.label.as_str())
        .collect();
    let more = groups.len().saturating_sub(SHOWN_LABELS);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Where a file belongs, by its name alone.
enum Class {
    Gguf { projector: bool },
    Safetensors,
    Other,
}

fn classify(file_name: &str) -> Class {
    let lower = file_name.to_ascii_lowercase();
    if lower.ends_with(".gguf") {
        Class::Gguf {
            projector: lower.contains(PROJECTOR_MARK),
        }
    } else if lower.ends_with(".safetensors") || lower.ends_with(".safetensors.index.json") {
        Class::Safetensors
    } else {
        Class::Other
    }
}

/// What makes GGUF files one group: the parts of one split model share folder, prefix and
/// count; any other file is a group by itself. (A split model's prefix decides whether it is a
/// projector, so that needs no place here.)
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum GgufKey {
    Split {
        folder: String,
        prefix: String,
        count: u32,
    },
    Single {
        path: String,
    },
}

/// One GGUF file with its part number (0 when unsplit) and projector flag.
struct Member<'a> {
    number: u32,
    projector: bool,
    file: &'a RepoFile,
}

fn gguf_key(file: &RepoFile, projector: bool) -> (GgufKey, Member<'_>) {
    let (key, number) = match SplitName::parse(file.path.file_name()) {
        Some(split) => {
            let key = GgufKey::Split {
                folder: file.path.folder().to_owned(),
                prefix: split.prefix,
                count: split.count,
            };
            (key, split.number)
        }
        None => {
            let key = GgufKey::Single {
                path: file.path.as_str().to_owned(),
            };
            (key, 0)
        }
    };
    let member = Member {
        number,
        projector,
        file,
    };
    (key, member)
}

fn gguf_group(key: &GgufKey, mut members: Vec<Member<'_>>) -> FileGroup {
    // Part order, then path so that duplicated listings stay deterministic.
    members.sort_by(|a, b| (a.number, &a.file.path).cmp(&(b.number, &b.file.path)));
    let projector = members.iter().any(|m| m.projector);
    let missing = match key {
        GgufKey::Split {
            folder,
            prefix,
            count,
        } => missing_parts(folder, prefix, *count, &members),
        GgufKey::Single { .. } => None,
    };
    let label = members
        .first()
        .map(|m| gguf_label(m.file, projector))
        .unwrap_or_default();
    let files: Vec<RepoFile> = members.iter().map(|m| m.file.clone()).collect();
    FileGroup {
        kind: if projector {
            GroupKind::Projector
        } else {
            GroupKind::Gguf
        },
        label,
        total_bytes: total_bytes(&files),
        files,
        missing,
    }
}

/// The parts of a split model the listing lacks, as ranges (the crate's walk is bounded by
/// llama.cpp's u16 part count, so a name claiming 65 535 parts costs one range).
fn missing_parts(
    folder: &str,
    prefix: &str,
    count: u32,
    members: &[Member<'_>],
) -> Option<MissingParts> {
    let present: BTreeSet<u32> = members.iter().map(|m| m.number).collect();
    // The prefix is the repository path, so the message names files the user can find.
    let path_prefix = if folder.is_empty() {
        prefix.to_owned()
    } else {
        format!("{folder}/{prefix}")
    };
    let missing = MissingParts::find(&path_prefix, count, |n| present.contains(&n));
    (!missing.is_empty()).then_some(missing)
}

/// A GGUF group's label from its first file: the file's quant, else (models only) its folder's,
/// else the file's stem. A projector's quant is its own, never its folder's, which names the
/// model quant it sits beside.
fn gguf_label(file: &RepoFile, projector: bool) -> String {
    let name = file.path.file_name();
    if projector {
        return match quant_label(name) {
            Some(quant) => format!("{PROJECTOR_MARK}-{quant}"),
            None => stem_label(name),
        };
    }
    quant_label(name)
        .or_else(|| folder_quant(file.path.folder()))
        .unwrap_or_else(|| stem_label(name))
}

/// The deepest folder whose name carries a quant (`UD-IQ2_M/…`).
fn folder_quant(folder: &str) -> Option<String> {
    folder
        .rsplit('/')
        .filter(|component| !component.is_empty())
        .find_map(quant_in)
}

/// The name without `.gguf` and the split suffix; the whole name if that leaves nothing.
fn stem_label(file_name: &str) -> String {
    let stem = gguf_stem(file_name);
    if stem.is_empty() {
        file_name.to_owned()
    } else {
        stem
    }
}

/// A GGUF name without its split suffix (`-00001-of-00006.gguf`) or `.gguf`.
fn gguf_stem(file_name: &str) -> String {
    if let Some(split) = SplitName::parse(file_name) {
        return split.prefix;
    }
    strip_suffix_ignore_case(file_name, ".gguf").to_owned()
}

fn strip_suffix_ignore_case<'a>(text: &'a str, suffix: &str) -> &'a str {
    let cut = text.len().saturating_sub(suffix.len());
    match (text.get(..cut), text.get(cut..)) {
        (Some(head), Some(tail)) if tail.eq_ignore_ascii_case(suffix) => head,
        _ => text,
    }
}

/// The last quant token in a stem, with unsloth's "UD" token before it kept as "UD-".
fn quant_in(stem: &str) -> Option<String> {
    let tokens: Vec<&str> = stem.split(['-', '.']).collect();
    let (at, token) = tokens
        .iter()
        .enumerate()
        .rev()
        .find(|(_, token)| is_quant_token(token))?;
    let quant = token.to_ascii_uppercase();
    let dynamic = at
        .checked_sub(1)
        .and_then(|before| tokens.get(before))
        .is_some_and(|before| before.eq_ignore_ascii_case(DYNAMIC_TOKEN));
    Some(if dynamic {
        format!("{DYNAMIC_TOKEN}-{quant}")
    } else {
        quant
    })
}

/// A ggml type as quant names write it: `Q4_K_M`, `Q8_0`, `Q4_0_4_4`, `IQ2_XXS`, `IQ4_KS`,
/// `TQ1_0`, `MXFP4_MOE`, `BF16`… A pattern rather than a list, because new types (ik_llama's
/// `IQ2_KT`, `Q4_K_R4`…) keep appearing, while model-name tokens like `30B`, `A3B` or `Qwen3`
/// never fit it.
fn is_quant_token(token: &str) -> bool {
    let upper = token.to_ascii_uppercase();
    if WHOLE_TOKEN_TYPES.contains(&upper.as_str()) {
        return true;
    }
    let (family, rest) = if let Some(rest) = upper.strip_prefix("IQ") {
        (Family::I, rest)
    } else if let Some(rest) = upper.strip_prefix("TQ") {
        (Family::T, rest)
    } else if let Some(rest) = upper.strip_prefix('Q') {
        (Family::K, rest)
    } else {
        return false;
    };
    let Some((bits, parts)) = rest.split_once('_') else {
        return false;
    };
    let bits_ok = (1..=2).contains(&bits.len()) && bits.bytes().all(|b| b.is_ascii_digit());
    bits_ok && parts_fit(family, parts)
}

/// The three families of quant names, by what follows the bits.
#[derive(Clone, Copy)]
enum Family {
    /// `Q4_0`, `Q4_K_M`: a block-size digit or `K` first.
    K,
    /// `IQ2_XXS`, `IQ4_NL`, `IQ3_K`, `IQ4_K_R4`: any short parts.
    I,
    /// `TQ1_0`: a digit.
    T,
}

/// The `_`-separated parts after the bits: a few short alphanumeric parts, the first of the
/// family's kind.
fn parts_fit(family: Family, parts: &str) -> bool {
    let parts: Vec<&str> = parts.split('_').collect();
    let short =
        |p: &&str| (1..=4).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric());
    if parts.len() > 4 || !parts.iter().all(short) {
        return false;
    }
    let first = parts.first().copied().unwrap_or_default();
    let digits = !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit());
    match family {
        Family::K => digits || first.starts_with('K'),
        Family::I => true,
        Family::T => digits && parts.len() == 1,
    }
}

fn safetensors_group(mut files: Vec<&RepoFile>) -> FileGroup {
    // Path order is part order for `model-00001-of-00004.safetensors`.
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let files: Vec<RepoFile> = files.into_iter().cloned().collect();
    FileGroup {
        kind: GroupKind::Safetensors,
        label: SAFETENSORS_LABEL.to_owned(),
        total_bytes: total_bytes(&files),
        files,
        missing: None,
    }
}

fn other_group(file: &RepoFile) -> FileGroup {
    FileGroup {
        kind: GroupKind::Other,
        label: file.path.file_name().to_owned(),
        files: vec![file.clone()],
        total_bytes: file.size_bytes,
        missing: None,
    }
}

/// Sizes from the hub are data: a hostile listing must not overflow the sum.
fn total_bytes(files: &[RepoFile]) -> u64 {
    files
        .iter()
        .fold(0u64, |sum, f| sum.saturating_add(f.size_bytes))
}

/// A label shared by several groups gets the first file's path after it (`Q4_K_M
/// (sub/b-Q4_K_M.gguf)`) on every one of them, so none looks like the real one; anything still
/// shared after that (a stem that reads like such a label) gets a number.
fn make_labels_unique(groups: &mut [FileGroup]) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for g in groups.iter() {
        let count = counts.entry(g.label.clone()).or_default();
        *count = count.saturating_add(1);
    }
    for g in groups.iter_mut() {
        let shared = counts.get(&g.label).is_some_and(|&n| n > 1);
        if let (true, Some(first)) = (shared, g.files.first()) {
            g.label = format!("{} ({})", g.label, first.path);
        }
    }
    let mut taken: HashSet<String> = HashSet::new();
    for g in groups.iter_mut() {
        if !taken.insert(g.label.clone()) {
            g.label = numbered_label(&g.label, &mut taken);
        }
    }
}

/// The first free `label #n`; ends because `taken` holds fewer labels than there are numbers.
fn numbered_label(label: &str, taken: &mut HashSet<String>) -> String {
    let mut n: usize = 2;
    loop {
        let candidate = format!("{label} #{n}");
        if taken.insert(candidate.clone()) {
            return candidate;
        }
        n = n.saturating_add(1);
    }
}

fn kind_rank(kind: GroupKind) -> u8 {
    match kind {
        GroupKind::Gguf => 0,
        GroupKind::Projector => 1,
        GroupKind::Safetensors => 2,
        GroupKind::Other => 3,
    }
}

/// GGUF quants smallest first (what fits is what users look for), then projectors, safetensors
/// and the rest by path.
fn display_order(a: &FileGroup, b: &FileGroup) -> Ordering {
    kind_rank(a.kind)
        .cmp(&kind_rank(b.kind))
        .then_with(|| match a.kind {
            GroupKind::Other => first_path(a).cmp(first_path(b)),
            _ => (a.total_bytes, &a.label).cmp(&(b.total_bytes, &b.label)),
        })
        .then_with(|| a.label.cmp(&b.label))
}

fn first_path(g: &FileGroup) -> &str {
    g.files.first().map_or("", |f| f.path.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::RepoPath;

    const GIB: u64 = 1 << 30;

    fn file(path: &str, size_bytes: u64) -> RepoFile {
        RepoFile {
            path: RepoPath::parse(path).unwrap(),
            size_bytes,
            git_oid: "0".repeat(40),
            lfs_sha256: None,
        }
    }

    fn labels(groups: &[FileGroup]) -> Vec<&str> {
        groups.iter().map(|g| g.label.as_str()).collect()
    }

    fn paths(group: &FileGroup) -> Vec<&str> {
        group.files.iter().map(|f| f.path.as_str()).collect()
    }

    fn by_label<'a>(groups: &'a [FileGroup], label: &str) -> &'a FileGroup {
        groups
            .iter()
            .find(|g| g.label == label)
            .unwrap_or_else(|| panic!("no group {label:?} in {:?}", labels(groups)))
    }

    #[test]
    fn quant_labels_of_real_names() {
        for (name, quant) in [
            ("GLM-5.2-UD-IQ2_M-00001-of-00006.gguf", "UD-IQ2_M"),
            ("Qwen3-30B-A3B-Q4_K_M.gguf", "Q4_K_M"),
            ("gemma-3-27b-it-qat-Q4_0.gguf", "Q4_0"),
            ("Llama-3.3-70B-Instruct-Q8_0-00001-of-00002.gguf", "Q8_0"),
            ("DeepSeek-V3.1-Terminus-UD-TQ1_0.gguf", "UD-TQ1_0"),
            ("gpt-oss-120b-MXFP4-00001-of-00002.gguf", "MXFP4"),
            ("gpt-oss-20b-MXFP4_MOE.gguf", "MXFP4_MOE"),
            ("model.IQ4_XS.gguf", "IQ4_XS"),
            ("qwen2.5-7b-instruct-q4_k_m.gguf", "Q4_K_M"),
            ("Qwen3-8B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
            ("mmproj-F16.gguf", "F16"),
            ("mmproj-model-f16.gguf", "F16"),
            ("Qwen_Qwen3-8B-bf16.gguf", "BF16"),
            ("llama-2-7b.Q4_K_M.gguf", "Q4_K_M"),
            ("Meta-Llama-3.1-8B-Instruct.i1-IQ1_S.gguf", "IQ1_S"),
            (
                "Qwen3-235B-A22B-Instruct-2507-UD-Q2_K_XL-00001-of-00002.gguf",
                "UD-Q2_K_XL",
            ),
            ("Llama-3.2-3B-Instruct-Q4_0_4_4.gguf", "Q4_0_4_4"),
            ("DeepSeek-R1-IQ4_K_R4-00001-of-00010.gguf", "IQ4_K_R4"),
            ("Kimi-K2-Q8_0_R8.gguf", "Q8_0_R8"),
            ("QwQ-32B-Q5_K_S.gguf", "Q5_K_S"),
            ("x-ud-iq1_m.gguf", "UD-IQ1_M"),
            ("Q4_K_M.gguf", "Q4_K_M"),
            ("model-F32.GGUF", "F32"),
            // The last quant token names the file's own type.
            ("DeepSeek-V3-FP8-Q4_K_M.gguf", "Q4_K_M"),
            ("model-Q4_K_M-imat.gguf", "Q4_K_M"),
        ] {
            assert_eq!(quant_label(name).as_deref(), Some(quant), "{name}");
        }
    }

    #[test]
    fn every_known_quant_type_is_recognised() {
        let known = [
            "Q2_K",
            "Q2_K_L",
            "Q2_K_XL",
            "Q3_K_S",
            "Q3_K_M",
            "Q3_K_L",
            "Q3_K_XL",
            "Q4_0",
            "Q4_1",
            "Q4_K_S",
            "Q4_K_M",
            "Q4_K_L",
            "Q4_K_XL",
            "Q5_0",
            "Q5_1",
            "Q5_K_S",
            "Q5_K_M",
            "Q5_K_L",
            "Q5_K_XL",
            "Q6_K",
            "Q6_K_L",
            "Q6_K_XL",
            "Q8_0",
            "Q8_K_XL",
            "IQ1_S",
            "IQ1_M",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ2_S",
            "IQ2_M",
            "IQ3_XXS",
            "IQ3_XS",
            "IQ3_S",
            "IQ3_M",
            "IQ4_XS",
            "IQ4_NL",
            "TQ1_0",
            "TQ2_0",
            "MXFP4",
            "MXFP4_MOE",
            "F16",
            "BF16",
            "F32",
            "FP16",
            "FP8",
            "IQ2_KS",
            "IQ2_K",
            "IQ3_K",
            "IQ4_KS",
            "IQ4_K",
            "IQ5_K",
            "IQ6_K",
            "IQ1_KT",
            "IQ2_KT",
            "IQ3_KT",
            "IQ4_KT",
            "IQ4_KSS",
        ];
        for quant in known {
            for name in [
                format!("Model-7B-{quant}.gguf"),
                format!("model-7b-{}.gguf", quant.to_lowercase()),
                format!("Model-7B-{quant}-00002-of-00003.gguf"),
            ] {
                assert_eq!(quant_label(&name).as_deref(), Some(quant), "{name}");
            }
            let dynamic = format!("Model-UD-{quant}.gguf");
            assert_eq!(
                quant_label(&dynamic),
                Some(format!("UD-{quant}")),
                "{dynamic}"
            );
        }
    }

    #[test]
    fn names_without_a_quant() {
        for name in [
            "ggml-model.gguf",
            "Qwen3-30B-A3B.gguf",
            "QwQ-32B.gguf",
            "Qwen3-8B-00001-of-00002.gguf",
            "model-Q4.gguf",
            "model-Q4_.gguf",
            "model-Q_K.gguf",
            "model-TQ1_K.gguf",
            "model-Q4_TOOLONG.gguf",
            "model-UD.gguf",
            "README.md",
            ".gguf",
            "",
            "ü-ß.gguf",
        ] {
            assert_eq!(quant_label(name), None, "{name}");
        }
    }

    /// Part of unsloth's GLM listing: quants in folders, split, listed out of order.
    fn unsloth_listing() -> Vec<RepoFile> {
        vec![
            file("README.md", 10_000),
            file("UD-IQ2_M/GLM-5.2-UD-IQ2_M-00003-of-00003.gguf", 30 * GIB),
            file("UD-IQ2_M/GLM-5.2-UD-IQ2_M-00001-of-00003.gguf", 50 * GIB),
            file("UD-IQ2_M/GLM-5.2-UD-IQ2_M-00002-of-00003.gguf", 50 * GIB),
            file("Q8_0/GLM-5.2-Q8_0-00001-of-00002.gguf", 300 * GIB),
            file("Q8_0/GLM-5.2-Q8_0-00002-of-00002.gguf", 100 * GIB),
            file("GLM-5.2-UD-TQ1_0.gguf", 80 * GIB),
            file("mmproj-F16.gguf", 900_000_000),
            file("config.json", 2_000),
            file("images/logo.png", 40_000),
            file("BF16/GLM-5.2-BF16-00001-of-00002.gguf", 700 * GIB),
            file("BF16/GLM-5.2-BF16-00002-of-00002.gguf", 700 * GIB),
            file(".gitattributes", 1_500),
        ]
    }

    #[test]
    fn groups_quants_smallest_first_then_projectors_then_other_by_path() {
        let groups = group(&unsloth_listing());
        assert_eq!(
            labels(&groups),
            [
                "UD-TQ1_0",
                "UD-IQ2_M",
                "Q8_0",
                "BF16",
                "mmproj-F16",
                ".gitattributes",
                "README.md",
                "config.json",
                "logo.png"
            ]
        );
        let kinds: Vec<GroupKind> = groups.iter().map(|g| g.kind).collect();
        use GroupKind::*;
        assert_eq!(
            kinds,
            [Gguf, Gguf, Gguf, Gguf, Projector, Other, Other, Other, Other]
        );
        let iq2 = by_label(&groups, "UD-IQ2_M");
        assert_eq!(
            paths(iq2),
            [
                "UD-IQ2_M/GLM-5.2-UD-IQ2_M-00001-of-00003.gguf",
                "UD-IQ2_M/GLM-5.2-UD-IQ2_M-00002-of-00003.gguf",
                "UD-IQ2_M/GLM-5.2-UD-IQ2_M-00003-of-00003.gguf",
            ]
        );
        assert_eq!(iq2.total_bytes, 130 * GIB);
        assert_eq!(iq2.missing, None);
        assert_eq!(by_label(&groups, "BF16").total_bytes, 1400 * GIB);
        assert_eq!(by_label(&groups, "UD-TQ1_0").files.len(), 1);
    }

    #[test]
    fn grouping_ignores_listing_order() {
        let mut reversed = unsloth_listing();
        reversed.reverse();
        assert_eq!(group(&unsloth_listing()), group(&reversed));
        assert_eq!(group(&[]), Vec::new());
    }

    #[test]
    fn folder_names_the_quant_when_files_do_not() {
        let groups = group(&[
            file("Q4_K_M/x-00001-of-00003.gguf", 5),
            file("Q4_K_M/x-00003-of-00003.gguf", 7),
            file("UD-IQ2_M/deeper/y.gguf", 1),
            // The file's own quant wins over its folder's.
            file("Q8_0/z-Q6_K.gguf", 3),
        ]);
        assert_eq!(labels(&groups), ["UD-IQ2_M", "Q6_K", "Q4_K_M"]);
        let q4 = by_label(&groups, "Q4_K_M");
        assert_eq!(q4.total_bytes, 12);
        let missing = q4.missing.as_ref().expect("part 2 is missing");
        assert_eq!(missing.ranges, [(2, 2)]);
        assert_eq!(missing.count, 3);
        assert_eq!(
            missing.to_string(),
            "'Q4_K_M/x-00002-of-00003.gguf' is",
            "the message names the path in the repository"
        );
    }

    #[test]
    fn files_without_a_quant_are_labelled_by_stem() {
        let groups = group(&[
            file("ggml-model.gguf", 1),
            file("sharded-00001-of-00002.gguf", 2),
            file("sharded-00002-of-00002.gguf", 2),
            file(".gguf", 9),
        ]);
        assert_eq!(labels(&groups), ["ggml-model", "sharded", ".gguf"]);
        assert_eq!(by_label(&groups, "sharded").files.len(), 2);
    }

    #[test]
    fn projectors_are_apart_and_labelled_by_their_own_type() {
        for name in [
            "mmproj-F16.gguf",
            "mmproj-model-f16.gguf",
            "F16/mmproj-f16.gguf",
        ] {
            let groups = group(&[file(name, 1), file("m-F16.gguf", 2)]);
            assert_eq!(labels(&groups), ["F16", "mmproj-F16"], "{name}");
            assert_eq!(groups.get(1).map(|g| g.kind), Some(GroupKind::Projector));
        }
        let groups = group(&[file("Q4_K_M/mmproj.gguf", 1)]);
        assert_eq!(
            labels(&groups),
            ["mmproj"],
            "a folder's quant is the model's, not its"
        );
    }

    #[test]
    fn same_label_different_models_stay_apart_with_unique_labels() {
        let groups = group(&[
            file("a-Q4_K_M.gguf", 1),
            file("sub/b-Q4_K_M.gguf", 2),
            file("c-Q8_0.gguf", 3),
        ]);
        assert_eq!(
            labels(&groups),
            [
                "Q4_K_M (a-Q4_K_M.gguf)",
                "Q4_K_M (sub/b-Q4_K_M.gguf)",
                "Q8_0"
            ]
        );
        // One prefix in two folders, or with two part counts, is two models.
        let groups = group(&[
            file("x/m-Q2_K-00001-of-00002.gguf", 1),
            file("x/m-Q2_K-00002-of-00002.gguf", 1),
            file("y/m-Q2_K-00001-of-00002.gguf", 1),
            file("y/m-Q2_K-00001-of-00003.gguf", 1),
        ]);
        assert_eq!(groups.len(), 3);
        let unique: HashSet<&str> = labels(&groups).into_iter().collect();
        assert_eq!(unique.len(), 3, "{:?}", labels(&groups));
        let x = by_label(&groups, "Q2_K (x/m-Q2_K-00001-of-00002.gguf)");
        assert_eq!(x.missing, None);
        let y3 = by_label(&groups, "Q2_K (y/m-Q2_K-00001-of-00003.gguf)");
        assert_eq!(
            y3.missing.as_ref().map(|m| m.ranges.clone()),
            Some(vec![(2, 3)])
        );
    }

    #[test]
    fn labels_stay_unique_even_when_a_stem_mimics_a_disambiguated_label() {
        let groups = group(&[
            file("a-Q4_K_M.gguf", 1),
            file("b/a-Q4_K_M.gguf", 1),
            // Not GGUF, so labelled by its name, which reads like a disambiguated label.
            file("Q4_K_M (a-Q4_K_M.gguf)", 1),
            file("README.md", 1),
            file("docs/README.md", 1),
        ]);
        let all = labels(&groups);
        let unique: HashSet<&str> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        assert!(all.contains(&"README.md (docs/README.md)"), "{all:?}");
    }

    #[test]
    fn a_claimed_65535_part_model_costs_one_range() {
        let groups = group(&[file("x-00001-of-65535.gguf", 7)]);
        let [only] = groups.as_slice() else {
            panic!("{groups:?}")
        };
        assert_eq!((only.label.as_str(), only.total_bytes), ("x", 7));
        let missing = only.missing.as_ref().expect("missing parts");
        assert_eq!(missing.ranges, [(2, 65535)]);
        assert_eq!(missing.total(), 65534);
        assert!(missing.to_string().len() < 200, "{missing}");
    }

    #[test]
    fn sizes_are_summed_without_overflow() {
        let groups = group(&[
            file("m-Q4_0-00001-of-00002.gguf", u64::MAX),
            file("m-Q4_0-00002-of-00002.gguf", u64::MAX),
            file("model-00001-of-00002.safetensors", u64::MAX),
            file("model-00002-of-00002.safetensors", 1),
        ]);
        assert!(groups.iter().all(|g| g.total_bytes == u64::MAX));
    }

    #[test]
    fn safetensors_are_one_group_with_their_index() {
        let groups = group(&[
            file("model-00002-of-00002.safetensors", 20),
            file("tokenizer.json", 3),
            file("model.safetensors.index.json", 1),
            file("model-00001-of-00002.safetensors", 10),
            file("Model-Q4_K_M.gguf", 100),
        ]);
        assert_eq!(labels(&groups), ["Q4_K_M", "safetensors", "tokenizer.json"]);
        let weights = by_label(&groups, "safetensors");
        assert_eq!(weights.kind, GroupKind::Safetensors);
        assert_eq!(weights.total_bytes, 31);
        assert_eq!(
            paths(weights),
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json"
            ]
        );
    }

    #[test]
    fn equal_sizes_order_by_label() {
        let groups = group(&[
            file("m-Q8_0.gguf", 5),
            file("m-Q4_0.gguf", 5),
            file("m-Q2_K.gguf", 9),
        ]);
        assert_eq!(labels(&groups), ["Q4_0", "Q8_0", "Q2_K"]);
    }

    fn quants() -> Vec<FileGroup> {
        group(&[
            file("m-Q4_K_M.gguf", 4),
            file("m-Q4_K_S.gguf", 3),
            file("m-UD-Q4_K_XL.gguf", 5),
            file("m-Q8_0.gguf", 8),
            file("m-UD-IQ2_M.gguf", 2),
            file("mmproj-F16.gguf", 1),
            file("README.md", 1),
        ])
    }

    fn found(groups: &[FileGroup], quant: &str) -> Result<String, String> {
        find(groups, quant).map(|g| g.label.clone())
    }

    #[test]
    fn find_exact_case_insensitive_and_without_dynamic_prefix() {
        let groups = quants();
        assert_eq!(found(&groups, "Q4_K_M"), Ok("Q4_K_M".into()));
        assert_eq!(found(&groups, "q4_k_m"), Ok("Q4_K_M".into()));
        assert_eq!(found(&groups, " ud-q4_k_xl "), Ok("UD-Q4_K_XL".into()));
        assert_eq!(found(&groups, "Q4_K_XL"), Ok("UD-Q4_K_XL".into()));
        assert_eq!(found(&groups, "mmproj-f16"), Ok("mmproj-F16".into()));
    }

    #[test]
    fn find_by_unique_prefix() {
        let groups = quants();
        assert_eq!(found(&groups, "q8"), Ok("Q8_0".into()));
        assert_eq!(found(&groups, "IQ2"), Ok("UD-IQ2_M".into()));
        assert_eq!(found(&groups, "mmproj"), Ok("mmproj-F16".into()));
    }

    #[test]
    fn exact_match_wins_over_prefix() {
        let groups = group(&[file("m-Q4_K.gguf", 1), file("m-Q4_K_M.gguf", 2)]);
        assert_eq!(found(&groups, "q4_k"), Ok("Q4_K".into()));
    }

    #[test]
    fn find_ambiguous_lists_the_candidates() {
        let groups = quants();
        let error = found(&groups, "q4_k").expect_err("three quants start so");
        assert!(error.contains("Q4_K_S, Q4_K_M, UD-Q4_K_XL"), "{error}");
        assert!(!error.contains("Q8_0"), "{error}");
        let dupes = group(&[file("a-Q4_K_M.gguf", 1), file("sub/b-Q4_K_M.gguf", 2)]);
        let error = found(&dupes, "Q4_K_M").expect_err("two models share the quant");
        assert!(error.contains("Q4_K_M (sub/b-Q4_K_M.gguf)"), "{error}");
        assert_eq!(
            found(&dupes, "q4_k_m (sub"),
            Ok("Q4_K_M (sub/b-Q4_K_M.gguf)".into())
        );
    }

    #[test]
    fn find_unknown_lists_what_there_is() {
        let groups = quants();
        let error = found(&groups, "Q5_K_M").expect_err("no such quant");
        assert!(error.contains("'Q5_K_M'"), "{error}");
        assert!(
            error.contains("UD-IQ2_M, Q4_K_S, Q4_K_M, UD-Q4_K_XL, Q8_0, mmproj-F16"),
            "{error}"
        );
        assert!(!error.contains("README"), "{error}");
        assert!(
            found(&groups, "README.md").is_err(),
            "other files are not quants"
        );
        let error = found(&groups, "  ").expect_err("nothing named");
        assert!(error.contains("REPO:UD-IQ2_M"), "{error}");
        let error = found(&group(&[file("README.md", 1)]), "Q4_K_M").expect_err("no weights");
        assert!(error.contains("no GGUF"), "{error}");
    }

    #[test]
    fn long_listings_and_queries_make_short_messages() {
        let listing: Vec<RepoFile> = (0..1000).map(|i| file(&format!("m{i}.gguf"), i)).collect();
        let groups = group(&listing);
        let error = found(&groups, &"z".repeat(10_000)).expect_err("unknown");
        assert!(error.contains("and 960 more"), "{error}");
        assert!(error.len() < 1000, "{}", error.len());
    }

    #[test]
    fn serialises_for_the_ui() {
        let groups = group(&[file("x/m-Q2_K-00001-of-00002.gguf", 3)]);
        let json = serde_json::to_value(&groups).unwrap();
        assert_eq!(json[0]["kind"], "gguf");
        assert_eq!(json[0]["label"], "Q2_K");
        assert_eq!(json[0]["total_bytes"], 3);
        assert_eq!(json[0]["files"][0]["path"], "x/m-Q2_K-00001-of-00002.gguf");
        assert_eq!(json[0]["missing"]["ranges"][0][0], 2);
        assert_eq!(
            serde_json::to_value(GroupKind::Safetensors).unwrap(),
            "safetensors"
        );
    }

    #[test]
    fn odd_names_never_panic_and_labels_stay_unique() {
        // A small deterministic generator: names built from the pieces that trip parsers.
        let pieces = [
            "-",
            ".",
            "_",
            "Q4",
            "_K",
            "_M",
            "UD",
            "IQ2",
            "00001",
            "-of-",
            "00002",
            "65535",
            ".gguf",
            ".GGUF",
            "mmproj",
            "ü",
            "B",
            "F16",
            "safetensors",
            "/",
            "a",
            " (",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize
        };
        let mut listing = Vec::new();
        for _ in 0..3000 {
            let name: String = (0..1 + next() % 8)
                .map(|_| pieces[next() % pieces.len()])
                .collect();
            let _ = quant_label(&name);
            if let Ok(path) = RepoPath::parse(&name) {
                listing.push(RepoFile {
                    path,
                    size_bytes: next() as u64,
                    git_oid: String::new(),
                    lfs_sha256: None,
                });
            }
        }
        let groups = group(&listing);
        let all = labels(&groups);
        let unique: HashSet<&str> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len());
        let grouped: usize = groups.iter().map(|g| g.files.len()).sum();
        assert_eq!(
            grouped,
            listing.len(),
            "every file lands in exactly one group"
        );
        for g in groups.iter().filter(|g| g.kind != GroupKind::Other) {
            let chosen = find(&groups, &g.label).map(|c| c.label.as_str());
            assert_eq!(chosen, Ok(g.label.as_str()), "a label finds its own group");
        }
    }
}
