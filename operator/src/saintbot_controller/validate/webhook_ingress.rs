//! `spec.webhookIngress`: which paths the Ingress routes, the annotations the operator's
//! allowlist lets through, and who owns a host and path several bots ask for. Pure: the
//! other bots' claims come from `dereference`, read from the operator's cache.
//!
//! Tenancy: an ingress controller merges the rules of every Ingress naming a host, so a
//! second bot routing the same `host` + path would take (or split) the first bot's
//! webhooks. One bot owns each host and path: the one created first, then the one whose
//! `namespace/name` sorts first — an order every reconcile of every bot computes alike
//! from the same claims, so two bots never both believe they own it. The others get no
//! Ingress (one they had is deleted) and `Ready=False/HostClaimed` naming the owner; the
//! rest of such a bot is rendered as usual. When the owner gives the host up (the bot
//! is deleted, or drops the field or the channel) the bots sharing the host are woken
//! (`super::super::bots_sharing_host`) and the next in line takes it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::{ValidateError, ValidatedWebhookIngress};
use crate::crd::{SaintBot, SaintBotSpec};

/// One bot's claim on a webhook host: the paths its Ingress would route there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostClaim {
    /// `metadata.namespace` of the claiming bot.
    pub namespace: String,
    /// `metadata.name` of the claiming bot.
    pub name: String,
    /// `metadata.creationTimestamp`; `None` sorts after every timestamp.
    pub created: Option<Time>,
    /// The host, as the Ingress rule names it.
    pub host: String,
    /// `/channels/<name>/webhook` of each webhook channel.
    pub paths: Vec<String>,
}

impl HostClaim {
    /// The claim `bot` makes, if its spec asks for an Ingress with at least one path. A
    /// bot being deleted claims nothing: its Ingress goes with it.
    pub fn of(bot: &SaintBot) -> Option<Self> {
        if bot.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let (host, paths) = claimed(&bot.spec)?;
        Some(Self {
            namespace: bot.namespace().unwrap_or_default(),
            name: bot.name_any(),
            created: bot.metadata.creation_timestamp.clone(),
            host,
            paths,
        })
    }

    /// The order of ownership: earliest creation first, then `namespace/name`.
    fn precedence(&self) -> (bool, Option<&Time>, &str, &str) {
        (
            self.created.is_none(),
            self.created.as_ref(),
            &self.namespace,
            &self.name,
        )
    }

    fn is_same_bot(&self, other: &HostClaim) -> bool {
        self.namespace == other.namespace && self.name == other.name
    }
}

/// The host and paths `spec` routes: only with a channel receiving webhooks — an Ingress
/// without paths would expose nothing but still claim the host. A channel that connects
/// out (telegram polling, slack socket mode) gets no path.
fn claimed(spec: &SaintBotSpec) -> Option<(String, Vec<String>)> {
    let requested = spec.webhook_ingress.as_ref()?;
    let paths: Vec<String> = spec
        .channels
        .iter()
        .filter(|channel| {
            crate::crd::channel_rules::receives_webhooks(channel.kind, &channel.settings)
        })
        .map(|channel| crate::labels::channel_webhook_path(&channel.name))
        .collect();
    // Host names compare without case (DNS); the CRD admits lower case only anyway.
    (!paths.is_empty()).then(|| (requested.host.to_ascii_lowercase(), paths))
}

/// The claims among `bots` on the host `bot` claims, other than its own: what
/// `dereference` hands `validate`. Empty when `bot` claims nothing.
pub fn claims_sharing_host<'a>(
    bot: &SaintBot,
    bots: impl IntoIterator<Item = &'a SaintBot>,
) -> Vec<HostClaim> {
    let Some(mine) = HostClaim::of(bot) else {
        return Vec::new();
    };
    // The host first: every reconcile looks at the whole fleet, and most bots ask for
    // another host or none.
    bots.into_iter()
        .filter(|other| {
            other
                .spec
                .webhook_ingress
                .as_ref()
                .is_some_and(|requested| requested.host.eq_ignore_ascii_case(&mine.host))
        })
        .filter_map(HostClaim::of)
        .filter(|claim| !claim.is_same_bot(&mine))
        .collect()
}

/// The first claim, in the order of ownership, that takes a path of `mine` before it
/// (with that path); `None` when `mine` owns every path it routes.
pub fn owner_before<'a>(
    mine: &HostClaim,
    others: &'a [HostClaim],
) -> Option<(&'a HostClaim, &'a str)> {
    let mut earlier: Vec<&HostClaim> = others
        .iter()
        .filter(|other| {
            other.host == mine.host
                && !other.is_same_bot(mine)
                && other.precedence() < mine.precedence()
        })
        .collect();
    earlier.sort_by(|a, b| a.precedence().cmp(&b.precedence()));
    earlier.into_iter().find_map(|other| {
        other
            .paths
            .iter()
            .find(|path| mine.paths.contains(path))
            .map(|path| (other, path.as_str()))
    })
}

/// An earlier bot routes the host and a path this bot asks for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "spec.webhookIngress: host {host:?} path {path:?} is already routed for SaintBot {owner}, \
     created earlier; this bot gets no Ingress until that bot gives it up (choose another \
     host or channel name)"
)]
pub struct HostClaimed {
    pub host: String,
    pub path: String,
    /// `namespace/name` of the owning bot.
    pub owner: String,
}

/// Whether `allowlist` lets annotation `key` through: an exact key, or a `prefix/*` entry
/// for every key under that prefix (`cert-manager.io/*`).
pub fn annotation_allowed(allowlist: &[String], key: &str) -> bool {
    allowlist
        .iter()
        .any(|allowed| match allowed.strip_suffix('*') {
            Some(prefix) if prefix.ends_with('/') => key
                .strip_prefix(prefix)
                .is_some_and(|rest| !rest.is_empty()),
            _ => allowed == key,
        })
}

/// `spec.webhookIngress`, defaulted, when the bot asks for it and routes a path. The
/// spec is refused when an annotation is not on the operator's allowlist (the chart
/// value `webhookIngress.allowedAnnotations`) — an annotation such as ingress-nginx's
/// `server-snippet` configures the shared controller for every tenant. The Ingress alone
/// is withheld ([`HostClaimed`]) when an earlier bot owns the host and a path
/// ([`owner_before`]).
pub(super) fn render(
    bot: &SaintBot,
    allowed_annotations: &[String],
    others: &[HostClaim],
) -> Result<Result<Option<ValidatedWebhookIngress>, HostClaimed>, ValidateError> {
    let Some(requested) = bot.spec.webhook_ingress.as_ref() else {
        return Ok(Ok(None));
    };
    if let Some(key) = requested
        .annotations
        .keys()
        .find(|key| !annotation_allowed(allowed_annotations, key))
    {
        let allowed = if allowed_annotations.is_empty() {
            "none".to_string()
        } else {
            allowed_annotations.join(", ")
        };
        return Err(ValidateError::InvalidSetting {
            field: format!("spec.webhookIngress.annotations[{key:?}]"),
            message: format!(
                "annotation {key:?} is not allowed by this operator: the chart value \
                 webhookIngress.allowedAnnotations lists the annotations bots may set \
                 (allowed: {allowed})"
            ),
        });
    }
    let Some(mine) = HostClaim::of(bot) else {
        return Ok(Ok(None));
    };
    if let Some((owner, path)) = owner_before(&mine, others) {
        return Ok(Err(HostClaimed {
            host: mine.host,
            path: path.to_string(),
            owner: format!("{}/{}", owner.namespace, owner.name),
        }));
    }
    Ok(Ok(Some(ValidatedWebhookIngress {
        class_name: requested.class_name.clone(),
        host: requested.host.clone(),
        tls_secret_name: requested.tls_secret_name.clone(),
        controller_namespace: requested.controller_namespace.clone().unwrap_or_else(|| {
            crate::crd::saintbot::DEFAULT_INGRESS_CONTROLLER_NAMESPACE.to_string()
        }),
        annotations: requested.annotations.clone(),
        paths: mine.paths,
    })))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bot(namespace: &str, name: &str, created: Option<&str>, channels: &[&str]) -> SaintBot {
        let channels: Vec<_> = channels
            .iter()
            .map(|channel| json!({"name": channel, "kind": "whatsapp"}))
            .collect();
        let mut metadata = json!({"name": name, "namespace": namespace, "uid": name});
        if let Some(created) = created {
            metadata["creationTimestamp"] = json!(created);
        }
        serde_json::from_value(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot", "metadata": metadata,
            "spec": {
                "model": {"provider": "anthropic", "name": "m"},
                "channels": channels,
                "webhookIngress": {"host": "hooks.acme.example"},
            },
        }))
        .unwrap()
    }

    fn owner_of(mine: &SaintBot, others: &[SaintBot]) -> Option<(String, String)> {
        let claims = claims_sharing_host(mine, others);
        owner_before(&HostClaim::of(mine).unwrap(), &claims).map(|(owner, path)| {
            (
                format!("{}/{}", owner.namespace, owner.name),
                path.to_string(),
            )
        })
    }

    #[test]
    fn the_earliest_bot_owns_a_shared_host_and_path() {
        let first = bot("zeta", "acme-bot", Some("2026-01-01T00:00:00Z"), &["wa"]);
        let second = bot("alpha", "my-bot", Some("2026-02-01T00:00:00Z"), &["wa"]);
        let both = [first.clone(), second.clone()];
        assert_eq!(owner_of(&first, &both), None);
        assert_eq!(
            owner_of(&second, &both),
            Some((
                "zeta/acme-bot".to_string(),
                "/channels/wa/webhook".to_string()
            ))
        );
    }

    #[test]
    fn bots_created_in_the_same_second_are_ordered_by_namespace_then_name() {
        let at = Some("2026-01-01T00:00:00Z");
        let bots = [
            bot("beta", "a-bot", at, &["wa"]),
            bot("alpha", "z-bot", at, &["wa"]),
            bot("alpha", "b-bot", at, &["wa"]),
        ];
        let owners: Vec<_> = bots.iter().map(|bot| owner_of(bot, &bots)).collect();
        assert_eq!(owners[2], None, "alpha/b-bot sorts first");
        assert_eq!(owners[1].as_ref().unwrap().0, "alpha/b-bot");
        assert_eq!(owners[0].as_ref().unwrap().0, "alpha/b-bot");
    }

    #[test]
    fn other_paths_on_the_same_host_are_no_collision_and_a_gone_owner_frees_the_path() {
        let first = bot("acme", "first-bot", Some("2026-01-01T00:00:00Z"), &["wa"]);
        let second = bot("acme", "second-bot", Some("2026-02-01T00:00:00Z"), &["wa2"]);
        assert_eq!(owner_of(&second, &[first.clone(), second.clone()]), None);
        let third = bot("other", "third-bot", Some("2026-03-01T00:00:00Z"), &["wa"]);
        assert!(owner_of(&third, &[first, third.clone()]).is_some());
        // The owner is deleted: the cache no longer holds it, so the next one owns it.
        assert_eq!(owner_of(&third, std::slice::from_ref(&third)), None);
    }

    #[test]
    fn a_bot_without_a_creation_time_never_wins_over_one_with_it() {
        let dated = bot("zeta", "z-bot", Some("2026-01-01T00:00:00Z"), &["wa"]);
        let undated = bot("alpha", "a-bot", None, &["wa"]);
        let both = [dated.clone(), undated.clone()];
        assert_eq!(owner_of(&dated, &both), None);
        assert!(owner_of(&undated, &both).is_some());
    }

    #[test]
    fn the_allowlist_takes_exact_keys_and_prefix_entries() {
        let allowlist = vec![
            "cert-manager.io/*".to_string(),
            "traefik.ingress.kubernetes.io/router.tls".to_string(),
        ];
        for allowed in [
            "cert-manager.io/cluster-issuer",
            "traefik.ingress.kubernetes.io/router.tls",
        ] {
            assert!(annotation_allowed(&allowlist, allowed), "{allowed}");
        }
        for refused in [
            "nginx.ingress.kubernetes.io/server-snippet",
            "cert-manager.io/",
            "evil.cert-manager.io/issuer",
            "traefik.ingress.kubernetes.io/router.middlewares",
        ] {
            assert!(!annotation_allowed(&allowlist, refused), "{refused}");
        }
        assert!(!annotation_allowed(&[], "cert-manager.io/cluster-issuer"));
    }
}
