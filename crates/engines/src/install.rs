//! Build an engine and add it to the registry in one step, as the CLI, the API and the first-run
//! offer all do.

use super::cmake_build::{self, BuildError, BuildRequest, BuiltEngine, ProgressSink};
use super::registry::{self, EngineBuild, RegistryError};
use crate::registry::BuildStore;

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Build(#[from] BuildError),
    // Not `#[from]`: that would make the registry error the source too, and reports that print
    // the chain would say it twice.
    #[error("the build finished, but its llama-server does not answer --help as expected: {0}")]
    Register(RegistryError),
}

impl From<RegistryError> for InstallError {
    fn from(err: RegistryError) -> Self {
        InstallError::Register(err)
    }
}

/// Builds (or reuses a finished build) and registers it with the capabilities it reports.
pub async fn build_and_register(
    store: &impl BuildStore,
    request: &BuildRequest,
    sink: ProgressSink<'_>,
) -> Result<(BuiltEngine, EngineBuild), InstallError> {
    let built = cmake_build::build(request, sink).await?;
    let entry = registry::register_built(store, &built, rigdeck_supervisor::now_ms()).await?;
    Ok((built, entry))
}
