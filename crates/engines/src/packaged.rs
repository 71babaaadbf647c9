//! The llama.cpp builds a Rigdeck package ships next to its binaries
//! (`<prefix>/lib/rigdeck/engines/<build>/bin/llama-server`): found where the running executable
//! was installed, probed like any other build, so a fresh install plans, runs and chats without
//! compiling anything.

use std::path::{Path, PathBuf};

use super::registry::{llama_binary, BuildOrigin, NewEngineBuild, RegistryError};
use super::Backend;

/// Points Rigdeck at another folder of shipped builds (tests, a relocated tarball install).
pub const PACKAGED_ENGINES_ENV: &str = "RIGDECK_PACKAGED_ENGINES";

/// Where a package puts its engine builds, relative to the folder of the `rigdeck` binary.
const BESIDE_BINARY: &str = "../lib/rigdeck/engines";

/// The folder of shipped builds: `RIGDECK_PACKAGED_ENGINES`, else `lib/rigdeck/engines` beside
/// the executable's `bin` folder (`/usr/bin` → `/usr/lib/rigdeck/engines`). `None` when there is
/// none, as in a build from source.
pub fn packaged_engines_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os(PACKAGED_ENGINES_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe().ok()?.parent()?.join(BESIDE_BINARY),
    };
    // `/usr/bin/../lib/…` → `/usr/lib/…`: the path users see and the registry keys on.
    std::fs::canonicalize(dir).ok().filter(|dir| dir.is_dir())
}

/// Each build folder's `llama-server` under `dir` (one folder per build, as `rigdeck engines
/// build` lays them out), sorted by path.
pub fn shipped_servers(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut servers: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path().join("bin/llama-server"))
        .filter(|server| super::is_executable_file(server))
        .collect();
    servers.sort();
    servers
}

/// The build to store for a shipped `llama-server`: probed like a registered one, its backend
/// from its folder's name (`…-cuda`, `…-vulkan`; the packages ship CPU builds), which also names
/// it when the binary reports no version.
pub async fn probe_shipped(server: &Path) -> Result<NewEngineBuild, RegistryError> {
    let folder = server
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let backend = backend_of_folder(&folder);
    let build = llama_binary(server, None, Some(backend), &folder).await?;
    Ok(NewEngineBuild {
        source: BuildOrigin::Packaged,
        ..build
    })
}

/// `llama.cpp-0c1e570-cpu-portable` → CPU; the backend is the first of its dash-separated words
/// that names one.
fn backend_of_folder(folder: &str) -> Backend {
    folder
        .split('-')
        .find_map(|word| word.parse::<Backend>().ok())
        .unwrap_or(Backend::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_backend_comes_from_the_build_folder_name() {
        assert_eq!(
            backend_of_folder("llama.cpp-0c1e570-cpu-portable"),
            Backend::Cpu
        );
        assert_eq!(backend_of_folder("llama.cpp-0c1e570-cuda"), Backend::Cuda);
        assert_eq!(
            backend_of_folder("ik_llama.cpp-src-1a2b-vulkan"),
            Backend::Vulkan
        );
        assert_eq!(backend_of_folder("odd"), Backend::Cpu);
    }

    #[test]
    fn only_executable_servers_in_build_folders_count() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        for (build, mode) in [("b-cpu", 0o755), ("a-cpu", 0o755), ("c-cpu", 0o644)] {
            let bin = dir.path().join(build).join("bin");
            std::fs::create_dir_all(&bin)?;
            let server = bin.join("llama-server");
            std::fs::write(&server, "#!/bin/sh\n")?;
            std::fs::set_permissions(&server, std::fs::Permissions::from_mode(mode))?;
        }
        std::fs::create_dir_all(dir.path().join("empty"))?;
        let found = shipped_servers(dir.path());
        assert_eq!(
            found,
            [
                dir.path().join("a-cpu/bin/llama-server"),
                dir.path().join("b-cpu/bin/llama-server")
            ]
        );
        assert!(shipped_servers(&dir.path().join("nowhere")).is_empty());
        Ok(())
    }
}
