//! Models served elsewhere: the hook through which the gateway of a desk serves the models of
//! the rigs it is paired with. The fleet implements [`Elsewhere`]; the gateway names each rig's
//! models (a rig's own name, `rig/model` where it clashes), routes a request for one to its rig
//! and relays the answer like an engine's, recording which rig answered.

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde_json::Value;

use crate::error::GatewayError;
use crate::route::Route;

/// An error of an answer's body (a connection that broke mid-reply).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// An answer's body as it arrives.
pub type BodyStream = BoxStream<'static, Result<Bytes, BodyError>>;

/// A model a rig serves, as the rig lists it.
#[derive(Debug, Clone)]
pub struct RigModel {
    /// The rig's name in the fleet.
    pub rig: String,
    /// The model's name on the rig's own gateway.
    pub name: String,
    /// The rig's `/v1/models` entry for it.
    pub listing: Value,
}

/// A rig's model as this gateway serves it.
#[derive(Debug, Clone)]
pub struct RemoteModel {
    /// The name clients use here: the rig's own, or `rig/model` where that clashes.
    pub id: String,
    pub model: RigModel,
}

/// The head and body of a rig's answer.
pub struct RemoteAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: BodyStream,
}

/// Models served elsewhere, and the way to them.
pub trait Elsewhere: Send + Sync + 'static {
    /// The models of every rig that answers now.
    fn models(&self) -> BoxFuture<'_, Vec<RigModel>>;
    /// Why `model` (a rig's own name, or `rig/model`) cannot be served although a rig that
    /// cannot be reached now served it when last seen; `None` when no such rig is known.
    fn lost(&self, model: &str) -> Option<GatewayError>;
    /// Sends `body` on `route` to the rig of `model`; the answer once its head arrives.
    fn open<'a>(
        &'a self,
        model: &'a RigModel,
        route: Route,
        body: Bytes,
    ) -> BoxFuture<'a, Result<RemoteAnswer, GatewayError>>;
}

/// Names each rig's model for this gateway: its own name unless a local model or another rig's
/// model has it too, then `rig/model`.
pub fn name_remote(local: &[&str], models: Vec<RigModel>) -> Vec<RemoteModel> {
    let clashes =
        |name: &str| local.contains(&name) || models.iter().filter(|m| m.name == name).count() > 1;
    let ids: Vec<String> = models
        .iter()
        .map(|m| {
            if clashes(&m.name) {
                format!("{}/{}", m.rig, m.name)
            } else {
                m.name.clone()
            }
        })
        .collect();
    ids.into_iter()
        .zip(models)
        .map(|(id, model)| RemoteModel { id, model })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(rig: &str, name: &str) -> RigModel {
        RigModel {
            rig: rig.to_owned(),
            name: name.to_owned(),
            listing: Value::Null,
        }
    }

    #[test]
    fn a_rig_model_keeps_its_name_unless_another_has_it() {
        let named = name_remote(
            &["local-only", "shared-local"],
            vec![
                on("tower", "qwen"),
                on("tower", "gemma"),
                on("mini", "gemma"),
                on("mini", "shared-local"),
            ],
        );
        let ids: Vec<&str> = named.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            ["qwen", "tower/gemma", "mini/gemma", "mini/shared-local"]
        );
    }
}
