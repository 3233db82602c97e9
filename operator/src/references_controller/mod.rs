//! The references controller: writes the status of Contacts and Roles, the resources
//! SaintBots refer to. It runs beside the SaintBot controller, so a Contact or Role gets
//! its status whether or not any bot reconciles in its namespace, and no bot reconcile
//! writes another object's status.
//!
//! - A Role's status depends on the Role alone ([`role_status`]).
//! - A Contact's status depends on the SaintBots, Contacts and Roles of its namespace
//!   ([`contact_status`]), so any change to those wakes every Contact there.

pub mod contact_status;
pub mod role_status;

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    runtime::{
        Controller,
        controller::Action,
        events::Recorder,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use saint_config::ErrorChain;

use self::{
    contact_status::{contact_statuses, contact_transition_event},
    role_status::{role_status, role_transition_event},
};
use crate::{
    crd::{Contact, Role, SaintBot},
    labels::FIELD_MANAGER,
    status::{self, StatusError},
};

/// How long a failed reconcile waits before it is retried.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(15);

/// Why a Contact or Role reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReferencesError {
    #[error("failed to reconcile {kind} {name:?} without a namespace")]
    MissingNamespace { kind: &'static str, name: String },
    #[error("failed to list {kind} in namespace {namespace:?}")]
    List {
        kind: String,
        namespace: String,
        source: kube::Error,
    },
    #[error(transparent)]
    Status(#[from] StatusError),
}

/// What the references controller shares between reconciles.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Event recorder (reporter `saint-operator`).
    pub recorder: Recorder,
    /// A clock that tests can pin.
    now: Box<dyn Fn() -> Time + Send + Sync>,
}

impl Context {
    /// A context with the real clock.
    pub fn new(client: Client) -> Self {
        let recorder = Recorder::new(client.clone(), FIELD_MANAGER.into());
        Self::with_clock(client, recorder, Box::new(|| Time(jiff::Timestamp::now())))
    }

    /// A context with an explicit recorder and clock (tests).
    pub fn with_clock(
        client: Client,
        recorder: Recorder,
        now: Box<dyn Fn() -> Time + Send + Sync>,
    ) -> Self {
        Self {
            client,
            recorder,
            now,
        }
    }
}

async fn list<K>(client: &Client, namespace: &str) -> Result<Vec<K>, ReferencesError>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .map_err(|source| ReferencesError::List {
            kind: K::kind(&()).into_owned(),
            namespace: namespace.to_string(),
            source,
        })
}

/// Writes one Contact's status: reads the SaintBots, Contacts and Roles of its
/// namespace, judges the Contact among them, and publishes a Warning when a problem
/// appears or changes.
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
    let bots: Vec<SaintBot> = list(&context.client, &namespace).await?;
    let mut contacts: Vec<Contact> = list(&context.client, &namespace).await?;
    let roles: Vec<Role> = list(&context.client, &namespace).await?;
    // The list may predate the object being reconciled (a watch event outruns the list).
    match contacts
        .iter_mut()
        .find(|other| other.metadata.name == contact.metadata.name)
    {
        Some(listed) => *listed = contact.as_ref().clone(),
        None => contacts.push(contact.as_ref().clone()),
    }
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
        _ => Action::requeue(RETRY_INTERVAL),
    }
}

/// Every Contact in `store` in `namespace`.
pub fn contacts_in(store: &Store<Contact>, namespace: Option<String>) -> Vec<ObjectRef<Contact>> {
    store
        .state()
        .iter()
        .filter(|contact| contact.namespace() == namespace)
        .map(|contact| ObjectRef::from(contact.as_ref()))
        .collect()
}

/// Runs the Contact and Role controllers until `shutdown` resolves. `namespace`: watch
/// one namespace, or all.
pub async fn run(
    context: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    fn api<K>(client: &Client, namespace: &Option<String>) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match namespace {
            Some(namespace) => Api::namespaced(client.clone(), namespace),
            None => Api::all(client.clone()),
        }
    }
    let shutdown = shutdown.shared();

    let contacts = Controller::new(
        api::<Contact>(&client, &namespace),
        watcher::Config::default(),
    );
    let store = contacts.store();
    let (bot_store, contact_store, role_store) = (store.clone(), store.clone(), store);
    let contacts = contacts
        // A bot's selectors decide which Contacts it uses, so which clash.
        .watches(
            api::<SaintBot>(&client, &namespace),
            watcher::Config::default(),
            move |bot: SaintBot| contacts_in(&bot_store, bot.namespace()),
        )
        // A Contact's identifiers can clash with (or stop clashing with) any other's.
        .watches(
            api::<Contact>(&client, &namespace),
            watcher::Config::default(),
            move |contact: Contact| contacts_in(&contact_store, contact.namespace()),
        )
        // A Role appearing, disappearing or changing labels matters to the Contacts naming it.
        .watches(
            api::<Role>(&client, &namespace),
            watcher::Config::default(),
            move |role: Role| {
                let name = role.name_any();
                contacts_in(&role_store, role.namespace())
                    .into_iter()
                    .filter(|reference| {
                        role_store
                            .get(reference)
                            .is_some_and(|contact| contact.spec.role == name)
                    })
                    .collect::<Vec<_>>()
            },
        )
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

    let roles = Controller::new(api::<Role>(&client, &namespace), watcher::Config::default())
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
