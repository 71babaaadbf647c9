//! The engine registry on the real database: binaries and Python environments registered,
//! listed with their availability, updated in place, removed; bad paths refused with the fix.

use std::path::{Path, PathBuf};

use rigdeck_core::engines::capabilities::ProbeError;
use rigdeck_core::engines::registry::{register_path, Availability, BuildOrigin, RegistryError};
use rigdeck_core::engines::{Backend, EngineKind};
use rigdeck_core::store::Store;

use std::os::unix::fs::PermissionsExt;

/// A stand-in llama-server for registry tests: a script answering `--version` and `--help`
/// in llama.cpp's format (the real binary is exercised by the engine-build integration test).
fn fake_server(dir: &Path, extra_help: &str) -> PathBuf {
    let path = dir.join("llama-server");
    let script = format!(
        "#!/bin/sh\n\
         case \"$1\" in\n\
         --version) echo 'version: 0.5.0-dev (build 0, commit abc1234)' >&2; echo 'built with GNU 12.2.0 for Linux x86_64' >&2 ;;\n\
         --list-devices) echo 'Available devices:' ;;\n\
         *) printf '%s\\n' '-m,    --model FNAME                    model path' '--port PORT                             port' \
            '-ot,   --override-tensor <pattern>=<buffer type>' '--metrics                               metrics' {extra_help} ;;\n\
         esac\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

async fn store(dir: &Path) -> Store {
    Store::open(&dir.join("rigdeck.db")).await.unwrap()
}

#[tokio::test]
async fn registers_a_binary_lists_it_and_marks_it_missing_once_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let bin = fake_server(dir.path(), "");
    let build = register_path(&store, &bin, None, None, 1_000)
        .await
        .unwrap();
    assert_eq!(build.kind, EngineKind::LlamaCpp);
    assert_eq!(build.backend, Backend::Cpu);
    assert_eq!(build.version, "0.5.0-dev (abc1234)");
    assert_eq!(build.source, BuildOrigin::Registered);
    assert_eq!(build.status, Availability::Ready);
    assert!(build.capabilities.features.override_tensor);
    assert!(build.capabilities.features.metrics);
    assert!(!build.capabilities.features.fit);

    // Registering the folder finds the same binary and updates the row in place.
    let again = register_path(&store, dir.path(), None, Some(Backend::Cuda), 2_000)
        .await
        .unwrap();
    assert_eq!(again.id, build.id);
    assert_eq!(again.backend, Backend::Cuda);
    assert_eq!(store.engine_builds().await.unwrap().len(), 1);

    std::fs::remove_file(&bin).unwrap();
    let listed = store.engine_builds().await.unwrap();
    assert_eq!(listed[0].status, Availability::Missing);

    let removed = store.remove_engine_build(build.id).await.unwrap();
    assert_eq!(removed.location, build.location);
    assert!(store.engine_builds().await.unwrap().is_empty());
    let err = store.remove_engine_build(build.id).await.unwrap_err();
    assert!(err
        .to_string()
        .contains(&format!("no engine build with id {}", build.id)));
}

#[tokio::test]
async fn ik_llama_is_told_apart_by_its_own_options() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let bin = fake_server(
        dir.path(),
        "'-fmoe, --fused-moe                      fused MoE'",
    );
    let build = register_path(&store, &bin, None, None, 1).await.unwrap();
    assert_eq!(build.kind, EngineKind::IkLlamaCpp);
}

#[tokio::test]
async fn bad_paths_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let err = register_path(&store, &dir.path().join("nope"), None, None, 1)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = register_path(&store, &empty, None, None, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::NothingToRegister { .. }),
        "{err}"
    );

    let script = dir.path().join("hello.sh");
    std::fs::write(&script, "#!/bin/sh\necho hello\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = register_path(&store, &script, None, None, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Probe(ProbeError::NotAnEngine { .. })),
        "{err}"
    );

    let err = register_path(&store, &script, Some(EngineKind::Vllm), None, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::NotAnEnvironment { .. }),
        "{err}"
    );
    assert!(store.engine_builds().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_python_environment_needs_the_engine_installed() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let venv = dir.path().join("venv");
    let status = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 with the venv module");
    assert!(status.success());

    let err = register_path(&store, &venv, Some(EngineKind::Vllm), None, 1)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, RegistryError::PythonPackageMissing { .. }),
        "{text}"
    );
    assert!(
        text.contains("has no vllm") && text.contains("No module named 'vllm'"),
        "{text}"
    );
    assert!(text.contains("bin/pip' install vllm"), "{text}");

    // A stand-in vllm package in the environment's site-packages.
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages/vllm");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("__init__.py"), "__version__ = '0.99.0'\n").unwrap();
    let build = register_path(&store, &venv, None, None, 1).await.unwrap();
    assert_eq!(build.kind, EngineKind::Vllm);
    assert_eq!(build.version, "0.99.0");
    assert_eq!(build.backend, Backend::Cuda);
    assert_eq!(build.status, Availability::Ready);
    assert!(build.capabilities.features.metrics);

    let err = register_path(&store, &venv, Some(EngineKind::LlamaCpp), None, 1)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotABinary { .. }), "{err}");
}
