//! The harness's node (`e2e/node.sh`, started by `SAINT_E2E_NODE=1 e2e/run.sh`):
//! what `node_start` exports, and the storage nothing provisions there.
//!
//! The bot's workspace claim asks `storageClassName: local-path`, a class k3s ships
//! with a provisioner and this node has none of. [`provide_local_volume`] stands in
//! for that provisioner: a `local` PersistentVolume reserved for exactly one claim
//! (`claimRef`), on a directory under the run directory, reachable only on this node.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use k8s_openapi::api::{core::v1::PersistentVolume, storage::v1::StorageClass};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

/// The storage class the bot's claim names (the operator's default, k3s's class).
pub const STORAGE_CLASS: &str = "local-path";

/// Capacity of a provided volume: a `local` volume enforces no size, and it must be
/// at least the claim's request for the claim to bind.
const VOLUME_CAPACITY: &str = "10Gi";

/// The node is not there, or a volume could not be provided on it.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(
        "failed to find {variable} in the environment: the node runs only through \
         `SAINT_E2E_NODE=1 e2e/run.sh`, which starts it (e2e/node.sh)"
    )]
    Missing { variable: &'static str },
    #[error("{variable}={value} is not an IP address")]
    Address {
        variable: &'static str,
        value: String,
    },
    #[error("failed to create the volume directory {path}")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to apply {what}: {message}")]
    Apply { what: String, message: String },
}

/// What `node_start` exported.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's name (`saint-e2e-node`), also its `kubernetes.io/hostname` label.
    pub name: String,
    /// The host as pods see it (the pod bridge's gateway, 10.88.0.1): a server a test
    /// binds here is reachable from pods.
    pub host_ip: IpAddr,
    /// The host on an address outside every private range (203.0.113.1, on the same
    /// bridge): a server a test binds here is, to a pod's NetworkPolicy, on the
    /// internet.
    pub public_ip: IpAddr,
    /// The sandbox image containerd holds (`imagePullPolicy: Never` works).
    pub pause_image: String,
    /// The probe image (`e2e/node/probe`: `api`, `get <url>`, `sleep` steps).
    pub probe_image: String,
    /// containerd's socket, for `ctr --address … -n k8s.io images import`.
    pub containerd_address: PathBuf,
    /// Where [`provide_local_volume`] puts volume directories.
    pub volumes_dir: PathBuf,
}

fn variable(name: &'static str) -> Result<String, NodeError> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.is_empty())
        .ok_or(NodeError::Missing { variable: name })
}

impl Node {
    /// Reads the variables `node_start` exports; fails naming the first missing one.
    pub fn from_env() -> Result<Self, NodeError> {
        let address = |name: &'static str| {
            let value = variable(name)?;
            value.parse().map_err(|_| NodeError::Address {
                variable: name,
                value,
            })
        };
        Ok(Self {
            name: variable("SAINT_E2E_NODE")?,
            host_ip: address("SAINT_E2E_HOST_IP")?,
            public_ip: address("SAINT_E2E_PUBLIC_IP")?,
            pause_image: variable("SAINT_E2E_PAUSE_IMAGE")?,
            probe_image: variable("SAINT_E2E_PROBE_IMAGE")?,
            containerd_address: variable("SAINT_E2E_CONTAINERD_ADDRESS")?.into(),
            volumes_dir: variable("SAINT_E2E_NODE_VOLUMES")?.into(),
        })
    }
}

/// Makes the claim `claim` in `namespace` (of class `local-path`, existing or not yet
/// created) bindable: creates the `local-path` StorageClass (no provisioner, immediate
/// binding) if missing, and a `local` PersistentVolume named `<namespace>-<claim>`
/// reserved for that claim, on a fresh directory under the node's volume directory,
/// with node affinity to the node. Applied server-side, so calling it twice is fine.
/// The volume is `Retain`: deleting the claim leaves the directory (and the data)
/// for the run directory's removal.
pub async fn provide_local_volume(
    client: &Client,
    namespace: &str,
    claim: &str,
) -> Result<PersistentVolume, NodeError> {
    let node = Node::from_env()?;
    let name = format!("{namespace}-{claim}");
    let path = node.volumes_dir.join(&name);
    create_directory(&path)?;
    let params = PatchParams::apply(crate::FIELD_MANAGER);
    let class = json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
        "reclaimPolicy": "Retain",
    });
    Api::<StorageClass>::all(client.clone())
        .patch(STORAGE_CLASS, &params, &Patch::Apply(&class))
        .await
        .map_err(|error| NodeError::Apply {
            what: format!("StorageClass {STORAGE_CLASS}"),
            message: crate::api_message(&error),
        })?;
    let volume = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": VOLUME_CAPACITY},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": STORAGE_CLASS,
            "claimRef": {"namespace": namespace, "name": claim},
            "local": {"path": path.display().to_string()},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname",
                "operator": "In",
                "values": [node.name],
            }]}]}},
        },
    });
    Api::<PersistentVolume>::all(client.clone())
        .patch(&name, &params, &Patch::Apply(&volume))
        .await
        .map_err(|error| NodeError::Apply {
            what: format!("PersistentVolume {name} for claim {namespace}/{claim}"),
            message: crate::api_message(&error),
        })
}

/// The volume's directory: owned by root and closed to others, as a provisioner would
/// leave it; the pod's `fsGroup` is what lets its containers in (the kubelet applies
/// it to `local` volumes).
fn create_directory(path: &Path) -> Result<(), NodeError> {
    use std::os::unix::fs::PermissionsExt;

    let error = |source| NodeError::Directory {
        path: path.to_owned(),
        source,
    };
    std::fs::create_dir_all(path).map_err(error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o750)).map_err(error)
}
