//! The two sides of identity resolution joined: Contacts rendered by the operator's real
//! rendering code (`validate` + the config map builder, as the `render` example runs
//! them), senders resolved by the agent's real `caller_for`. Nothing is hand-written in
//! between, so a normalisation rule that differs between the two fails here.

use std::{collections::BTreeSet, path::PathBuf};

use proptest::prelude::*;
use saint_agent::identity::caller_for;
use saint_config::{BotConfig, ChannelIdentity, ChannelKind};
use saint_operator::{
    crd::ContactIdentifiers,
    identity::{ContactInput, resolve},
    offline::{Manifests, read_manifests},
    saintbot_controller::{build::config_map::rendered_config_json, validate::validate},
    settings::OperatorSettings,
};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Renders `bot-config.json` for the one SaintBot in `files` and loads it as the agent does.
fn render(files: &[PathBuf], namespace: &str) -> BotConfig {
    let mut manifests = Manifests::default();
    for path in files {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|error| panic!("failed to read {}: {error}", path.display()));
        read_manifests(&text, namespace, &mut manifests)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    }
    assert_eq!(manifests.bots.len(), 1, "one SaintBot in {files:?}");
    let validated = validate(
        &manifests.bots[0],
        &manifests.dereferenced,
        &OperatorSettings::with_tag("test"),
    )
    .unwrap_or_else(|error| panic!("{files:?}: {error}"));
    BotConfig::from_json(&rendered_config_json(&validated)).expect("the agent accepts it")
}

fn example_company() -> BotConfig {
    let examples = repository().join("charts/saint/examples");
    render(
        &[
            examples.join("saintbot.yaml"),
            examples.join("contacts.yaml"),
            examples.join("roles.yaml"),
        ],
        "acme",
    )
}

fn operator_fixture() -> BotConfig {
    render(
        &[repository().join("operator/tests/fixtures/acme.yaml")],
        "acme",
    )
}

/// Every identity the operator linked, resolved by the agent from its canonical peer and
/// from the forms the platforms deliver, lands on its contact with its role.
fn assert_every_identity_resolves(config: &BotConfig) -> BTreeSet<ChannelKind> {
    let mut kinds = BTreeSet::new();
    for contact in &config.contacts {
        assert!(
            !contact.identities.is_empty(),
            "{} has identities",
            contact.slug
        );
        for identity in &contact.identities {
            kinds.insert(identity.kind());
            let mut peers = vec![identity.peer().to_string()];
            match identity.kind() {
                // WhatsApp delivers `wa_id`: the number without `+`.
                ChannelKind::Whatsapp => peers.push(identity.peer().trim_start_matches('+').into()),
                // Mail headers carry whatever case the sender typed.
                ChannelKind::Email => peers.push(identity.peer().to_uppercase()),
                _ => {}
            }
            for peer in peers {
                let caller = caller_for(config, identity.kind(), &peer)
                    .unwrap_or_else(|error| panic!("{identity} from {peer:?}: {error}"));
                assert_eq!(
                    (
                        caller.slug.as_str(),
                        caller.role_name.as_str(),
                        caller.known
                    ),
                    (contact.slug.as_str(), contact.role.as_str(), true),
                    "{identity} sent as {peer:?}"
                );
                assert_eq!(caller.identity, identity.as_str());
                assert_eq!(caller.session_key, format!("person:{}", contact.slug));
            }
        }
    }
    // The links are the same identities, keyed by slug.
    for (slug, identities) in &config.identity_links {
        for identity in identities {
            let caller = caller_for(config, identity.kind(), identity.peer()).unwrap();
            assert_eq!(caller.slug, slug.as_str(), "{identity}");
        }
    }
    kinds
}

#[test]
fn every_identity_of_the_example_company_resolves_to_its_contact_and_role() {
    let config = example_company();
    let slugs: Vec<&str> = config
        .contacts
        .iter()
        .map(|contact| contact.slug.as_str())
        .collect();
    assert_eq!(slugs, ["ana", "ivan", "marko"]);
    let kinds = assert_every_identity_resolves(&config);
    for kind in [
        ChannelKind::Whatsapp,
        ChannelKind::Email,
        ChannelKind::Telegram,
        ChannelKind::Slack,
        ChannelKind::Discord,
    ] {
        assert!(
            kinds.contains(&kind),
            "the example company has a {kind:?} identity"
        );
    }
}

#[test]
fn every_identity_of_the_operator_golden_fixture_resolves_to_its_contact_and_role() {
    let config = operator_fixture();
    // The fixture is the one the operator's golden `bot-config.json` is rendered from.
    let golden: BotConfig = BotConfig::from_json(
        &std::fs::read_to_string(repository().join("operator/tests/golden/bot-config.json"))
            .expect("golden bot-config.json"),
    )
    .expect("the golden config loads");
    assert_eq!(config.identity_links, golden.identity_links);
    assert_every_identity_resolves(&config);
    assert_every_identity_resolves(&golden);
}

/// Regression: Slack member ids are upper-case; the agent once lower-cased every peer
/// and treated Ivan on Slack as a stranger with the `external` role.
#[test]
fn ivan_on_slack_is_the_employee_not_a_stranger() {
    let config = operator_fixture();
    assert!(
        config.identity_links["acme-ivan"].contains(&"slack:U024BE7LH".parse().unwrap()),
        "{:?}",
        config.identity_links
    );
    let ivan = caller_for(&config, ChannelKind::Slack, "U024BE7LH").unwrap();
    assert_eq!(
        (ivan.slug.as_str(), ivan.role_name.as_str(), ivan.known),
        ("acme-ivan", "employee", true)
    );
    assert_eq!(ivan.identity, "slack:U024BE7LH");
    assert_eq!(ivan.session_key, "person:acme-ivan");
    let by_email = caller_for(&config, ChannelKind::Email, "ivan@acme.hr").unwrap();
    assert_eq!(
        ivan.session_key, by_email.session_key,
        "one person, one session"
    );
}

#[test]
fn a_national_number_is_not_turned_into_an_international_one() {
    let config = example_company();
    let error = caller_for(&config, ChannelKind::Whatsapp, "0991234567").unwrap_err();
    assert!(error.to_string().contains("E.164"), "{error}");
}

/// Raw identifiers as people type them and as platforms deliver them: some valid, some
/// not, in any case and with separators.
fn raw_peer(kind: ChannelKind) -> BoxedStrategy<String> {
    let noise = "\\PC{0,24}".boxed();
    let typed = match kind {
        ChannelKind::Whatsapp => (
            prop::sample::select(vec!["+", "00", "", "0", "+0"]),
            "[0-9]{4,17}",
            prop::sample::select(vec!["", " ", "-", "."]),
        )
            .prop_map(|(prefix, digits, separator)| {
                let (head, tail) = digits.split_at(digits.len() / 2);
                format!("{prefix}{head}{separator}{tail}")
            })
            .boxed(),
        ChannelKind::Email => {
            "( ?)[A-Za-z0-9._+]{0,8}@?[A-Za-z0-9-]{0,8}(\\.[A-Za-z]{2,3})?( ?)".boxed()
        }
        ChannelKind::Telegram => "0{0,2}[0-9]{1,21}".boxed(),
        ChannelKind::Slack => "[UuWwBbCc][A-Za-z0-9]{1,12}".boxed(),
        ChannelKind::Discord => {
            prop_oneof!["[1-9][0-9]{16,19}", "[A-Za-z0-9_.]{1,34}(#[0-9]{3,5})?",].boxed()
        }
        ChannelKind::Matrix => {
            "@?[A-Za-z0-9._=/+-]{0,10}:?[A-Za-z0-9.-]{0,12}(:[0-9]{1,5})?".boxed()
        }
        ChannelKind::Http => "[A-Za-z0-9 ]{0,10}".boxed(),
    };
    prop_oneof![4 => typed, 1 => noise].boxed()
}

fn identifiers(kind: ChannelKind, raw: &str) -> ContactIdentifiers {
    let raw = Some(raw.to_string());
    match kind {
        ChannelKind::Whatsapp => ContactIdentifiers {
            phone: raw,
            ..Default::default()
        },
        ChannelKind::Email => ContactIdentifiers {
            email: raw,
            ..Default::default()
        },
        ChannelKind::Telegram => ContactIdentifiers {
            telegram: raw,
            ..Default::default()
        },
        ChannelKind::Slack => ContactIdentifiers {
            slack: raw,
            ..Default::default()
        },
        ChannelKind::Discord => ContactIdentifiers {
            discord: raw,
            ..Default::default()
        },
        ChannelKind::Matrix => ContactIdentifiers {
            matrix: raw,
            ..Default::default()
        },
        ChannelKind::Http => unreachable!("Contacts have no http identifier"),
    }
}

/// Every kind a Contact can name. `http` peers are chosen by the API caller and never
/// rendered from a Contact, so the operator has no side to agree with there.
const CONTACT_KINDS: [ChannelKind; 6] = [
    ChannelKind::Whatsapp,
    ChannelKind::Email,
    ChannelKind::Telegram,
    ChannelKind::Slack,
    ChannelKind::Discord,
    ChannelKind::Matrix,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// For any identifier of any kind: when the operator links it, the agent resolves the
    /// same raw text to that contact and role under the same identity; when the operator
    /// refuses it, the agent never lands on that contact.
    #[test]
    fn operator_and_agent_agree(
        (kind, raw) in prop::sample::select(CONTACT_KINDS.to_vec())
            .prop_flat_map(|kind| (Just(kind), raw_peer(kind)))
    ) {
        let mut config = example_company();
        let roles: BTreeSet<String> = config.roles.keys().cloned().collect();
        let report = resolve(
            &[ContactInput {
                slug: "prop-person".to_string(),
                display_name: "Prop".to_string(),
                role: "employee".to_string(),
                identifiers: identifiers(kind, &raw),
            }],
            &roles,
        );
        config.contacts = report.contacts.clone();
        config.identity_links = report.identity_links.clone();
        let linked: Vec<&ChannelIdentity> =
            report.identity_links.values().flatten().collect();
        let agent = caller_for(&config, kind, &raw);
        match linked.as_slice() {
            [identity] => {
                let caller = agent.map_err(|error| TestCaseError::fail(format!(
                    "operator linked {identity} from {raw:?}, the agent refused it: {error}"
                )))?;
                prop_assert_eq!(caller.identity.as_str(), identity.as_str());
                prop_assert_eq!(
                    (caller.slug.as_str(), caller.role_name.as_str(), caller.known),
                    ("prop-person", "employee", true)
                );
            }
            [] => {
                prop_assert!(!report.problems.is_empty(), "a refused identifier is reported");
                prop_assert!(
                    agent.is_err(),
                    "the operator refused {:?}, the agent accepted it as {:?}",
                    raw,
                    agent.map(|caller| caller.identity)
                );
            }
            more => prop_assert!(false, "one identifier, several identities: {more:?}"),
        }
    }
}
