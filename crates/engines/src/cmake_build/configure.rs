//! The CMake configure step: the options a tree declares, and the exact `cmake` arguments for a
//! backend, a build type and the targets Rigdeck wants.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::{io_err, BuildError};
use crate::Backend;

/// The `option(...)` names a tree's top-level `CMakeLists.txt` (and its `ggml/CMakeLists.txt`)
/// declares. Flags depend on them: current llama.cpp builds `llama-server` under `tools/`
/// (`LLAMA_BUILD_TOOLS`), older trees and ik_llama.cpp under `examples/` (`LLAMA_BUILD_EXAMPLES`);
/// the RPC backend (`GGML_RPC`) is a ggml option.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeOptions {
    declared: BTreeSet<String>,
}

impl TreeOptions {
    pub fn parse(cmakelists: &str) -> Self {
        let mut declared = BTreeSet::new();
        for line in cmakelists.lines() {
            let line = line.trim_start();
            if line.starts_with('#') {
                continue;
            }
            let Some(rest) = line.strip_prefix("option") else {
                continue;
            };
            let Some(rest) = rest.trim_start().strip_prefix('(') else {
                continue;
            };
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                declared.insert(name);
            }
        }
        Self { declared }
    }

    pub fn read(tree: &Path) -> Result<Self, BuildError> {
        let path = tree.join("CMakeLists.txt");
        let mut text = fs::read_to_string(&path).map_err(io_err("read", &path))?;
        let ggml = tree.join("ggml").join("CMakeLists.txt");
        if ggml.is_file() {
            text.push('\n');
            text.push_str(&fs::read_to_string(&ggml).map_err(io_err("read", &ggml))?);
        }
        Ok(Self::parse(&text))
    }

    pub fn declares(&self, name: &str) -> bool {
        self.declared.contains(name)
    }
}

/// Writes the script that generates `common/build-info.cpp` when the tree has the template but
/// not the script: the `ik-llama-cpp-python` sdist leaves `common/cmake/` out, and its build would
/// otherwise stop at "Generating build details from Git". The script is Rigdeck's own (a CMake
/// `configure_file` of the template); `version` is what `--version` shows in place of the
/// commit. Returns whether it was written.
pub fn supply_build_info(tree: &Path, version: &str) -> Result<bool, BuildError> {
    let common = tree.join("common");
    let script = common.join("cmake/build-info-gen-cpp.cmake");
    if !common.join("build-info.cpp.in").is_file() || script.exists() {
        return Ok(false);
    }
    // The version text comes from the pin or a hash, never from the archive; kept to plain
    // characters all the same, as it lands inside a CMake string.
    let version: String = version
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    let text = format!(
        "# Written by Rigdeck: the source this tree came from has no build-info generator.\n\
         set(BUILD_NUMBER 0)\n\
         set(BUILD_COMMIT \"{version}\")\n\
         set(BUILD_COMPILER \"unknown\")\n\
         set(BUILD_TARGET \"unknown\")\n\
         configure_file(\"${{CMAKE_CURRENT_SOURCE_DIR}}/common/build-info.cpp.in\" \
         \"${{CMAKE_CURRENT_SOURCE_DIR}}/common/build-info.cpp\" @ONLY)\n"
    );
    let folder = common.join("cmake");
    fs::create_dir_all(&folder).map_err(io_err("create the folder", &folder))?;
    fs::write(&script, text).map_err(io_err("write", &script))?;
    Ok(true)
}

/// Everything that decides the configure command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigurePlan {
    pub backend: Backend,
    pub cuda_architectures: Option<String>,
    pub cuda_compiler: Option<PathBuf>,
    /// Passed as `LLAMA_BUILD_COMMIT` when the tree has no git history to read it from.
    pub commit: Option<String>,
    pub options: TreeOptions,
    /// Built for other machines: see [`super::BuildRequest::portable`].
    pub portable: bool,
}

/// The `cmake` arguments that configure `tree` into `cmake_dir`.
pub fn configure_args(tree: &Path, cmake_dir: &Path, plan: &ConfigurePlan) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-S".into(),
        tree.to_string_lossy().into_owned(),
        "-B".into(),
        cmake_dir.to_string_lossy().into_owned(),
        "-G".into(),
        "Ninja".into(),
        "-DCMAKE_BUILD_TYPE=Release".into(),
        // No libcurl: Rigdeck downloads models itself; one dependency fewer to install.
        "-DLLAMA_CURL=OFF".into(),
        // Static: the binaries keep working when the build tree is cleaned or moved.
        "-DBUILD_SHARED_LIBS=OFF".into(),
        "-DLLAMA_BUILD_TESTS=OFF".into(),
    ];
    if plan.options.declares("LLAMA_BUILD_TOOLS") {
        args.push("-DLLAMA_BUILD_TOOLS=ON".into());
        args.push("-DLLAMA_BUILD_EXAMPLES=OFF".into());
    } else {
        // Older layout (ik_llama.cpp): the server and llama-bench are examples.
        args.push("-DLLAMA_BUILD_EXAMPLES=ON".into());
    }
    if plan.options.declares("LLAMA_BUILD_SERVER") {
        args.push("-DLLAMA_BUILD_SERVER=ON".into());
    }
    if plan.options.declares("LLAMA_USE_PREBUILT_UI") {
        // Otherwise the build downloads the server's web UI from Hugging Face: no network
        // during a build, and Rigdeck has its own UI.
        args.push("-DLLAMA_USE_PREBUILT_UI=OFF".into());
    }
    if plan.options.declares("GGML_RPC") {
        // The RPC backend: `rpc-server` lends this rig's devices, and `--rpc` in llama-server
        // uses another rig's (through the fleet's tunnel, never the bare network).
        args.push("-DGGML_RPC=ON".into());
    }
    if let Some(commit) = &plan.commit {
        args.push(format!("-DLLAMA_BUILD_COMMIT={commit}"));
    }
    if plan.portable {
        // With GGML_NATIVE off, ggml turns on AVX, AVX2, FMA, F16C and BMI2 itself: what any
        // x86-64 CPU of the last ten years runs, where -march=native would crash on older ones.
        args.push("-DGGML_NATIVE=OFF".into());
    }
    match plan.backend {
        Backend::Cpu | Backend::Rocm => {}
        Backend::Cuda => {
            args.push("-DGGML_CUDA=ON".into());
            if let Some(archs) = &plan.cuda_architectures {
                args.push(format!("-DCMAKE_CUDA_ARCHITECTURES={archs}"));
            }
            if let Some(nvcc) = &plan.cuda_compiler {
                args.push(format!("-DCMAKE_CUDA_COMPILER={}", nvcc.display()));
            }
        }
        Backend::Vulkan => args.push("-DGGML_VULKAN=ON".into()),
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_build_info_generator_is_stood_in_for() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join("common");
        fs::create_dir_all(&common).unwrap();
        fs::write(common.join("build-info.cpp.in"), "x").unwrap();
        assert!(supply_build_info(dir.path(), "py0.1.5\"; evil").unwrap());
        let script = fs::read_to_string(common.join("cmake/build-info-gen-cpp.cmake")).unwrap();
        assert!(
            script.contains("set(BUILD_COMMIT \"py0.1.5evil\")"),
            "{script}"
        );
        assert!(script.contains("configure_file("), "{script}");
        // Written once; a tree without the template is left alone.
        assert!(!supply_build_info(dir.path(), "other").unwrap());
        let bare = tempfile::tempdir().unwrap();
        assert!(!supply_build_info(bare.path(), "v").unwrap());
        assert!(!bare.path().join("common").exists());
    }

    #[test]
    fn tree_options_are_read_from_option_declarations() {
        let text = "option(LLAMA_BUILD_TOOLS \"llama: build tools\" ON)\n\
                    # option(LLAMA_COMMENTED \"no\" ON)\n\
                    option (LLAMA_BUILD_SERVER \"server\" ON)\n\
                    set(LLAMA_NOT_AN_OPTION ON)\n";
        let options = TreeOptions::parse(text);
        assert!(options.declares("LLAMA_BUILD_TOOLS"));
        assert!(options.declares("LLAMA_BUILD_SERVER"));
        assert!(!options.declares("LLAMA_COMMENTED"));
        assert!(!options.declares("LLAMA_NOT_AN_OPTION"));
    }

    fn plan(backend: Backend, options: &str) -> ConfigurePlan {
        ConfigurePlan {
            backend,
            cuda_architectures: Some("86;120".into()),
            cuda_compiler: Some(PathBuf::from("/usr/local/cuda/bin/nvcc")),
            commit: None,
            options: TreeOptions::parse(options),
            portable: false,
        }
    }

    const CURRENT_TREE: &str = "option(LLAMA_BUILD_TOOLS \"\" ON)\noption(LLAMA_BUILD_SERVER \"\" ON)\noption(LLAMA_USE_PREBUILT_UI \"\" ON)\n";

    #[test]
    fn configure_flags_for_a_current_tree_on_cpu() {
        let args = configure_args(
            Path::new("/src"),
            Path::new("/b/cmake"),
            &ConfigurePlan {
                commit: Some("0c1e570".into()),
                ..plan(Backend::Cpu, CURRENT_TREE)
            },
        );
        assert_eq!(
            args,
            [
                "-S",
                "/src",
                "-B",
                "/b/cmake",
                "-G",
                "Ninja",
                "-DCMAKE_BUILD_TYPE=Release",
                "-DLLAMA_CURL=OFF",
                "-DBUILD_SHARED_LIBS=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_TOOLS=ON",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=ON",
                "-DLLAMA_USE_PREBUILT_UI=OFF",
                "-DLLAMA_BUILD_COMMIT=0c1e570",
            ]
        );
    }

    #[test]
    fn the_rpc_backend_is_on_where_the_tree_declares_it() {
        let with_rpc = format!("{CURRENT_TREE}option(GGML_RPC \"ggml: use RPC\" OFF)\n");
        let args = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Cpu, &with_rpc),
        );
        assert_eq!(
            args.iter()
                .filter(|a| a.contains("GGML_RPC"))
                .collect::<Vec<_>>(),
            ["-DGGML_RPC=ON"]
        );
        let without = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Cpu, CURRENT_TREE),
        );
        assert!(!without.iter().any(|a| a.contains("RPC")), "{without:?}");
    }

    #[test]
    fn ggml_options_are_read_beside_the_top_level_ones() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("CMakeLists.txt"), CURRENT_TREE).unwrap();
        assert!(!TreeOptions::read(dir.path()).unwrap().declares("GGML_RPC"));
        fs::create_dir(dir.path().join("ggml")).unwrap();
        fs::write(
            dir.path().join("ggml/CMakeLists.txt"),
            "option(GGML_RPC \"ggml: use RPC\" OFF)\n",
        )
        .unwrap();
        let options = TreeOptions::read(dir.path()).unwrap();
        assert!(options.declares("GGML_RPC"));
        assert!(options.declares("LLAMA_BUILD_TOOLS"));
    }

    #[test]
    fn the_pinned_sources_declare_the_rpc_backend() {
        // Both bundled trees, where the cache has them: the flag reaches real builds.
        let Some(home) = std::env::var_os("HOME") else {
            return;
        };
        let sources = Path::new(&home).join(".cache/rigdeck/sources");
        for tree in [
            "llama-cpp-python-0.3.36/llama.cpp",
            "ik-llama-cpp-python-0.1.5/llama.cpp",
        ] {
            let tree = sources.join(tree);
            if tree.join("CMakeLists.txt").is_file() {
                assert!(
                    TreeOptions::read(&tree).unwrap().declares("GGML_RPC"),
                    "{}",
                    tree.display()
                );
            }
        }
    }

    #[test]
    fn a_portable_build_turns_native_code_off() {
        let portable = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &ConfigurePlan {
                portable: true,
                ..plan(Backend::Cpu, CURRENT_TREE)
            },
        );
        assert_eq!(
            portable.last().map(String::as_str),
            Some("-DGGML_NATIVE=OFF")
        );
        let native = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Cpu, CURRENT_TREE),
        );
        assert!(!native.iter().any(|a| a.contains("GGML_NATIVE")));
    }

    #[test]
    fn configure_flags_for_cuda_vulkan_and_an_older_tree() {
        let cuda = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Cuda, CURRENT_TREE),
        );
        assert!(cuda.ends_with(&[
            "-DGGML_CUDA=ON".to_owned(),
            "-DCMAKE_CUDA_ARCHITECTURES=86;120".to_owned(),
            "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc".to_owned(),
        ]));
        let vulkan = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Vulkan, CURRENT_TREE),
        );
        assert_eq!(vulkan.last().map(String::as_str), Some("-DGGML_VULKAN=ON"));
        assert!(!vulkan.iter().any(|a| a.contains("CUDA")));
        // ik_llama.cpp: no LLAMA_BUILD_TOOLS, the server is an example.
        let older = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Cpu, "option(LLAMA_BUILD_SERVER \"\" ON)\n"),
        );
        assert!(older.contains(&"-DLLAMA_BUILD_EXAMPLES=ON".to_owned()));
        assert!(!older
            .iter()
            .any(|a| a.contains("LLAMA_BUILD_TOOLS") || a.contains("PREBUILT")));
    }
}
