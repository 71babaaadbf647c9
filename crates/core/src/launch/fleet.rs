//! The gateway's view of the daemon's instances ([`Fleet`]): profiles as models, instance
//! phases as model states, and starts and stops through [`Instances`], so a model loaded on
//! request goes through the same VRAM admission and release wait as a click on Start.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::instances::{Instances, LaunchError};
use crate::gateway::{Fleet, ModelEntry, ModelState, StartError, Upstream};
use crate::profiles::admission::AdmissionError;
use crate::store::Store;
use crate::supervisor::{Phase, SuperviseError};

/// [`Instances`] and the profiles in the store, as the gateway's fleet.
pub struct InstancesFleet {
    instances: Arc<Instances>,
    store: Store,
}

impl InstancesFleet {
    pub fn new(instances: Arc<Instances>, store: Store) -> Self {
        Self { instances, store }
    }
}

impl Fleet for InstancesFleet {
    fn models(&self) -> BoxFuture<'_, Result<Vec<ModelEntry>, String>> {
        Box::pin(async move {
            let profiles = self
                .store
                .launch_profiles()
                .await
                .map_err(|err| err.to_string())?;
            Ok(profiles
                .into_iter()
                .map(|p| ModelEntry {
                    planned: p
                        .planned_memory
                        .iter()
                        .filter(|g| g.bytes > 0)
                        .map(|g| (g.gpu, g.bytes))
                        .collect(),
                    model_file: p.model.file_name().map_or_else(
                        || p.model.display().to_string(),
                        |f| f.to_string_lossy().into_owned(),
                    ),
                    policy: p.gateway,
                    name: p.name,
                })
                .collect())
        })
    }

    fn state(&self, name: &str) -> ModelState {
        let Some((phase, host, port)) = self.instances.phase_and_address(name) else {
            return ModelState::Stopped;
        };
        match phase {
            Phase::Ready => match port {
                Some(port) => ModelState::Ready(Upstream {
                    base_url: format!("http://{host}:{port}"),
                    api_key: self.instances.engine_api_key(name),
                    served_name: name.to_owned(),
                }),
                // Adopted without a known port: it cannot be reached.
                None => ModelState::Crashed {
                    explanation: "its port is unknown (adopted from an earlier run): restart it"
                        .to_owned(),
                },
            },
            Phase::Starting => ModelState::Loading { progress: None },
            Phase::Loading { progress } => ModelState::Loading { progress },
            Phase::Stopping => ModelState::Stopping,
            Phase::Stopped => ModelState::Stopped,
            Phase::Crashed {
                restart: Some(_), ..
            } => ModelState::Loading { progress: None },
            Phase::Crashed { explanation, .. } => ModelState::Crashed { explanation },
        }
    }

    fn start<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StartError>> {
        Box::pin(async move {
            match self.instances.start(name, false).await {
                Ok(_) => Ok(()),
                Err(LaunchError::Supervise(SuperviseError::AlreadyRunning { .. })) => {
                    Err(StartError::AlreadyRunning)
                }
                Err(LaunchError::Admission(AdmissionError::DoesNotFit {
                    shortfalls,
                    message,
                })) => Err(StartError::NeedsMemory {
                    short: shortfalls
                        .iter()
                        .map(|s| {
                            let wanted = s.needs_bytes.saturating_add(s.pending_bytes);
                            (s.gpu, wanted.saturating_sub(s.free_bytes))
                        })
                        .collect(),
                    message,
                }),
                Err(err) => Err(StartError::Refused(err.to_string())),
            }
        })
    }

    fn stop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.instances
                .stop(name)
                .await
                .map(|_| ())
                .map_err(|err| err.to_string())
        })
    }
}
