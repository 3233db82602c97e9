//! The agent's ServiceAccount `<bot>-agent`. Pure: no client.

use k8s_openapi::api::core::v1::ServiceAccount;

use super::child_metadata;
use crate::{labels::agent_account_name, saintbot_controller::validate::ValidatedSaintBot};

/// `<bot>-agent`. Tokens are not auto-mounted: the pod mounts one only into the `agent`
/// container, so the `porter` container never holds API credentials.
pub fn service_account(bot: &ValidatedSaintBot) -> ServiceAccount {
    ServiceAccount {
        metadata: child_metadata(bot, agent_account_name(&bot.name), "agent"),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}
