//! CUDA builds: which architectures to compile for (from the GPUs, or a user's list) and
//! where the CUDA compiler is.

use std::path::PathBuf;

use rigdeck_telemetry::snapshot::{ComputeCapability, GpuReadout};

use super::BuildError;
use crate::{find_in_path, is_executable_file};

/// [`cuda_architectures`] of the GPUs NVML reports (the CLI's and the API's default).
pub fn cuda_architectures_of(gpus: &GpuReadout) -> Option<String> {
    let capabilities: Vec<ComputeCapability> = gpus
        .gpus
        .iter()
        .filter_map(|gpu| gpu.compute_capability)
        .collect();
    cuda_architectures(&capabilities)
}

/// The `CMAKE_CUDA_ARCHITECTURES` list for these GPUs: compute capability 8.6 → `86`, sorted,
/// each once, `;`-separated (`86;120`). `None` when no GPU reports one. llama.cpp itself turns a
/// plain `120` into `120a` (the Blackwell FP4 instructions need the arch-specific variant).
pub fn cuda_architectures(capabilities: &[ComputeCapability]) -> Option<String> {
    let mut archs: Vec<i32> = capabilities
        .iter()
        .filter(|c| c.major > 0 && (0..10).contains(&c.minor))
        .map(|c| c.major * 10 + c.minor)
        .collect();
    archs.sort_unstable();
    archs.dedup();
    (!archs.is_empty()).then(|| {
        archs
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(";")
    })
}

/// Checks a user's architecture list (`86`, `86;120`, `89,90`, `120a-real`, `native`) and returns
/// it `;`-separated, as CMake wants it.
pub fn parse_cuda_architectures(text: &str) -> Result<String, BuildError> {
    let bad = || BuildError::BadCudaArchitectures(text.to_owned());
    let parts: Vec<&str> = text
        .split([';', ',', ' '])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return Err(bad());
    }
    for part in &parts {
        if matches!(*part, "native" | "all" | "all-major") && parts.len() == 1 {
            continue;
        }
        let base = part
            .strip_suffix("-real")
            .or_else(|| part.strip_suffix("-virtual"))
            .unwrap_or(part);
        let digits = base.trim_end_matches(['a', 'f']);
        let ok = (2..=3).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && base.len() - digits.len() <= 1;
        if !ok {
            return Err(bad());
        }
    }
    Ok(parts.join(";"))
}

/// The CUDA compiler: `$CUDACXX`, `nvcc` on PATH, `$CUDA_HOME/bin`, `$CUDA_PATH/bin`, then the
/// toolkit's usual place.
pub fn find_nvcc() -> Option<PathBuf> {
    if let Some(cudacxx) = std::env::var_os("CUDACXX").map(PathBuf::from) {
        if is_executable_file(&cudacxx) {
            return Some(cudacxx);
        }
    }
    if let Some(nvcc) = find_in_path("nvcc") {
        return Some(nvcc);
    }
    ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|home| PathBuf::from(home).join("bin/nvcc"))
        .chain([PathBuf::from("/usr/local/cuda/bin/nvcc")])
        .find(|p| is_executable_file(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(major: i32, minor: i32) -> ComputeCapability {
        ComputeCapability { major, minor }
    }

    #[test]
    fn cuda_architectures_come_from_the_gpus_compute_capabilities() {
        assert_eq!(
            cuda_architectures(&[cc(12, 0), cc(8, 6), cc(8, 6)]).as_deref(),
            Some("86;120")
        );
        assert_eq!(cuda_architectures(&[cc(9, 0)]).as_deref(), Some("90"));
        assert_eq!(
            cuda_architectures(&[cc(8, 9), cc(7, 5), cc(8, 0)]).as_deref(),
            Some("75;80;89")
        );
        assert_eq!(cuda_architectures(&[]), None);
        assert_eq!(cuda_architectures(&[cc(0, 0)]), None);
    }

    #[test]
    fn user_architecture_lists_are_checked_and_normalised() {
        assert_eq!(parse_cuda_architectures("86").unwrap(), "86");
        assert_eq!(parse_cuda_architectures("86,120").unwrap(), "86;120");
        assert_eq!(parse_cuda_architectures(" 89 ; 90 ").unwrap(), "89;90");
        assert_eq!(
            parse_cuda_architectures("120a-real;90-virtual").unwrap(),
            "120a-real;90-virtual"
        );
        assert_eq!(parse_cuda_architectures("native").unwrap(), "native");
        for bad in ["", "8.6", "sm_86", "86;$(rm -rf /)", "1234", "native;86"] {
            let err = parse_cuda_architectures(bad).unwrap_err().to_string();
            assert!(err.contains("invalid CUDA architectures"), "{bad}: {err}");
        }
    }
}
