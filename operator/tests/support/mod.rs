//! Loads the YAML fixtures into the operator's types, through the real `validate`.
#![allow(dead_code)]

pub mod stand_in;

use kube::runtime::{reflector, watcher};
use saint_operator::{
    cache::{Children, Sources, chain_reports::ChainReports, children::ChildStore},
    crd::{Contact, Role, SaintBot},
    offline::{Manifests, read_manifests},
    saintbot_controller::{
        dereference::Dereferenced,
        validate::{ValidatedSaintBot, validate},
    },
    settings::OperatorSettings,
};

pub fn fixture_path(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The bot and everything it refers to, from one multi-document YAML file.
pub fn load(name: &str) -> (SaintBot, Dereferenced) {
    let text = std::fs::read_to_string(fixture_path(name)).expect("fixture readable");
    let mut manifests = Manifests::default();
    read_manifests(&text, "default", &mut manifests).expect("fixture parses");
    assert_eq!(manifests.bots.len(), 1, "fixture {name} has one SaintBot");
    (manifests.bots.remove(0), manifests.dereferenced)
}

pub fn settings() -> OperatorSettings {
    OperatorSettings {
        api_server_cidrs: vec!["172.18.0.2/32".to_string()],
        ..OperatorSettings::with_tag("0.1.0")
    }
}

pub fn validated(name: &str) -> ValidatedSaintBot {
    validated_with(name, &settings())
}

/// Like [`validated`], with explicit operator settings.
pub fn validated_with(name: &str, settings: &OperatorSettings) -> ValidatedSaintBot {
    let (bot, dereferenced) = load(name);
    validate(&bot, &dereferenced, settings).expect("fixture validates")
}

/// Compares `actual` with the golden file `tests/golden/<file>`; with
/// `SAINT_UPDATE_GOLDEN=1` rewrites it instead (review the diff before committing).
pub fn assert_golden(file: &str, actual: &str) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("SAINT_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("golden writable");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "failed to read {}: {error}; run with SAINT_UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    pretty_assertions::assert_eq!(
        expected,
        actual,
        "{} differs; run with SAINT_UPDATE_GOLDEN=1 to accept",
        path.display()
    );
}

/// A store holding `objects`, as a watch would have filled it.
pub fn store<K>(objects: &[K]) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store::<K>();
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(object.clone()));
    }
    store
}

/// The operator's caches of Saint's own resources, holding these objects.
pub fn sources(bots: &[SaintBot], contacts: &[Contact], roles: &[Role]) -> Sources {
    Sources {
        bots: store(bots),
        contacts: store(contacts),
        roles: store(roles),
    }
}

/// Child caches that have seen no child yet.
pub fn no_children() -> Children {
    Children {
        service_accounts: ChildStore::holding(&[]),
        role_bindings: ChildStore::holding(&[]),
        config_maps: ChildStore::holding(&[]),
        claims: ChildStore::holding(&[]),
        services: ChildStore::holding(&[]),
        network_policies: ChildStore::holding(&[]),
        ingresses: ChildStore::holding(&[]),
        deployments: ChildStore::holding(&[]),
        chain_reports: ChainReports::holding(&[]),
    }
}
