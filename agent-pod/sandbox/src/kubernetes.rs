//! The Kubernetes backend: one sandbox Job per scope, built from the Job template the
//! operator rendered into the bot config (image, security context, volumes, pod
//! affinity to the bot pod, deadlines). The agent fills only the name, scope labels,
//! the owner reference and the runner's settings; policy stays with the operator and
//! the admission policy.
//!
//! `/agent` shows only the caller's view: the template's placeholder mount there is
//! replaced by one read-only `subPath` mount per subtree or file of the view, and a
//! template that mounts the workspace volume anywhere without a `subPath` is refused.
//!
//! The agent reaches the runner through its socket on the bot's shared volume
//! (`/run/saint/sandboxes/<job>/runner.sock`), so it needs no `pods/exec`. Inside the
//! sandbox only that Job's own directory is writable (`/run/saint/sandbox`); a template
//! that would let a sandbox write elsewhere on the workspace (and replace Porter's or
//! another sandbox's socket) is refused. Touches only Jobs labelled as this bot's
//! sandboxes (and reads their pods for error messages).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::VolumeMount;
use k8s_openapi::{
    api::{
        batch::v1::Job,
        core::v1::{EnvVar, Pod},
    },
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
};
use saint_config::{
    sandbox_contract::{
        RunnerSettings, SANDBOX_BROWSER_MOUNT_PATH, SANDBOX_BROWSER_SUBPATH_PLACEHOLDER,
        SANDBOX_BROWSER_SUBPATH_PREFIX, SANDBOX_KEY_LABEL, SANDBOX_RUN_MOUNT_PATH,
        SANDBOX_RUN_SUBPATH_PLACEHOLDER, SANDBOX_RUN_SUBPATH_PREFIX, SANDBOX_SCOPE_LABEL,
        SANDBOX_VIEW_MOUNT_PATH, SANDBOX_VIEW_SUBPATH_PLACEHOLDER, agent_browser_directory,
        agent_runner_socket_path, runner_socket_path, sandbox_label_selector, sandbox_labels,
    },
    uids::SANDBOX_UID,
};

use super::{Activity, Sandbox, SandboxError, SandboxHandle, ScopeKey, Slots, View, random_token};

/// Where the sandbox's own runner directory is mounted; the template's `subPath` there
/// is [`SANDBOX_RUN_SUBPATH_PLACEHOLDER`], which the agent replaces per Job.
pub const PER_SANDBOX_MOUNT: &str = SANDBOX_RUN_MOUNT_PATH;

/// Longest Kubernetes object name that is also a valid label value (`job-name`).
const MAX_NAME: usize = 63;

/// What varies per sandbox Job.
#[derive(Clone, Debug)]
pub struct JobParameters<'a> {
    /// The SaintBot's name.
    pub bot: &'a str,
    /// The scope this sandbox serves.
    pub scope: &'a ScopeKey,
    /// What `/agent` shows.
    pub view: &'a View,
    /// Random suffix, so a restarted agent never collides with a leftover Job.
    pub suffix: &'a str,
    /// The token the runner requires.
    pub runner_token: &'a str,
    /// Files copied from `/agent` into `/workspace` at start.
    pub seed: &'a [String],
    /// The runner's own idle exit (a backstop; the agent reaps first).
    pub runner_idle_timeout_seconds: u64,
    /// The owner when the template carries none (an operator older than the one that
    /// renders the SaintBot into it): the agent's own pod, deleted with the bot through
    /// its Deployment, so the Job is too. Ignored when the template has an owner.
    pub owner: Option<&'a OwnerReference>,
}

/// Why a Job could not be built or managed.
#[derive(Debug, thiserror::Error)]
pub enum JobBuildError {
    #[error("failed to build sandbox job: the bot config has no sandbox jobTemplate")]
    NoTemplate,
    #[error("failed to build sandbox job: jobTemplate is not a batch/v1 Job")]
    Template(#[source] serde_json::Error),
    #[error("failed to build sandbox job: jobTemplate has no pod spec or no container")]
    NoContainer,
    #[error(
        "failed to build sandbox job: no owner reference (a Job without one would outlive its bot)"
    )]
    NoOwner,
    #[error(
        "failed to build sandbox job: jobTemplate has no volume mount at {PER_SANDBOX_MOUNT} with \
         subPath {SANDBOX_RUN_SUBPATH_PLACEHOLDER} (without it a sandbox could replace Porter's \
         or another sandbox's socket)"
    )]
    NoSandboxDirectory,
    #[error(
        "failed to build sandbox job: jobTemplate mounts the workspace volume writable at \
         {mount_path}; only {PER_SANDBOX_MOUNT} may be writable"
    )]
    WritableWorkspace { mount_path: String },
    #[error(
        "failed to build sandbox job: jobTemplate has no volume mount at \
         {SANDBOX_VIEW_MOUNT_PATH} with subPath {SANDBOX_VIEW_SUBPATH_PLACEHOLDER} (the place \
         for the caller's view of the workspace)"
    )]
    NoViewPlaceholder,
    #[error(
        "failed to build sandbox job: jobTemplate mounts the whole workspace volume at \
         {mount_path} (no subPath); a sandbox may see only the caller's view"
    )]
    WholeWorkspace { mount_path: String },
}

impl From<JobBuildError> for SandboxError {
    fn from(error: JobBuildError) -> Self {
        SandboxError::Start(error.to_string())
    }
}

/// `<bot>-sbx-<scope>-<suffix>`, cut to 63 characters (the bot part shrinks).
pub fn job_name(bot: &str, scope: &ScopeKey, suffix: &str) -> String {
    let tail = format!("-sbx-{}-{suffix}", scope.id());
    let room = MAX_NAME.saturating_sub(tail.len());
    let bot: String = bot.chars().take(room).collect();
    format!("{}{tail}", bot.trim_end_matches('-'))
}

/// Whether the template already carries an owner reference (the operator renders the
/// SaintBot into it); if so the agent needs no fallback owner.
pub fn template_has_owner(template: &serde_json::Value) -> bool {
    template
        .pointer("/metadata/ownerReferences")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|owners| !owners.is_empty())
}

/// The runner socket of Job `name` as the agent sees it.
pub fn agent_socket_path(agent_run_directory: &Path, name: &str) -> PathBuf {
    agent_runner_socket_path(agent_run_directory, name)
}

fn set_env(env: &mut Vec<EnvVar>, name: &str, value: String) {
    env.retain(|variable| variable.name != name);
    env.push(EnvVar {
        name: name.to_string(),
        value: Some(value),
        value_from: None,
    });
}

/// Builds the sandbox Job from the operator's template (pure).
pub fn build_job(
    template: &serde_json::Value,
    parameters: &JobParameters<'_>,
) -> Result<Job, JobBuildError> {
    let mut job: Job = serde_json::from_value(template.clone()).map_err(JobBuildError::Template)?;
    let name = job_name(parameters.bot, parameters.scope, parameters.suffix);
    let labels = job_labels(parameters);
    name_and_own(&mut job, &name, &labels, parameters.owner)?;
    let spec = job.spec.get_or_insert_with(Default::default);
    // One attempt: a sandbox that fails is replaced by the agent, not retried blindly.
    spec.backoff_limit.get_or_insert(0);
    spec.ttl_seconds_after_finished.get_or_insert(300);
    let pod_metadata = spec.template.metadata.get_or_insert_with(Default::default);
    pod_metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(labels);
    let pod = spec
        .template
        .spec
        .as_mut()
        .ok_or(JobBuildError::NoContainer)?;
    pod.restart_policy = Some("Never".to_string());
    // Never a service-account token in a sandbox, whatever the template says.
    pod.automount_service_account_token = Some(false);
    run_as_sandbox_uid(pod);
    let claim_volumes = claim_volumes(pod);
    let index = pod
        .containers
        .iter()
        .position(|container| container.name == "runner")
        .unwrap_or(0);
    let container = pod
        .containers
        .get_mut(index)
        .ok_or(JobBuildError::NoContainer)?;
    let own_directory = mount_own_directories(container, &claim_volumes, &name)?;
    replace_view_placeholder(container, parameters.view)?;
    let settings = RunnerSettings {
        socket: runner_socket_path(),
        token: parameters.runner_token.to_string(),
        seed: parameters.seed.to_vec(),
        idle_timeout_seconds: parameters.runner_idle_timeout_seconds,
        // The pod has an address before its NetworkPolicy is enforced.
        require_network_cut: true,
    };
    let env = container.env.get_or_insert_with(Vec::new);
    for (name, value) in settings.to_env() {
        set_env(env, &name, value);
    }
    check_workspace_mounts(pod, &claim_volumes, own_directory.as_deref())?;
    Ok(job)
}

/// The sandbox labels of the Job and its pod: the bot's, the scope's and its key.
fn job_labels(parameters: &JobParameters<'_>) -> BTreeMap<String, String> {
    let mut labels = sandbox_labels(parameters.bot);
    labels.insert(
        SANDBOX_SCOPE_LABEL.to_string(),
        parameters.scope.scope_label().to_string(),
    );
    labels.insert(
        SANDBOX_KEY_LABEL.to_string(),
        parameters.scope.id().to_string(),
    );
    labels
}

/// Names the Job, labels it and gives it an owner: the template's, else `owner`.
fn name_and_own(
    job: &mut Job,
    name: &str,
    labels: &BTreeMap<String, String>,
    owner: Option<&OwnerReference>,
) -> Result<(), JobBuildError> {
    let metadata = &mut job.metadata;
    metadata.name = Some(name.to_string());
    metadata.generate_name = None;
    metadata.resource_version = None;
    metadata.uid = None;
    metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(labels.clone());
    let has_owner = metadata
        .owner_references
        .as_ref()
        .is_some_and(|owners| !owners.is_empty());
    if !has_owner {
        let owner = owner.ok_or(JobBuildError::NoOwner)?;
        metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(owner.clone());
    }
    // `blockOwnerDeletion: true` needs update rights on the owner's finalizers, which
    // the agent's account does not have; garbage collection works without it.
    for owner in metadata.owner_references.iter_mut().flatten() {
        owner.block_owner_deletion = Some(false);
    }
    Ok(())
}

/// The pod's volumes backed by a claim (the bot's workspace).
fn claim_volumes(pod: &k8s_openapi::api::core::v1::PodSpec) -> Vec<String> {
    pod.volumes
        .iter()
        .flatten()
        .filter(|volume| volume.persistent_volume_claim.is_some())
        .map(|volume| volume.name.clone())
        .collect()
}

/// Fills the runner's two directories of this Job: its own runner directory, the only
/// writable place on the workspace (so it can neither replace Porter's socket nor
/// another sandbox's and listen in between), and its browser socket directory, always
/// read-only. Returns the runner directory's `subPath`.
fn mount_own_directories(
    container: &mut k8s_openapi::api::core::v1::Container,
    claim_volumes: &[String],
    name: &str,
) -> Result<Option<String>, JobBuildError> {
    let per_sandbox_mount = container
        .volume_mounts
        .iter_mut()
        .flatten()
        .find(|mount| {
            mount.mount_path == PER_SANDBOX_MOUNT
                && mount.sub_path.as_deref() == Some(SANDBOX_RUN_SUBPATH_PLACEHOLDER)
                && claim_volumes.contains(&mount.name)
        })
        .ok_or(JobBuildError::NoSandboxDirectory)?;
    per_sandbox_mount.sub_path = Some(format!("{SANDBOX_RUN_SUBPATH_PREFIX}{name}"));
    per_sandbox_mount.sub_path_expr = None;
    per_sandbox_mount.read_only = None;
    let own_directory = per_sandbox_mount.sub_path.clone();
    if let Some(browser_mount) = container.volume_mounts.iter_mut().flatten().find(|mount| {
        mount.mount_path == SANDBOX_BROWSER_MOUNT_PATH
            && mount.sub_path.as_deref() == Some(SANDBOX_BROWSER_SUBPATH_PLACEHOLDER)
            && claim_volumes.contains(&mount.name)
    }) {
        browser_mount.sub_path = Some(format!("{SANDBOX_BROWSER_SUBPATH_PREFIX}{name}"));
        browser_mount.sub_path_expr = None;
        browser_mount.read_only = Some(true);
    }
    Ok(own_directory)
}

/// Every other mount of the workspace, in any container, must be read-only and show a
/// `subPath`: never the whole workspace.
fn check_workspace_mounts(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    claim_volumes: &[String],
    own_directory: Option<&str>,
) -> Result<(), JobBuildError> {
    let mut mounts = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .flat_map(|container| container.volume_mounts.iter().flatten())
        .filter(|mount| claim_volumes.contains(&mount.name));
    let writable = mounts.clone().find(|mount| {
        mount.read_only != Some(true)
            && !(mount.mount_path == PER_SANDBOX_MOUNT
                && mount.sub_path.as_deref() == own_directory)
    });
    if let Some(mount) = writable {
        return Err(JobBuildError::WritableWorkspace {
            mount_path: mount.mount_path.clone(),
        });
    }
    let whole = mounts.find(|mount| {
        mount.sub_path.as_deref().unwrap_or("").is_empty() && mount.sub_path_expr.is_none()
    });
    if let Some(mount) = whole {
        return Err(JobBuildError::WholeWorkspace {
            mount_path: mount.mount_path.clone(),
        });
    }
    Ok(())
}

/// Creates a Job's browser socket directory: the agent's own, mode 0750, so the
/// sandbox (in the shared group) may connect to a socket there but add nothing; its
/// parent stays private to the agent (the kubelet mounts the leaf directly).
fn create_browser_directory(directory: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::DirBuilderExt;
    let failed = |error: std::io::Error| {
        SandboxError::Start(format!(
            "failed to create the browser socket directory {}: {error}",
            directory.display()
        ))
    };
    if let Some(parent) = directory.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(failed)?;
    }
    std::fs::DirBuilder::new()
        .mode(0o750)
        .create(directory)
        .map_err(failed)
}

/// Whether a built Job mounts its browser socket directory (templates of operators
/// older than the browser do not: the browser is then unavailable in its sandboxes).
pub fn mounts_browser_sockets(job: &Job) -> bool {
    job.spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .into_iter()
        .flat_map(|pod| pod.containers.iter())
        .flat_map(|container| container.volume_mounts.iter().flatten())
        .any(|mount| {
            mount.mount_path == SANDBOX_BROWSER_MOUNT_PATH
                && mount
                    .sub_path
                    .as_deref()
                    .is_some_and(|path| path.starts_with(SANDBOX_BROWSER_SUBPATH_PREFIX))
                && mount.read_only == Some(true)
        })
}

/// Every container runs as the sandbox uid, whatever the template says: Porter's call
/// socket admits that uid and its control socket refuses it, so a sandbox running as
/// the agent's uid could register tokens of any role. Sets it on the pod and drops any
/// container's own `runAsUser`, which would override the pod's.
fn run_as_sandbox_uid(pod: &mut k8s_openapi::api::core::v1::PodSpec) {
    let context = pod.security_context.get_or_insert_with(Default::default);
    context.run_as_user = Some(i64::from(SANDBOX_UID));
    context.run_as_non_root = Some(true);
    for container in pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten())
    {
        if let Some(context) = container.security_context.as_mut() {
            context.run_as_user = None;
        }
    }
}

/// Replaces the template's `/agent` placeholder mount with one read-only mount per
/// entry of the view, on the same volume.
fn replace_view_placeholder(
    container: &mut k8s_openapi::api::core::v1::Container,
    view: &View,
) -> Result<(), JobBuildError> {
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    let index = mounts
        .iter()
        .position(|mount| {
            mount.mount_path == SANDBOX_VIEW_MOUNT_PATH
                && mount.sub_path.as_deref() == Some(SANDBOX_VIEW_SUBPATH_PLACEHOLDER)
        })
        .ok_or(JobBuildError::NoViewPlaceholder)?;
    let placeholder = mounts.remove(index);
    let view_mounts = view.entries().iter().map(|entry| VolumeMount {
        name: placeholder.name.clone(),
        mount_path: format!("{SANDBOX_VIEW_MOUNT_PATH}/{}", entry.path),
        sub_path: Some(entry.path.clone()),
        read_only: Some(true),
        ..VolumeMount::default()
    });
    mounts.splice(index..index, view_mounts);
    Ok(())
}

/// Settings of the Kubernetes backend.
#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    /// The bot's namespace.
    pub namespace: String,
    /// The SaintBot's name.
    pub bot: String,
    /// `BotConfig.sandbox.jobTemplate`.
    pub template: serde_json::Value,
    /// Seed entries for `/workspace`.
    pub seed: Vec<String>,
    /// The agent container's `/run/saint` (the shared run directory).
    pub agent_run_directory: PathBuf,
    /// Reap after this long without a command.
    pub idle_timeout: Duration,
    /// Give up on a Job whose runner socket has not appeared after this long.
    pub start_timeout: Duration,
    /// The fallback owner if the template carries none (see [`JobParameters::owner`]).
    pub owner: Option<OwnerReference>,
}

struct RunningJob {
    name: String,
    socket: PathBuf,
    token: String,
    /// The agent's directory for its browser's egress sockets, if the Job mounts it.
    browser_sockets: Option<PathBuf>,
    activity: Arc<Activity>,
    /// What its `/agent` shows.
    view: View,
}

/// Sandbox Jobs in the bot's namespace.
pub struct KubernetesSandbox {
    jobs: Api<Job>,
    pods: Api<Pod>,
    config: KubernetesConfig,
    slots: Slots<RunningJob>,
}

impl KubernetesSandbox {
    /// A backend using `client` in the bot's namespace.
    pub fn new(client: Client, config: KubernetesConfig) -> Self {
        Self {
            jobs: Api::namespaced(client.clone(), &config.namespace),
            pods: Api::namespaced(client, &config.namespace),
            config,
            slots: Slots::default(),
        }
    }

    /// The agent's own pod as an owner reference (`pods get` on its own name, which
    /// is the pod's hostname). Use it when the template carries no owner: the pod is
    /// deleted with the bot (SaintBot → Deployment → ReplicaSet → Pod), and so are the
    /// Jobs it owns — also when the agent pod is replaced, whose sandboxes' tokens die
    /// with it anyway.
    pub async fn own_pod_owner(
        client: Client,
        namespace: &str,
        pod_name: &str,
    ) -> Result<OwnerReference, SandboxError> {
        let pod = Api::<Pod>::namespaced(client, namespace)
            .get(pod_name)
            .await
            .map_err(|error| {
                SandboxError::Backend(format!("failed to read the agent pod {pod_name}: {error}"))
            })?;
        let uid = pod
            .metadata
            .uid
            .ok_or_else(|| SandboxError::Backend(format!("agent pod {pod_name} has no uid")))?;
        Ok(OwnerReference {
            api_version: "v1".to_string(),
            kind: "Pod".to_string(),
            name: pod_name.to_string(),
            uid,
            ..OwnerReference::default()
        })
    }

    /// Deletes this bot's sandbox Jobs left by an earlier agent (their tokens are
    /// lost with it). Call once at start.
    pub async fn reap_leftovers(&self) -> Result<usize, SandboxError> {
        let selector = sandbox_label_selector(&self.config.bot);
        let jobs = self
            .jobs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| {
                SandboxError::Backend(format!("failed to list sandbox jobs: {error}"))
            })?;
        let mut deleted = 0;
        for job in jobs {
            if let Some(name) = job.metadata.name {
                self.delete(&name).await?;
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    async fn delete(&self, name: &str) -> Result<(), SandboxError> {
        let browser_sockets = agent_browser_directory(&self.config.agent_run_directory, name);
        if let Err(error) = std::fs::remove_dir_all(&browser_sockets)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(
                job = name,
                directory = %browser_sockets.display(),
                %error,
                "failed to remove the sandbox's browser socket directory"
            );
        }
        match self.jobs.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(SandboxError::Backend(format!(
                "failed to delete sandbox job {name}: {error}"
            ))),
        }
    }

    async fn pod_summary(&self, name: &str) -> String {
        let pods = match self
            .pods
            .list(&ListParams::default().labels(&format!("job-name={name}")))
            .await
        {
            Ok(pods) => pods,
            Err(error) => return format!("pods unreadable: {error}"),
        };
        let summaries: Vec<String> = pods
            .into_iter()
            .map(|pod| {
                let status = pod.status.unwrap_or_default();
                let waiting: Vec<String> = status
                    .container_statuses
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|container| container.state?.waiting?.reason)
                    .collect();
                format!(
                    "pod {} phase {}{}",
                    pod.metadata.name.unwrap_or_default(),
                    status.phase.unwrap_or_else(|| "Unknown".to_string()),
                    if waiting.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", waiting.join(", "))
                    }
                )
            })
            .collect();
        if summaries.is_empty() {
            "no pod scheduled yet".to_string()
        } else {
            summaries.join("; ")
        }
    }

    async fn start(&self, scope: &ScopeKey, view: &View) -> Result<RunningJob, SandboxError> {
        let template = self.config.template.clone();
        let token = random_token()?;
        let suffix = &random_token()?[..6];
        let parameters = JobParameters {
            bot: &self.config.bot,
            scope,
            view,
            suffix,
            runner_token: &token,
            seed: &self.config.seed,
            runner_idle_timeout_seconds: (self.config.idle_timeout.as_secs() * 2).max(60),
            owner: self.config.owner.as_ref(),
        };
        let job = build_job(&template, &parameters)?;
        let name = job.metadata.name.clone().unwrap_or_default();
        // Before the Job: the kubelet would otherwise create the subPath itself, as
        // root, and the agent could not bind the browser's sockets there.
        let browser_sockets = if mounts_browser_sockets(&job) {
            let directory = agent_browser_directory(&self.config.agent_run_directory, &name);
            create_browser_directory(&directory)?;
            Some(directory)
        } else {
            None
        };
        self.jobs
            .create(&PostParams::default(), &job)
            .await
            .map_err(|error| {
                SandboxError::Start(format!("failed to create sandbox job {name}: {error}"))
            })?;
        let socket = agent_socket_path(&self.config.agent_run_directory, &name);
        let started = Instant::now();
        loop {
            if socket.exists() && tokio::net::UnixStream::connect(&socket).await.is_ok() {
                return Ok(RunningJob {
                    name,
                    socket,
                    token,
                    browser_sockets,
                    activity: Activity::new(),
                    view: view.clone(),
                });
            }
            if started.elapsed() >= self.config.start_timeout {
                let detail = self.pod_summary(&name).await;
                self.delete(&name).await?;
                return Err(SandboxError::NotReady {
                    seconds: self.config.start_timeout.as_secs(),
                    detail,
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Sandbox for KubernetesSandbox {
    fn ensure<'a>(
        &'a self,
        scope: &'a ScopeKey,
        view: &'a View,
    ) -> BoxFuture<'a, Result<SandboxHandle, SandboxError>> {
        Box::pin(async move {
            let slot = self.slots.slot(scope);
            let mut guard = slot.lock().await;
            // A Job whose runner socket vanished (pod gone) is replaced, and so is one
            // whose mounts no longer match the caller's view (a pod's mounts are fixed).
            if let Some(running) = guard.as_ref() {
                let gone = !running.socket.exists();
                if gone || running.view != *view {
                    let old = guard.take().expect("checked above");
                    if gone {
                        tracing::warn!(job = old.name, "sandbox runner gone; replacing the job");
                    } else {
                        tracing::info!(
                            job = old.name,
                            view = %view.digest(),
                            "the caller's view changed; replacing the sandbox job"
                        );
                    }
                    self.delete(&old.name).await?;
                }
            }
            if guard.is_none() {
                *guard = Some(self.start(scope, view).await?);
            }
            let running = guard.as_ref().expect("just ensured");
            Ok(SandboxHandle {
                socket: running.socket.clone(),
                token: running.token.clone(),
                browser_sockets: running.browser_sockets.clone(),
                lease: running.activity.lease(),
            })
        })
    }

    fn discard<'a>(&'a self, scope: &'a ScopeKey) -> BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(async move {
            let slot = self.slots.slot(scope);
            if let Some(running) = slot.lock().await.take() {
                self.delete(&running.name).await?;
            }
            Ok(())
        })
    }

    fn reap_idle(&self) -> BoxFuture<'_, Result<usize, SandboxError>> {
        Box::pin(async move {
            let mut reaped = 0;
            for (_, slot) in self.slots.all() {
                let Ok(mut guard) = slot.try_lock() else {
                    continue;
                };
                let idle = guard.as_ref().is_some_and(|running| {
                    running
                        .activity
                        .is_idle(self.config.idle_timeout, Instant::now())
                });
                if idle && let Some(running) = guard.take() {
                    tracing::info!(job = running.name, "reaping idle sandbox job");
                    self.delete(&running.name).await?;
                    reaped += 1;
                }
            }
            Ok(reaped)
        })
    }
}

#[cfg(test)]
mod tests {
    use saint_config::SandboxScope;
    use serde_json::json;

    use super::*;

    fn template() -> serde_json::Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "namespace": "acme",
                "labels": {"saint.work/bot": "my-bot", "saint.work/sandbox": "true"},
                "ownerReferences": [{
                    "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                    "name": "my-bot", "uid": "0b1c-uid", "controller": true, "blockOwnerDeletion": true
                }]
            },
            "spec": {
                "activeDeadlineSeconds": 86400,
                "ttlSecondsAfterFinished": 60,
                "template": {
                    "metadata": {"labels": {"saint.work/sandbox": "true"}},
                    "spec": {
                        "automountServiceAccountToken": false,
                        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                            "labelSelector": {"matchLabels": {"saint.work/bot": "my-bot", "app.kubernetes.io/component": "agent"}},
                            "topologyKey": "kubernetes.io/hostname"
                        }]}},
                        "containers": [{
                            "name": "runner",
                            "image": "ghcr.io/saint-work/saint-sandbox:0.1.0",
                            "env": [{"name": "SAINT_RUNNER_TOKEN", "value": "from-template"}],
                            "volumeMounts": [
                                {"name": "workspace", "mountPath": "/agent", "subPath": SANDBOX_VIEW_SUBPATH_PLACEHOLDER, "readOnly": true},
                                {"name": "workspace", "mountPath": "/run/saint/porter", "subPath": ".saint/run/porter", "readOnly": true},
                                {"name": "workspace", "mountPath": "/run/saint/sandbox", "subPath": SANDBOX_RUN_SUBPATH_PLACEHOLDER},
                                {"name": "scratch", "mountPath": "/workspace"}
                            ]
                        }],
                        "volumes": [
                            {"name": "workspace", "persistentVolumeClaim": {"claimName": "my-bot-workspace"}},
                            {"name": "scratch", "emptyDir": {}}
                        ]
                    }
                }
            }
        })
    }

    static NO_VIEW: View = View::empty();

    fn test_scope(scope: SandboxScope, session: &str) -> ScopeKey {
        ScopeKey::for_caller(
            scope,
            session,
            &super::super::Viewer {
                role: "employee",
                person: Some("acme-ana"),
            },
        )
    }

    #[test]
    fn the_view_replaces_the_placeholder_and_a_whole_workspace_mount_is_refused() {
        use super::super::view::{EntryKind, ViewEntry};
        let scope = test_scope(SandboxScope::Agent, "any");
        let view = View::from_entries(vec![
            ViewEntry {
                path: "memory/users/acme-ana".into(),
                kind: EntryKind::Directory,
                device: 0,
                inode: 0,
            },
            ViewEntry {
                path: "SOUL.md".into(),
                kind: EntryKind::File,
                device: 0,
                inode: 42,
            },
        ]);
        let job = build_job(
            &template(),
            &JobParameters {
                view: &view,
                ..parameters(&scope, &[])
            },
        )
        .unwrap();
        let value = serde_json::to_value(&job).unwrap();
        let mounts = &value["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
        assert_eq!(
            mounts.as_array().unwrap()[..2],
            [
                json!({"name": "workspace", "mountPath": "/agent/SOUL.md", "subPath": "SOUL.md", "readOnly": true}),
                json!({"name": "workspace", "mountPath": "/agent/memory/users/acme-ana", "subPath": "memory/users/acme-ana", "readOnly": true}),
            ]
        );
        assert!(
            !mounts
                .to_string()
                .contains(SANDBOX_VIEW_SUBPATH_PLACEHOLDER),
            "{mounts}"
        );
        // An empty view: no workspace mount at /agent at all.
        let job = build_job(&template(), &parameters(&scope, &[])).unwrap();
        let value = serde_json::to_value(&job).unwrap();
        let mounts = value["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].to_string();
        assert!(!mounts.contains("\"/agent"), "{mounts}");

        let mut whole = template();
        whole["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0] =
            json!({"name": "workspace", "mountPath": "/agent", "readOnly": true});
        assert!(matches!(
            build_job(&whole, &parameters(&scope, &[])),
            Err(JobBuildError::NoViewPlaceholder)
        ));
        let mut extra = template();
        extra["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "workspace", "mountPath": "/everything", "readOnly": true}));
        let refused = build_job(&extra, &parameters(&scope, &[])).unwrap_err();
        assert!(
            matches!(&refused, JobBuildError::WholeWorkspace { mount_path } if mount_path == "/everything"),
            "{refused}"
        );
    }

    fn parameters<'a>(scope: &'a ScopeKey, seed: &'a [String]) -> JobParameters<'a> {
        JobParameters {
            bot: "my-bot",
            scope,
            view: &NO_VIEW,
            suffix: "a1b2c3",
            runner_token: "runner-token-1",
            seed,
            runner_idle_timeout_seconds: 3600,
            owner: None,
        }
    }

    #[test]
    fn every_container_runs_as_the_sandbox_uid_whatever_the_template_says() {
        let scope = test_scope(SandboxScope::Session, "http:acme-ana");
        let mut template = template();
        let pod = &mut template["spec"]["template"]["spec"];
        // The agent's uid on the pod, root on an init container, another uid on the runner.
        pod["securityContext"] = json!({"runAsUser": saint_config::uids::AGENT_UID, "runAsNonRoot": false, "fsGroup": 65532});
        pod["containers"][0]["securityContext"] =
            json!({"runAsUser": 4242, "readOnlyRootFilesystem": true});
        pod["initContainers"] = json!([{"name": "init", "image": "ghcr.io/saint-work/saint-sandbox:0.1.0", "securityContext": {"runAsUser": 0}}]);
        let job = build_job(&template, &parameters(&scope, &[])).unwrap();
        let value = serde_json::to_value(&job).unwrap();
        let pod = &value["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"],
            json!({"runAsUser": SANDBOX_UID, "runAsNonRoot": true, "fsGroup": 65532})
        );
        // No container overrides the pod's uid; the rest of their contexts is kept.
        assert_eq!(
            pod["containers"][0]["securityContext"],
            json!({"readOnlyRootFilesystem": true})
        );
        assert_eq!(pod["initContainers"][0]["securityContext"], json!({}));
        // A template with no security context at all gets one.
        let job = build_job(&self::template(), &parameters(&scope, &[])).unwrap();
        let context = job
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .security_context
            .unwrap();
        assert_eq!(
            (context.run_as_user, context.run_as_non_root),
            (Some(i64::from(SANDBOX_UID)), Some(true))
        );
    }

    #[test]
    fn job_fills_name_labels_runner_settings_and_keeps_the_operators_policy() {
        let scope = test_scope(SandboxScope::Session, "http:acme-ana");
        let seed = vec!["SOUL.md".to_string(), "skills".to_string()];
        let job = build_job(&template(), &parameters(&scope, &seed)).unwrap();
        let value = serde_json::to_value(&job).unwrap();
        let name = format!("my-bot-sbx-{}-a1b2c3", scope.id());
        assert_eq!(value["metadata"]["name"], json!(name));
        let expected_labels = json!({
            "app.kubernetes.io/component": "sandbox",
            "app.kubernetes.io/instance": "my-bot",
            "app.kubernetes.io/managed-by": "saint-operator",
            "app.kubernetes.io/name": "saint",
            "saint.work/bot": "my-bot",
            "saint.work/sandbox": "true",
            "saint.work/sandbox-key": scope.id(),
            "saint.work/sandbox-scope": "session",
        });
        assert_eq!(value["metadata"]["labels"], expected_labels);
        assert_eq!(
            value["spec"]["template"]["metadata"]["labels"],
            expected_labels
        );
        assert_eq!(
            value["metadata"]["ownerReferences"][0]["uid"],
            json!("0b1c-uid")
        );
        assert_eq!(
            value["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            json!(false)
        );
        assert_eq!(
            value["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        // The operator's policy survives untouched.
        assert_eq!(value["spec"]["activeDeadlineSeconds"], json!(86400));
        assert_eq!(value["spec"]["ttlSecondsAfterFinished"], json!(60));
        assert_eq!(value["spec"]["backoffLimit"], json!(0));
        let pod = &value["spec"]["template"]["spec"];
        assert_eq!(
            pod["affinity"],
            template()["spec"]["template"]["spec"]["affinity"]
        );
        assert_eq!(pod["automountServiceAccountToken"], json!(false));
        assert_eq!(pod["restartPolicy"], json!("Never"));
        let container = &pod["containers"][0];
        assert_eq!(
            container["image"],
            json!("ghcr.io/saint-work/saint-sandbox:0.1.0")
        );
        assert_eq!(
            container["env"],
            json!([
                {"name": "SAINT_RUNNER_SOCKET", "value": "/run/saint/sandbox/runner.sock"},
                {"name": "SAINT_RUNNER_TOKEN", "value": "runner-token-1"},
                {"name": "SAINT_SANDBOX_SEED", "value": "[\"SOUL.md\",\"skills\"]"},
                {"name": "SAINT_RUNNER_IDLE_TIMEOUT_SECONDS", "value": "3600"},
                {"name": "SAINT_RUNNER_REQUIRE_NETWORK_CUT", "value": "true"},
            ])
        );
        // The empty view's placeholder is gone, so the runner directory moved up one.
        assert_eq!(
            container["volumeMounts"][1],
            json!({"name": "workspace", "mountPath": "/run/saint/sandbox", "subPath": format!(".saint/run/sandboxes/{name}")})
        );
        assert_eq!(
            agent_socket_path(Path::new("/run/saint"), &name),
            PathBuf::from(format!("/run/saint/sandboxes/{name}/runner.sock"))
        );
    }

    #[test]
    fn the_runner_settings_read_back_from_the_job_are_the_ones_given_even_with_commas() {
        let scope = test_scope(SandboxScope::Agent, "any");
        let seed = vec!["notes/a,b.md".to_string(), "skills".to_string()];
        let job = build_job(&template(), &parameters(&scope, &seed)).unwrap();
        let container = &job.spec.unwrap().template.spec.unwrap().containers[0];
        let env: BTreeMap<String, String> = container
            .env
            .iter()
            .flatten()
            .map(|variable| {
                (
                    variable.name.clone(),
                    variable.value.clone().unwrap_or_default(),
                )
            })
            .collect();
        let settings = RunnerSettings::from_env(|name| env.get(name).cloned()).unwrap();
        assert_eq!(
            settings,
            RunnerSettings {
                socket: "/run/saint/sandbox/runner.sock".to_string(),
                // The template's own token is replaced, never kept.
                token: "runner-token-1".to_string(),
                seed,
                idle_timeout_seconds: 3600,
                require_network_cut: true,
            }
        );
    }

    #[test]
    fn owner_reference_comes_from_the_parameters_or_the_job_is_refused() {
        let scope = test_scope(SandboxScope::Agent, "any");
        let mut template = template();
        template["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        let refused = build_job(&template, &parameters(&scope, &[])).unwrap_err();
        assert!(matches!(refused, JobBuildError::NoOwner));

        let owner = OwnerReference {
            api_version: "saint.work/v1alpha1".into(),
            kind: "SaintBot".into(),
            name: "my-bot".into(),
            uid: "uid-from-agent".into(),
            ..OwnerReference::default()
        };
        let mut with_owner = parameters(&scope, &[]);
        with_owner.owner = Some(&owner);
        let job = build_job(&template, &with_owner).unwrap();
        let expected = OwnerReference {
            block_owner_deletion: Some(false),
            ..owner
        };
        assert_eq!(job.metadata.owner_references.unwrap(), vec![expected]);
        assert_eq!(
            job.metadata.name.unwrap(),
            format!("my-bot-sbx-{}-a1b2c3", scope.id())
        );
        assert!(scope.id().starts_with("a-"), "{}", scope.id());
    }

    #[test]
    fn a_template_without_the_per_sandbox_directory_placeholder_is_refused() {
        let scope = test_scope(SandboxScope::Shared, "any");
        // The whole run directory writable at /run/saint (the layout before the fix):
        // a command could replace Porter's socket and listen in the middle.
        let mut shared = template();
        shared["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][2] =
            json!({"name": "workspace", "mountPath": "/run/saint", "subPath": ".saint/run"});
        assert!(matches!(
            build_job(&shared, &parameters(&scope, &[])),
            Err(JobBuildError::NoSandboxDirectory)
        ));
        // A fixed subPath instead of the placeholder: every sandbox would share it.
        let mut fixed = template();
        fixed["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][2]["subPath"] =
            json!(".saint/run/sandboxes");
        assert!(matches!(
            build_job(&fixed, &parameters(&scope, &[])),
            Err(JobBuildError::NoSandboxDirectory)
        ));
    }

    #[test]
    fn a_template_with_another_writable_workspace_mount_is_refused() {
        let scope = test_scope(SandboxScope::Shared, "any");
        let mut porter_writable = template();
        porter_writable["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][1]
            .as_object_mut()
            .unwrap()
            .remove("readOnly");
        let refused = build_job(&porter_writable, &parameters(&scope, &[])).unwrap_err();
        assert!(
            matches!(&refused, JobBuildError::WritableWorkspace { mount_path } if mount_path == "/run/saint/porter"),
            "{refused}"
        );
        let mut init_writable = template();
        init_writable["spec"]["template"]["spec"]["initContainers"] = json!([{
            "name": "init", "image": "ghcr.io/saint-work/saint-sandbox:0.1.0",
            "volumeMounts": [{"name": "workspace", "mountPath": "/agent-rw"}]
        }]);
        let refused = build_job(&init_writable, &parameters(&scope, &[])).unwrap_err();
        assert!(
            matches!(&refused, JobBuildError::WritableWorkspace { mount_path } if mount_path == "/agent-rw"),
            "{refused}"
        );
    }

    #[test]
    fn the_operators_rendered_template_builds_with_the_saintbot_as_owner() {
        // The operator's golden rendering of a representative bot: what the agent
        // actually receives.
        let config: serde_json::Value = serde_json::from_str(include_str!(
            "../../../operator/tests/golden/bot-config.json"
        ))
        .unwrap();
        let template = &config["sandbox"]["jobTemplate"];
        assert!(template_has_owner(template));
        let scope = test_scope(SandboxScope::Agent, "any");
        let job = build_job(template, &parameters(&scope, &[])).unwrap();
        let owners = job.metadata.owner_references.clone().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "SaintBot");
        assert_eq!(owners[0].block_owner_deletion, Some(false));
        let name = job.metadata.name.clone().unwrap();
        let pod = job.spec.unwrap().template.spec.unwrap();
        let container = &pod.containers[0];
        let env = container.env.clone().unwrap();
        assert_eq!(
            env.iter()
                .find(|variable| variable.name == "SAINT_RUNNER_SOCKET")
                .and_then(|variable| variable.value.as_deref()),
            Some("/run/saint/sandbox/runner.sock")
        );
        let writable: Vec<(String, Option<String>)> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter(|mount| mount.name == "agent-workspace" && mount.read_only != Some(true))
            .map(|mount| (mount.mount_path.clone(), mount.sub_path.clone()))
            .collect();
        assert_eq!(
            writable,
            vec![(
                "/run/saint/sandbox".to_string(),
                Some(format!(".saint/run/sandboxes/{name}"))
            )]
        );
        // The browser's sockets: this Job's own directory, read-only, outside the
        // writable runner directory.
        let browser = container
            .volume_mounts
            .iter()
            .flatten()
            .find(|mount| mount.mount_path == "/run/saint/browser")
            .expect("the operator's template mounts the browser socket directory");
        assert_eq!(
            browser.sub_path.as_deref(),
            Some(format!(".saint/run/browsers/{name}").as_str())
        );
        assert_eq!(browser.read_only, Some(true));
    }

    #[test]
    fn the_browser_socket_directory_is_the_jobs_own_and_read_only_whatever_the_template_says() {
        let scope = test_scope(SandboxScope::Agent, "any");
        let without = build_job(&template(), &parameters(&scope, &[])).unwrap();
        assert!(
            !mounts_browser_sockets(&without),
            "a template without the mount gives a Job without the browser"
        );
        let mut with = template();
        with.pointer_mut("/spec/template/spec/containers/0/volumeMounts")
            .and_then(serde_json::Value::as_array_mut)
            .unwrap()
            .push(
                json!({"name": "workspace", "mountPath": "/run/saint/browser",
                         "subPath": SANDBOX_BROWSER_SUBPATH_PLACEHOLDER, "readOnly": false}),
            );
        let job = build_job(&with, &parameters(&scope, &[])).unwrap();
        assert!(mounts_browser_sockets(&job));
        let name = job.metadata.name.clone().unwrap();
        let pod = job.spec.unwrap().template.spec.unwrap();
        let mount = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|mount| mount.mount_path == SANDBOX_BROWSER_MOUNT_PATH)
            .unwrap();
        assert_eq!(
            mount.sub_path.as_deref(),
            Some(format!("{SANDBOX_BROWSER_SUBPATH_PREFIX}{name}").as_str())
        );
        assert_eq!(mount.read_only, Some(true));
    }

    #[test]
    fn long_bot_names_are_cut_to_a_valid_job_name() {
        let scope = test_scope(SandboxScope::Session, "http:x");
        let name = job_name(&"b".repeat(80), &scope, "a1b2c3");
        assert_eq!(name.len(), 63);
        assert!(name.ends_with(&format!("-sbx-{}-a1b2c3", scope.id())));
    }

    #[test]
    fn a_template_that_is_not_a_job_is_refused() {
        let scope = test_scope(SandboxScope::Agent, "any");
        let refused = build_job(&json!({"spec": "nonsense"}), &parameters(&scope, &[]));
        assert!(matches!(refused, Err(JobBuildError::Template(_))));
        let mut no_pod = template();
        no_pod["spec"]["template"]
            .as_object_mut()
            .unwrap()
            .remove("spec");
        assert!(matches!(
            build_job(&no_pod, &parameters(&scope, &[])),
            Err(JobBuildError::NoContainer)
        ));
    }
}
