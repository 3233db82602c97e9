//! Identity links from Contacts: normalised channel identities per contact slug, in a
//! deterministic order, with conflicts reported and never silently resolved.
//!
//! Pure: no client. Input is the Contacts a bot knows and the Role names it has; output
//! is what goes into the rendered config plus a report for status and Events.

use std::collections::{BTreeMap, BTreeSet};

use saint_config::{ChannelIdentity, ChannelKind, ContactConfig, ContactSlug, IdentityError};

use crate::crd::{ContactIdentifiers, IdentifierConflict};

/// Every normalised identity of one contact, sorted and de-duplicated, plus the
/// identifiers that could not be normalised. Each identifier goes through the same
/// [`ChannelIdentity::parse`] the agent applies to inbound senders.
pub fn identities(identifiers: &ContactIdentifiers) -> (Vec<ChannelIdentity>, Vec<IdentityError>) {
    let mut found = BTreeSet::new();
    let mut errors = Vec::new();
    // The phone is the WhatsApp identity unless a separate WhatsApp number is given.
    let whatsapp = identifiers
        .whatsapp
        .as_deref()
        .or(identifiers.phone.as_deref());
    let candidates = [
        (ChannelKind::Whatsapp, whatsapp),
        (ChannelKind::Email, identifiers.email.as_deref()),
        (ChannelKind::Telegram, identifiers.telegram.as_deref()),
        (ChannelKind::Slack, identifiers.slack.as_deref()),
        (ChannelKind::Discord, identifiers.discord.as_deref()),
        (ChannelKind::Matrix, identifiers.matrix.as_deref()),
    ];
    for (kind, value) in candidates {
        let Some(value) = value else { continue };
        match ChannelIdentity::parse(kind, value) {
            Ok(identity) => {
                found.insert(identity);
            }
            Err(error) => errors.push(error),
        }
    }
    // A separate WhatsApp number leaves the plain phone unused as an identity; still
    // check it so a typo is reported rather than ignored.
    if identifiers.whatsapp.is_some()
        && let Some(phone) = identifiers.phone.as_deref()
        && let Err(error) = ChannelIdentity::parse(ChannelKind::Whatsapp, phone)
    {
        errors.push(error);
    }
    (found.into_iter().collect(), errors)
}

/// One Contact as the identity resolver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContactInput {
    /// `metadata.name`: the canonical slug.
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Role name.
    pub role: String,
    /// Raw identifiers.
    pub identifiers: ContactIdentifiers,
}

/// What is wrong with one Contact, as far as one bot is concerned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContactProblems {
    /// Identities also claimed by other Contacts (left out for all of them).
    pub conflicts: Vec<IdentifierConflict>,
    /// The Contact names a Role the bot does not have (the whole Contact is left out).
    pub missing_role: Option<String>,
    /// Identifiers that could not be normalised (left out).
    pub invalid: Vec<String>,
}

impl ContactProblems {
    /// Whether anything was left out.
    pub fn is_empty(&self) -> bool {
        self.conflicts.is_empty() && self.missing_role.is_none() && self.invalid.is_empty()
    }
}

/// The result for one bot: what to render and what to report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityReport {
    /// Contacts rendered into the config, sorted by slug.
    pub contacts: Vec<ContactConfig>,
    /// slug → sorted identities. A contact with no linked identity has no entry.
    pub identity_links: BTreeMap<ContactSlug, Vec<ChannelIdentity>>,
    /// Problems by contact slug (only contacts with problems).
    pub problems: BTreeMap<String, ContactProblems>,
}

impl IdentityReport {
    /// Number of distinct conflicting identities.
    pub fn conflicting_identities(&self) -> BTreeSet<&str> {
        self.problems
            .values()
            .flat_map(|problems| {
                problems
                    .conflicts
                    .iter()
                    .map(|conflict| conflict.identity.as_str())
            })
            .collect()
    }

    /// Contacts that name a Role the bot does not have, sorted.
    pub fn contacts_with_missing_role(&self) -> Vec<(&str, &str)> {
        self.problems
            .iter()
            .filter_map(|(slug, problems)| {
                problems
                    .missing_role
                    .as_deref()
                    .map(|role| (slug.as_str(), role))
            })
            .collect()
    }
}

/// Resolves Contacts into contacts + identity links for one bot.
///
/// Deterministic: the output depends only on the set of inputs, not their order. An
/// identity claimed by two or more Contacts is linked to none of them — picking one
/// would silently hand a person's messages (and role) to someone else.
pub fn resolve(contacts: &[ContactInput], role_names: &BTreeSet<String>) -> IdentityReport {
    let mut sorted: Vec<&ContactInput> = contacts.iter().collect();
    sorted.sort_by(|left, right| left.slug.cmp(&right.slug));

    let mut report = IdentityReport::default();
    let mut normalised: Vec<(&ContactInput, ContactSlug, Vec<ChannelIdentity>)> = Vec::new();
    let mut claims: BTreeMap<ChannelIdentity, BTreeSet<String>> = BTreeMap::new();
    for contact in sorted {
        // The Contact CRD's CEL keeps names DNS-1123 labels; without it, say so here.
        let slug = match ContactSlug::parse(&contact.slug) {
            Ok(slug) => slug,
            Err(error) => {
                let problems = report.problems.entry(contact.slug.clone()).or_default();
                problems.invalid.push(error.to_string());
                continue;
            }
        };
        let (identities, errors) = identities(&contact.identifiers);
        if !errors.is_empty() {
            let problems = report.problems.entry(contact.slug.clone()).or_default();
            problems.invalid = errors.iter().map(ToString::to_string).collect();
        }
        // Contacts with a missing role still claim their identities: a clash must be
        // visible even while one side's role is being fixed.
        for identity in &identities {
            claims
                .entry(identity.clone())
                .or_default()
                .insert(contact.slug.clone());
        }
        normalised.push((contact, slug, identities));
    }

    for (contact, slug, identities) in normalised {
        let mut linked = Vec::new();
        let mut conflicts = Vec::new();
        for identity in identities {
            let owners = &claims[&identity];
            if owners.len() > 1 {
                let others = owners
                    .iter()
                    .filter(|owner| **owner != contact.slug)
                    .cloned()
                    .collect();
                conflicts.push(IdentifierConflict {
                    identity: identity.to_string(),
                    contacts: others,
                });
            } else {
                linked.push(identity);
            }
        }
        let missing_role = (!role_names.contains(&contact.role)).then(|| contact.role.clone());
        if !conflicts.is_empty() || missing_role.is_some() {
            let problems = report.problems.entry(contact.slug.clone()).or_default();
            problems.conflicts = conflicts;
            problems.missing_role = missing_role.clone();
        }
        if missing_role.is_some() {
            continue;
        }
        if !linked.is_empty() {
            report.identity_links.insert(slug.clone(), linked.clone());
        }
        report.contacts.push(ContactConfig {
            slug,
            name: contact.display_name.clone(),
            role: contact.role.clone(),
            identities: linked,
            erase: false,
        });
    }
    report
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn contact(slug: &str, role: &str, identifiers: ContactIdentifiers) -> ContactInput {
        ContactInput {
            slug: slug.to_string(),
            display_name: slug.to_uppercase(),
            role: role.to_string(),
            identifiers,
        }
    }

    fn roles(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn identities_carry_channel_prefixes_and_are_sorted() {
        let (found, errors) = identities(&ContactIdentifiers {
            phone: Some("+385991234567".into()),
            email: Some("Ana@Company.hr".into()),
            telegram: Some("111111111".into()),
            slack: Some("u024be7lh".into()),
            discord: Some("Ana#1234".into()),
            whatsapp: None,
            matrix: None,
        });
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            found,
            vec![
                "discord:ana#1234",
                "email:ana@company.hr",
                "slack:U024BE7LH",
                "telegram:111111111",
                "whatsapp:+385991234567",
            ]
        );
    }

    #[test]
    fn whatsapp_override_replaces_the_phone_for_whatsapp() {
        let (found, _) = identities(&ContactIdentifiers {
            phone: Some("+385991234567".into()),
            whatsapp: Some("+38598000111".into()),
            ..Default::default()
        });
        assert_eq!(found, vec!["whatsapp:+38598000111"]);
    }

    #[test]
    fn same_inputs_in_any_order_give_identical_output() {
        let ana = contact(
            "ana",
            "owner",
            ContactIdentifiers {
                phone: Some("+385991234567".into()),
                ..Default::default()
            },
        );
        let marko = contact(
            "marko",
            "manager",
            ContactIdentifiers {
                email: Some("marko@acme.hr".into()),
                ..Default::default()
            },
        );
        let ivan = contact(
            "ivan",
            "employee",
            ContactIdentifiers {
                telegram: Some("333".into()),
                ..Default::default()
            },
        );
        let role_names = roles(&["owner", "manager", "employee"]);
        let forward = resolve(&[ana.clone(), marko.clone(), ivan.clone()], &role_names);
        let backward = resolve(&[ivan, marko, ana], &role_names);
        assert_eq!(forward, backward);
        let slugs: Vec<&str> = forward
            .contacts
            .iter()
            .map(|contact| contact.slug.as_str())
            .collect();
        assert_eq!(slugs, vec!["ana", "ivan", "marko"]);
    }

    #[test]
    fn a_shared_identifier_is_linked_to_neither_contact_and_reported_on_both() {
        let ana = contact(
            "ana",
            "owner",
            ContactIdentifiers {
                phone: Some("+385991234567".into()),
                email: Some("ana@acme.hr".into()),
                ..Default::default()
            },
        );
        // Same number typed differently: normalisation must reveal the clash.
        let marko = contact(
            "marko",
            "manager",
            ContactIdentifiers {
                phone: Some("+385 99 123 4567".into()),
                telegram: Some("222".into()),
                ..Default::default()
            },
        );
        let report = resolve(&[ana, marko], &roles(&["owner", "manager"]));
        assert_eq!(report.identity_links["ana"], vec!["email:ana@acme.hr"]);
        assert_eq!(report.identity_links["marko"], vec!["telegram:222"]);
        assert_eq!(
            report.problems["ana"].conflicts,
            vec![IdentifierConflict {
                identity: "whatsapp:+385991234567".into(),
                contacts: vec!["marko".into()]
            }]
        );
        assert_eq!(
            report.problems["marko"].conflicts,
            vec![IdentifierConflict {
                identity: "whatsapp:+385991234567".into(),
                contacts: vec!["ana".into()]
            }]
        );
        assert_eq!(report.conflicting_identities().len(), 1);
    }

    #[test]
    fn matrix_ids_differing_only_in_case_are_one_identity_in_conflict() {
        let matrix = |id: &str| ContactIdentifiers {
            matrix: Some(id.into()),
            ..Default::default()
        };
        let ana = contact("ana", "owner", matrix("@ana:acme.hr"));
        let impostor = contact("impostor", "owner", matrix("@Ana:ACME.hr"));
        let report = resolve(&[ana, impostor], &roles(&["owner"]));
        assert!(
            report.identity_links.values().all(Vec::is_empty),
            "{report:?}"
        );
        assert_eq!(
            report.problems["impostor"].conflicts,
            vec![IdentifierConflict {
                identity: "matrix:@ana:acme.hr".into(),
                contacts: vec!["ana".into()]
            }]
        );
    }

    #[test]
    fn a_contact_naming_a_missing_role_is_left_out_and_reported() {
        let ghost = contact(
            "ghost",
            "wizard",
            ContactIdentifiers {
                email: Some("g@acme.hr".into()),
                ..Default::default()
            },
        );
        let ana = contact(
            "ana",
            "owner",
            ContactIdentifiers {
                email: Some("ana@acme.hr".into()),
                ..Default::default()
            },
        );
        let report = resolve(&[ghost, ana], &roles(&["owner"]));
        assert_eq!(report.contacts.len(), 1);
        assert!(!report.identity_links.contains_key("ghost"));
        assert_eq!(
            report.problems["ghost"].missing_role.as_deref(),
            Some("wizard")
        );
        assert_eq!(
            report.contacts_with_missing_role(),
            vec![("ghost", "wizard")]
        );
        assert!(!report.problems.contains_key("ana"));
    }

    #[test]
    fn a_missing_role_contact_still_blocks_a_clashing_identifier() {
        let ghost = contact(
            "ghost",
            "wizard",
            ContactIdentifiers {
                email: Some("ana@acme.hr".into()),
                ..Default::default()
            },
        );
        let ana = contact(
            "ana",
            "owner",
            ContactIdentifiers {
                email: Some("ANA@acme.hr".into()),
                ..Default::default()
            },
        );
        let report = resolve(&[ghost, ana], &roles(&["owner"]));
        assert!(!report.identity_links.contains_key("ana"));
        assert_eq!(
            report.problems["ana"].conflicts[0].contacts,
            vec!["ghost".to_string()]
        );
    }

    #[test]
    fn invalid_identifiers_are_reported_not_linked() {
        let ana = contact(
            "ana",
            "owner",
            ContactIdentifiers {
                phone: Some("099 123 4567".into()),
                email: Some("ana@acme.hr".into()),
                ..Default::default()
            },
        );
        let report = resolve(&[ana], &roles(&["owner"]));
        assert_eq!(report.identity_links["ana"], vec!["email:ana@acme.hr"]);
        assert_eq!(report.problems["ana"].invalid.len(), 1);
        assert!(report.problems["ana"].invalid[0].contains("failed to normalise phone"));
    }
}
