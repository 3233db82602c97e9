//! The references controller: writes the status of Contacts and Roles, the resources
//! SaintBots refer to. It runs beside the SaintBot controller, so a Contact or Role gets
//! its status whether or not any bot reconciles in its namespace, and no bot reconcile
//! writes another object's status. Everything it reads comes from the operator's caches.
//!
//! - A Role's status depends on the Role alone ([`role_status`]).
//! - A Contact's status depends on the bots that use it and the other Contacts those
//!   bots use (an identifier clash matters only within one bot), and on the Roles of its
//!   namespace ([`contact_status`]). So a change wakes only the Contacts it can affect:
//!   a Contact the Contacts sharing a bot with it, now or before; a bot the Contacts it
//!   uses, now or before; a Role the Contacts naming it.

pub mod contact_status;
pub mod role_status;

use std::{collections::HashSet, sync::Arc, time::Duration};

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Client, ResourceExt,
    runtime::{
        Controller,
        controller::{Action, Config},
        reflector::ObjectRef,
    },
};
use saint_config::ErrorChain;

use self::{
    contact_status::{contact_statuses, contact_transition_event},
    role_status::{role_status, role_transition_event},
};
use crate::{
    cache::{ReferenceFeeds, Sources, in_namespace},
    crd::{Contact, Role, SaintBot},
    events::Publisher,
    labels::FIELD_MANAGER,
    saintbot_controller::{MappingMemory, key_of},
    selection::{bot_uses_contact, bot_uses_role},
    status::{self, StatusError},
};

/// How long a failed reconcile waits before it is retried.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(15);

/// Why a Contact or Role reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReferencesError {
    #[error("failed to reconcile {kind} {name:?} without a namespace")]
    MissingNamespace { kind: &'static str, name: String },
    #[error(transparent)]
    Status(#[from] StatusError),
}

/// What the references controller shares between reconciles.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Event recorder (reporter `saint-operator`).
    pub recorder: Publisher,
    /// Saint's own resources as last seen.
    pub sources: Sources,
    /// A clock that tests can pin.
    now: Box<dyn Fn() -> Time + Send + Sync>,
}

impl Context {
    /// A context with the real clock.
    pub fn new(client: Client, sources: Sources) -> Self {
        let recorder = Publisher::new(client.clone(), FIELD_MANAGER);
        Self::with_clock(
            client,
            recorder,
            sources,
            Box::new(|| Time(jiff::Timestamp::now())),
        )
    }

    /// A context with an explicit recorder and clock (tests).
    pub fn with_clock(
        client: Client,
        recorder: Publisher,
        sources: Sources,
        now: Box<dyn Fn() -> Time + Send + Sync>,
    ) -> Self {
        Self {
            client,
            recorder,
            sources,
            now,
        }
    }
}

/// Writes one Contact's status: judges it among the bots that use it, the Contacts those
/// bots use and the Roles of its namespace (all from the caches), and publishes a Warning
/// when a problem appears or changes.
pub async fn reconcile_contact(
    contact: Arc<Contact>,
    context: Arc<Context>,
) -> Result<Action, ReferencesError> {
    let namespace = contact
        .namespace()
        .ok_or_else(|| ReferencesError::MissingNamespace {
            kind: "Contact",
            name: contact.name_any(),
        })?;
    let now = (context.now)();
    let (bots, contacts) = neighbourhood(&context.sources, &contact, &namespace);
    // Only the Roles the judgement can look at: those the neighbourhood's bots select and
    // those its Contacts name. Copying (and rendering) every Role of the namespace for
    // each Contact made a large namespace quadratic in time and memory.
    let roles: Vec<Role> = in_namespace(&context.sources.roles, &namespace)
        .into_iter()
        .filter(|role| {
            let name = role.metadata.name.as_deref().unwrap_or_default();
            contacts.iter().any(|contact| contact.spec.role == name)
                || bots.iter().any(|bot| bot_uses_role(bot, role))
        })
        .map(Arc::unwrap_or_clone)
        .collect();
    let statuses = contact_statuses(&bots, &contacts, &roles, &now);
    let next = &statuses[&contact.name_any()];
    let events: Vec<_> = contact_transition_event(contact.status.as_ref(), next)
        .into_iter()
        .collect();
    status::report(
        &context.client,
        &context.recorder,
        contact.as_ref(),
        contact.status.as_ref(),
        next,
        &events,
    )
    .await?;
    Ok(Action::await_change())
}

/// Writes one Role's status: whether bots can render it, with a Warning when it turns
/// invalid.
pub async fn reconcile_role(
    role: Arc<Role>,
    context: Arc<Context>,
) -> Result<Action, ReferencesError> {
    if role.namespace().is_none() {
        return Err(ReferencesError::MissingNamespace {
            kind: "Role",
            name: role.name_any(),
        });
    }
    let next = role_status(&role, &(context.now)());
    let events: Vec<_> = role_transition_event(role.status.as_ref(), &next)
        .into_iter()
        .collect();
    status::report(
        &context.client,
        &context.recorder,
        role.as_ref(),
        role.status.as_ref(),
        &next,
        &events,
    )
    .await?;
    Ok(Action::await_change())
}

/// A failed reconcile is retried after [`RETRY_INTERVAL`]; one without a namespace
/// waits for a change (it cannot happen for these namespaced kinds).
pub fn error_policy<K>(object: Arc<K>, error: &ReferencesError, _: Arc<Context>) -> Action
where
    K: kube::Resource<DynamicType = ()>,
{
    tracing::warn!(
        kind = %K::kind(&()),
        name = %object.name_any(),
        error = %ErrorChain(error),
        "reconcile failed"
    );
    match error {
        ReferencesError::MissingNamespace { .. } => Action::await_change(),
        ReferencesError::Status(_) => Action::requeue(RETRY_INTERVAL),
    }
}

/// What one Contact's status depends on, besides Roles: the bots of its namespace that
/// use it, and every Contact those bots use (itself included, as reconciled). Judging
/// the Contact among these gives the answer judging it among the whole namespace would:
/// a bot that does not use it cannot make it clash or count it as used.
fn neighbourhood(
    sources: &Sources,
    contact: &Contact,
    namespace: &str,
) -> (Vec<SaintBot>, Vec<Contact>) {
    let bots: Vec<Arc<SaintBot>> = in_namespace(&sources.bots, namespace)
        .into_iter()
        .filter(|bot| bot_uses_contact(bot, contact))
        .collect();
    let mut contacts: Vec<Contact> = in_namespace(&sources.contacts, namespace)
        .into_iter()
        .filter(|other| other.metadata.name != contact.metadata.name)
        .filter(|other| bots.iter().any(|bot| bot_uses_contact(bot, other)))
        .map(Arc::unwrap_or_clone)
        .collect();
    contacts.push(contact.clone());
    (
        bots.into_iter().map(Arc::unwrap_or_clone).collect(),
        contacts,
    )
}

/// The Contacts of `namespace` that any of `bots` uses.
fn contacts_of(
    sources: &Sources,
    namespace: &str,
    bots: &[ObjectRef<SaintBot>],
) -> Vec<ObjectRef<Contact>> {
    let bots: Vec<Arc<SaintBot>> = bots
        .iter()
        .filter_map(|bot| sources.bots.get(bot))
        .collect();
    in_namespace(&sources.contacts, namespace)
        .into_iter()
        .filter(|contact| bots.iter().any(|bot| bot_uses_contact(bot, contact)))
        .map(|contact| ObjectRef::from(contact.as_ref()))
        .collect()
}

/// The Contacts `bot` uses.
fn contacts_used_by(sources: &Sources, bot: &SaintBot) -> HashSet<ObjectRef<Contact>> {
    in_namespace(&sources.contacts, &bot.namespace().unwrap_or_default())
        .into_iter()
        .filter(|contact| bot_uses_contact(bot, contact))
        .map(|contact| ObjectRef::from(contact.as_ref()))
        .collect()
}

/// The bots of `namespace` that use `contact`.
fn bots_using(
    sources: &Sources,
    namespace: &str,
    contact: &Contact,
) -> HashSet<ObjectRef<SaintBot>> {
    in_namespace(&sources.bots, namespace)
        .into_iter()
        .filter(|bot| bot_uses_contact(bot, contact))
        .map(|bot| ObjectRef::from(bot.as_ref()))
        .collect()
}

/// Runs the Contact and Role controllers until `shutdown` resolves.
pub async fn run(
    context: Arc<Context>,
    feeds: ReferenceFeeds,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = shutdown.shared();
    let sources = context.sources.clone();
    let config = Config::default()
        .concurrency(concurrency)
        .debounce(Duration::from_millis(500));
    // Which bots each Contact mapped to, and which Contacts each bot used, last time: a
    // change that moves one away must still wake what it left.
    let contact_bots = Arc::new(MappingMemory::default());
    let bot_contacts = Arc::new(MappingMemory::<Contact>::default());
    // The feeds carry changes after the first list: learn today's mappings from the
    // full stores, so the first change of a Contact or bot still wakes what it leaves.
    for contact in sources.contacts.state() {
        let namespace = contact.namespace().unwrap_or_default();
        contact_bots.remember(
            key_of(contact.as_ref()),
            bots_using(&sources, &namespace, &contact),
        );
    }
    for bot in sources.bots.state() {
        bot_contacts.remember(key_of(bot.as_ref()), contacts_used_by(&sources, &bot));
    }

    let (bot_sources, contact_sources, role_sources) =
        (sources.clone(), sources.clone(), sources.clone());
    let contacts = Controller::for_stream(feeds.contacts, sources.contacts.clone())
        .with_config(config.clone())
        // Every Contact once at start: the feeds do not carry the first list.
        .reconcile_all_on(futures::stream::once(async {}))
        // A bot's selectors decide which Contacts it uses, so which clash.
        .watches_stream(feeds.bots_changed, move |bot: SaintBot| {
            bot_contacts.remember(key_of(&bot), contacts_used_by(&bot_sources, &bot))
        })
        // A Contact's identifiers can clash with (or stop clashing with) those of any
        // Contact one of its bots uses.
        .watches_stream(feeds.contacts_changed, move |contact: Contact| {
            let namespace = contact.namespace().unwrap_or_default();
            let bots = contact_bots.remember(
                key_of(&contact),
                bots_using(&contact_sources, &namespace, &contact),
            );
            let mut woken = contacts_of(&contact_sources, &namespace, &bots);
            woken.push(ObjectRef::from(&contact));
            woken
        })
        // A Role appearing, disappearing, changing labels or its validity matters to the
        // Contacts naming it.
        .watches_stream(feeds.roles_changed, move |role: Role| {
            let name = role.name_any();
            in_namespace(
                &role_sources.contacts,
                &role.namespace().unwrap_or_default(),
            )
            .into_iter()
            .filter(|contact| contact.spec.role == name)
            .map(|contact| ObjectRef::from(contact.as_ref()))
            .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_contact, error_policy, context.clone())
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(contact = %object, "reconciled"),
                Err(error) => {
                    tracing::debug!(error = %ErrorChain(&error), "contact reconcile error")
                }
            }
        });

    let roles = Controller::for_stream(feeds.roles, sources.roles.clone())
        .with_config(config)
        .reconcile_all_on(futures::stream::once(async {}))
        .graceful_shutdown_on(shutdown)
        .run(reconcile_role, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(role = %object, "reconciled"),
                Err(error) => tracing::debug!(error = %ErrorChain(&error), "role reconcile error"),
            }
        });
    futures::join!(contacts, roles);
}
