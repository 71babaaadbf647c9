//! The gateway's view of the daemon's instances ([`Fleet`]): profiles as models, instance
//! phases as model states, and starts and stops through [`Instances`], so a model loaded on
//! request goes through the same VRAM admission and release wait as a click on Start.

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;

use super::instances::{Instances, LaunchError};
use crate::gateway::{Fleet, Hold, ModelEntry, ModelState, StartError, Upstream};
use crate::profiles::admission::AdmissionError;
use crate::profiles::profile::LaunchProfile;
use crate::store::Store;
use crate::supervisor::{Phase, SuperviseError};

/// [`Instances`] and the profiles in the store, as the gateway's fleet.
pub struct InstancesFleet {
    instances: Arc<Instances>,
    store: Store,
    /// The profiles as models, decoded once per change of the profiles (the gateway asks at
    /// every request).
    models: Mutex<Option<(u64, Vec<ModelEntry>)>>,
}

impl InstancesFleet {
    pub fn new(instances: Arc<Instances>, store: Store) -> Self {
        Self {
            instances,
            store,
            models: Mutex::new(None),
        }
    }

    async fn read_models(&self) -> Result<Vec<ModelEntry>, String> {
        let profiles = self
            .store
            .launch_profiles()
            .await
            .map_err(|err| err.to_string())?;
        Ok(profiles.into_iter().map(model_entry).collect())
    }
}

fn model_entry(p: LaunchProfile) -> ModelEntry {
    ModelEntry {
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
    }
}

impl Fleet for InstancesFleet {
    fn models(&self) -> BoxFuture<'_, Result<Vec<ModelEntry>, String>> {
        Box::pin(async move {
            let generation = self.store.profiles_generation();
            let cached = {
                let cached = self.models.lock().unwrap_or_else(PoisonError::into_inner);
                cached
                    .as_ref()
                    .filter(|(at, _)| *at == generation)
                    .map(|(_, models)| models.clone())
            };
            if let Some(models) = cached {
                return Ok(models);
            }
            let models = self.read_models().await?;
            *self.models.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((generation, models.clone()));
            Ok(models)
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

    fn hold<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Hold> {
        Box::pin(async move { Box::new(self.instances.hold(name).await) as Hold })
    }

    fn held(&self, name: &str) -> bool {
        self.instances.holds_on(name) > 0
    }

    fn gpu_memory(&self, name: &str) -> Vec<(u32, u64)> {
        self.instances.get(name).map_or_else(Vec::new, |view| {
            view.measured_memory
                .iter()
                .map(|held| (held.gpu, held.bytes))
                .collect()
        })
    }

    fn stop_if_unheld<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            match self.instances.stop_if_unheld(name).await {
                Ok(stopped) => Ok(stopped.is_some()),
                // Never started since the daemon did: nothing to stop.
                Err(LaunchError::NotRunning(_)) => Ok(true),
                Err(err) => Err(err.to_string()),
            }
        })
    }
}
