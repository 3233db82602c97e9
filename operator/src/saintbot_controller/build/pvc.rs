//! The workspace PersistentVolumeClaim `<bot>-workspace`. Pure: no client.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};

use super::child_metadata;
use crate::{labels::workspace_claim_name, saintbot_controller::validate::ValidatedSaintBot};

/// `<bot>-workspace`, ReadWriteOnce: one writer node. Sandbox pods share it by running on
/// the bot pod's node (pod affinity), which RWO allows.
pub fn workspace_claim(bot: &ValidatedSaintBot) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: child_metadata(bot, workspace_claim_name(&bot.name), "workspace"),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    bot.storage_size.clone(),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: bot.storage_class_name.clone(),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}
