//! Least privilege on a real control plane: what the chart lets the operator's
//! ServiceAccount do, read back from the API server's own authorizer and checked
//! against `e2e/tests/expected/operator-can-i.txt`; that a leaked operator token can
//! neither run a Job nor bind itself a stronger role; and that a bot's agent account,
//! bound by the operator to the chart's agent ClusterRole, runs sandbox Jobs in its
//! own namespace only.
//!
//! Every allowed or refused request here is a real request (created, or
//! `dryRun=All` where nothing should persist) authenticated with the account's own
//! token; the `can-i` listings impersonate the account with the admin kubeconfig, as
//! `kubectl auth can-i --as` does.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::Deployment,
    batch::v1::Job,
    core::v1::{ConfigMap, Pod},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use saint_e2e::{
    Environment, Failure, TestResult,
    chart::{self, ChartInstall},
    company_bot::{BOT, CompanyBot},
    environment::client_from_kubeconfig,
    namespace, service_account, tools, wait,
};
use saint_sandbox::{
    ScopeKey, View, Viewer,
    kubernetes::{JobParameters, build_job},
};

/// The checked-in expectation, relative to the repository.
const EXPECTED: &str = "e2e/tests/expected/operator-can-i.txt";

/// `SAINT_UPDATE_GOLDEN=1` rewrites the expectation from what the API server says.
const UPDATE: &str = "SAINT_UPDATE_GOLDEN";

/// How long a freshly installed admission policy may take to be enforced.
const POLICY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What the expectation file calls the agent ClusterRole (its name depends on the
/// release).
const AGENT_ROLE_PLACEHOLDER: &str = "<agent-cluster-role>";

/// Requests probed at cluster scope (`kubectl auth can-i <verb> <resource>
/// --all-namespaces`; `type/name` asks about one object, a subresource needs
/// `--subresource`): `--list` needs a namespace, so what the operator may do
/// everywhere, and to cluster-scoped objects, is asked one request at a time. Each the
/// kind of request that would turn a leaked token into more power; `{agent}` is the
/// agent ClusterRole's name.
const CLUSTER_PROBES: &[(&str, &str)] = &[
    ("create", "jobs.batch"),
    ("create", "pods"),
    ("create", "pods --subresource=exec"),
    ("create", "deployments.apps"),
    ("get", "secrets"),
    ("list", "secrets"),
    ("watch", "secrets"),
    ("create", "serviceaccounts --subresource=token"),
    ("bind", "clusterroles/{agent}"),
    ("bind", "clusterroles/cluster-admin"),
    ("bind", "clusterroles/admin"),
    ("bind", "clusterroles/edit"),
    ("escalate", "clusterroles"),
    ("escalate", "roles.rbac.authorization.k8s.io"),
    ("create", "roles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
    ("delete", "rolebindings.rbac.authorization.k8s.io"),
    ("create", "clusterroles"),
    ("create", "clusterrolebindings"),
    ("impersonate", "serviceaccounts"),
    ("impersonate", "users"),
    (
        "create",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
    ),
    (
        "delete",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io",
    ),
    (
        "create",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    ),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "certificatesigningrequests.certificates.k8s.io"),
    ("list", "nodes"),
    ("list", "namespaces"),
    ("patch", "saintbots.saint.work"),
];

/// The operator's account of one chart install.
struct OperatorAccount {
    /// `system:serviceaccount:<release namespace>:<account>`.
    username: String,
    /// The ClusterRole the chart tells the operator to bind (`--agent-cluster-role`).
    agent_role: String,
    /// A client holding the account's own token.
    client: Client,
}

impl OperatorAccount {
    async fn of(install: &ChartInstall) -> Result<Self, Failure> {
        let agent_role = install
            .operator_arguments
            .iter()
            .find_map(|argument| argument.strip_prefix("--agent-cluster-role="))
            .ok_or_else(|| {
                Failure::message(format!(
                    "the chart passes no --agent-cluster-role to the operator: {:?}",
                    install.operator_arguments
                ))
            })?
            .to_owned();
        Ok(Self {
            username: format!(
                "system:serviceaccount:{}:{}",
                install.namespace, install.service_account
            ),
            agent_role,
            client: client_from_kubeconfig(&install.kubeconfig).await?,
        })
    }
}

/// `kubectl <arguments>` with the admin kubeconfig: stdout, and whether it exited 0.
/// (`kubectl auth can-i` answers "no" with exit status 1.)
async fn kubectl(environment: &Environment, arguments: &[&str]) -> Result<(String, bool), Failure> {
    match tools::run(
        &environment.tool("kubectl"),
        &environment.admin_kubeconfig,
        arguments,
        None,
    )
    .await
    {
        Ok(output) => Ok((output.stdout, true)),
        Err(tools::ToolError::Failed { stdout, stderr, .. }) if stderr.trim().is_empty() => {
            Ok((stdout, false))
        }
        Err(error) => Err(error.into()),
    }
}

/// One line per (resource or URL, name, verbs) of `kubectl auth can-i --list` as
/// `account` in `namespace`, sorted and without duplicates (the same URL granted by
/// two roles is listed twice). The agent ClusterRole's name is replaced by a
/// placeholder.
async fn can_i_list(
    environment: &Environment,
    account: &OperatorAccount,
    namespace: &str,
) -> Result<Vec<String>, Failure> {
    let (table, _) = kubectl(
        environment,
        &[
            "auth",
            "can-i",
            "--list",
            &format!("--as={}", account.username),
            "--namespace",
            namespace,
        ],
    )
    .await?;
    let lines = parse_can_i_table(&table)?;
    Ok(lines
        .into_iter()
        .map(|line| line.replace(&account.agent_role, AGENT_ROLE_PLACEHOLDER))
        .collect())
}

/// Parses kubectl's aligned table (Resources, Non-Resource URLs, Resource Names,
/// Verbs) into `resource[/name]: verbs` and `url <path>: verbs` lines.
fn parse_can_i_table(table: &str) -> Result<Vec<String>, Failure> {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    let column = |title: &str| {
        header.find(title).ok_or_else(|| {
            Failure::message(format!(
                "kubectl auth can-i --list: no column {title:?} in {header:?}"
            ))
        })
    };
    let (urls_at, names_at, verbs_at) = (
        column("Non-Resource URLs")?,
        column("Resource Names")?,
        column("Verbs")?,
    );
    let list = |cell: &str| -> Vec<String> {
        cell.trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let mut rows = std::collections::BTreeSet::new();
    for line in lines.filter(|line| !line.trim().is_empty()) {
        let cell = |from: usize, to: usize| line.get(from..to.min(line.len())).unwrap_or_default();
        let resource = cell(0, urls_at).trim();
        let urls = list(cell(urls_at, names_at));
        let names = list(cell(names_at, verbs_at));
        let mut verbs = list(cell(verbs_at, line.len()));
        verbs.sort();
        let verbs = verbs.join(" ");
        if resource.is_empty() {
            for url in urls {
                rows.insert(format!("url {url}: {verbs}"));
            }
        } else if names.is_empty() {
            rows.insert(format!("{resource}: {verbs}"));
        } else {
            for name in names {
                rows.insert(format!("{resource}/{name}: {verbs}"));
            }
        }
    }
    Ok(rows.into_iter().collect())
}

/// `verb resource: yes|no` for every cluster-scope probe.
async fn cluster_probes(
    environment: &Environment,
    account: &OperatorAccount,
) -> Result<Vec<String>, Failure> {
    let mut lines = Vec::new();
    for (verb, resource) in CLUSTER_PROBES {
        let asked = resource.replace("{agent}", &account.agent_role);
        let impersonate = format!("--as={}", account.username);
        let mut arguments = vec!["auth", "can-i", verb];
        arguments.extend(asked.split_whitespace());
        arguments.extend(["--all-namespaces", &impersonate]);
        let (answer, _) = kubectl(environment, &arguments).await?;
        let answer = answer.trim();
        if answer != "yes" && answer != "no" {
            return Err(Failure::message(format!(
                "kubectl auth can-i {verb} {asked}: unexpected answer {answer:?}"
            )));
        }
        let shown = resource.replace("{agent}", AGENT_ROLE_PLACEHOLDER);
        lines.push(format!("{verb} {shown}: {answer}"));
    }
    Ok(lines)
}

/// The expectation's sections (`## title` then one line each), without comments.
fn sections(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut sections = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(title) = line.strip_prefix("## ") {
            current = Some(title.to_owned());
            sections.insert(title.to_owned(), Vec::new());
        } else if line.is_empty() || line.starts_with('#') {
            continue;
        } else if let Some(title) = &current {
            sections
                .get_mut(title)
                .expect("the current section exists")
                .push(line.to_owned());
        }
    }
    sections
}

/// Compares what the API server said with the expectation file; with
/// `SAINT_UPDATE_GOLDEN=1` rewrites the file (keeping its leading comment) instead.
fn compare_with_expectation(
    environment: &Environment,
    actual: &[(String, Vec<String>)],
) -> TestResult {
    let path = environment.repo.join(EXPECTED);
    let expected_text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut rendered = String::new();
    for (title, lines) in actual {
        rendered.push_str(&format!("\n## {title}\n"));
        for line in lines {
            rendered.push_str(line);
            rendered.push('\n');
        }
    }
    if std::env::var(UPDATE).as_deref() == Ok("1") {
        let header: String = expected_text
            .lines()
            .take_while(|line| line.starts_with('#') && !line.starts_with("## "))
            .map(|line| format!("{line}\n"))
            .collect();
        std::fs::write(&path, format!("{header}{rendered}"))?;
        return Ok(());
    }
    let expected = sections(&expected_text);
    let actual_sections = sections(&rendered);
    let mut differences = Vec::new();
    for title in expected.keys().chain(actual_sections.keys()) {
        let want = expected.get(title).cloned().unwrap_or_default();
        let got = actual_sections.get(title).cloned().unwrap_or_default();
        if !expected.contains_key(title) {
            differences.push(format!("section not in the expectation: ## {title}"));
        } else if !actual_sections.contains_key(title) {
            differences.push(format!("section not produced: ## {title}"));
        }
        for line in want.iter().filter(|line| !got.contains(line)) {
            differences.push(format!("## {title}: expected, not granted: {line}"));
        }
        for line in got.iter().filter(|line| !want.contains(line)) {
            differences.push(format!("## {title}: granted, not expected: {line}"));
        }
    }
    differences.dedup();
    if differences.is_empty() {
        Ok(())
    } else {
        Err(Failure::message(format!(
            "the operator's rights differ from {EXPECTED} (if the change is intended, \
             rerun with {UPDATE}=1 and review the diff):\n{}",
            differences.join("\n")
        )))
    }
}

/// A controller owner reference to a SaintBot, as every child the operator makes
/// carries (the chart's write policy requires one). The SaintBot need not exist:
/// every request made with it here is a dry run.
fn saintbot_owner() -> OwnerReference {
    OwnerReference {
        api_version: "saint.work/v1alpha1".to_owned(),
        kind: "SaintBot".to_owned(),
        name: "probe".to_owned(),
        uid: "7d3f0d5e-0000-4000-8000-000000000001".to_owned(),
        controller: Some(true),
        ..OwnerReference::default()
    }
}

/// RoleBinding `name` in `namespace`: `role_kind/role` → ServiceAccount
/// `subject_namespace/subject`, controlled by a SaintBot like the operator's.
fn role_binding(
    namespace: &str,
    name: &str,
    role_kind: &str,
    role: &str,
    subject_namespace: &str,
    subject: &str,
) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            owner_references: Some(vec![saintbot_owner()]),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: role_kind.to_owned(),
            name: role.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: subject.to_owned(),
            namespace: Some(subject_namespace.to_owned()),
            ..Subject::default()
        }]),
    }
}

/// The API server's refusal of `result` as `(code, message)`; a success or a
/// transport error is a failure naming `what`.
fn refusal<T>(what: &str, result: Result<T, kube::Error>) -> Result<(u16, String), Failure> {
    match result {
        Ok(_) => Err(Failure::message(format!(
            "{what}: admitted, must be refused"
        ))),
        Err(kube::Error::Api(status)) => Ok((status.code, status.message)),
        Err(other) => Err(Failure::message(format!(
            "{what}: failed without an answer from the API server: {other}"
        ))),
    }
}

/// Asserts that `result` is RBAC's refusal: 403 and a message containing `words`.
fn assert_forbidden<T>(what: &str, result: Result<T, kube::Error>, words: &str) -> TestResult {
    let (code, message) = refusal(what, result)?;
    if code == 403 && message.contains(words) {
        Ok(())
    } else {
        Err(Failure::message(format!(
            "{what}: expected 403 with {words:?}, got {code}: {message}"
        )))
    }
}

/// Creates (as the admin) a ClusterRole holding what makes `edit` dangerous — Jobs,
/// exec into pods, Secrets — and returns its name. Binding it must be refused. (The
/// built-in `edit` and `admin` are aggregated by a kube-controller-manager controller the
/// end-to-end control plane does not run: there they have no rules, and binding them
/// would prove nothing.)
async fn edit_like_role(admin: &Client, name: &str) -> Result<String, Failure> {
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]},
        ],
    }))?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .map_err(|error| {
            Failure::message(format!(
                "failed to create ClusterRole {name}: {}",
                saint_e2e::api_message(&error)
            ))
        })?;
    Ok(name.to_owned())
}

/// Retries `attempt` until the API server refuses it by the chart's admission policy
/// rule `rule` (its message names it), or `POLICY_TIMEOUT` passes: a policy takes
/// effect shortly after `helm install` returns.
async fn refused_by_rule<T, F, Fut>(what: &str, rule: &str, mut attempt: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    wait::until(&format!("{what} refused by {rule}"), POLICY_TIMEOUT, || {
        let outcome = attempt();
        async move {
            let (code, message) =
                refusal(what, outcome.await).map_err(|failure| format!("{failure:?}"))?;
            if message.contains(rule) {
                Ok(())
            } else {
                Err(format!("refused ({code}), but not by {rule}: {message}"))
            }
        }
    })
    .await?;
    Ok(())
}

/// A Deployment `name` in `namespace` whose pod runs as `account` with `pod` merged
/// into its pod spec; `owned`: controlled by a SaintBot, as the operator's are.
fn deployment(
    namespace: &str,
    name: &str,
    owned: bool,
    account: &str,
    pod: serde_json::Value,
) -> Result<Deployment, Failure> {
    let mut spec = serde_json::json!({
        "serviceAccountName": account,
        "containers": [{"name": "run", "image": "busybox",
                        "securityContext": {"allowPrivilegeEscalation": false}}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), pod.as_object()) {
        spec.extend(extra.clone());
    }
    let owners = if owned {
        vec![serde_json::to_value(saintbot_owner())?]
    } else {
        Vec::new()
    };
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": owners},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }))?)
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// A Job that runs a pod as a kube-system account with a Secret mounted: the attack
/// the issue describes.
fn kube_system_job() -> Result<Job, Failure> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "leaked-token", "namespace": "kube-system"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "generic-garbage-collector",
            "containers": [{"name": "run", "image": "busybox",
                            "volumeMounts": [{"name": "secret", "mountPath": "/secret"}]}],
            "volumes": [{"name": "secret", "secret": {"secretName": "any"}}],
        }}},
    }))?)
}

/// The same pod without a Job around it.
fn kube_system_pod() -> Result<Pod, Failure> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "leaked-token", "namespace": "kube-system"},
        "spec": {
            "serviceAccountName": "generic-garbage-collector",
            "containers": [{"name": "run", "image": "busybox"}],
        },
    }))?)
}

/// `kubectl auth can-i --list` as the operator in a bot namespace, kube-system,
/// default and its own namespace, plus the cluster-scope probes — with the operator
/// watching all namespaces (ClusterRole) and with watchNamespace set (a Role there) —
/// match the checked-in expectation.
#[tokio::test]
async fn the_operator_accounts_rights_match_the_checked_in_expectation() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;

    let cluster = chart::install(&environment, &admin, "priv-can-i", &[]).await?;
    let cluster_account = OperatorAccount::of(&cluster).await?;
    let bots = namespace::create(&admin, "priv-can-i-bots", true).await?;
    let watched = namespace::create(&admin, "priv-can-i-watched", true).await?;
    let watch_value = format!("watchNamespace={watched}");
    let single = chart::install(&environment, &admin, "priv-can-i-one", &[&watch_value]).await?;
    let single_account = OperatorAccount::of(&single).await?;

    let actual = vec![
        (
            "all namespaces: a bot namespace".to_owned(),
            can_i_list(&environment, &cluster_account, &bots).await?,
        ),
        (
            "all namespaces: kube-system".to_owned(),
            can_i_list(&environment, &cluster_account, "kube-system").await?,
        ),
        (
            "all namespaces: default".to_owned(),
            can_i_list(&environment, &cluster_account, "default").await?,
        ),
        (
            "all namespaces: the release namespace".to_owned(),
            can_i_list(&environment, &cluster_account, &cluster.namespace).await?,
        ),
        (
            "all namespaces: cluster scope".to_owned(),
            cluster_probes(&environment, &cluster_account).await?,
        ),
        (
            "watchNamespace: the watched namespace".to_owned(),
            can_i_list(&environment, &single_account, &watched).await?,
        ),
        (
            "watchNamespace: another namespace".to_owned(),
            can_i_list(&environment, &single_account, &bots).await?,
        ),
        (
            "watchNamespace: kube-system".to_owned(),
            can_i_list(&environment, &single_account, "kube-system").await?,
        ),
        (
            "watchNamespace: cluster scope".to_owned(),
            cluster_probes(&environment, &single_account).await?,
        ),
    ];
    let compared = compare_with_expectation(&environment, &actual);
    for name in [&bots, &watched] {
        namespace::delete(&admin, name).await?;
    }
    compared
}

/// With the operator's own token: no Job or Pod anywhere (the attack: a dry
/// run in kube-system as any account, a Secret mounted); a RoleBinding of the agent
/// ClusterRole for a bot's account is admitted (`bind`); binding `cluster-admin` or an
/// `edit`-like role is refused by RBAC's escalation check, a ClusterRoleBinding by
/// RBAC, and binding the agent ClusterRole to the operator itself (or to any account
/// but the binding's own `<name>-agent`) by the chart's bindings policy.
#[tokio::test]
async fn a_leaked_operator_token_runs_no_job_and_binds_nothing_stronger() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "priv-token", &[]).await?;
    let operator = OperatorAccount::of(&install).await?;
    let bots = namespace::create(&admin, "priv-token-bots", true).await?;

    assert_forbidden(
        "a Job in kube-system (dry run) as the operator",
        Api::<Job>::namespaced(operator.client.clone(), "kube-system")
            .create(&dry_run(), &kube_system_job()?)
            .await,
        "cannot create resource \"jobs\"",
    )?;
    assert_forbidden(
        "a Pod in kube-system (dry run) as the operator",
        Api::<Pod>::namespaced(operator.client.clone(), "kube-system")
            .create(&dry_run(), &kube_system_pod()?)
            .await,
        "cannot create resource \"pods\"",
    )?;
    let mut job_in_bots = kube_system_job()?;
    job_in_bots.metadata.namespace = Some(bots.clone());
    assert_forbidden(
        "a Job in a bot namespace (dry run) as the operator",
        Api::<Job>::namespaced(operator.client.clone(), &bots)
            .create(&dry_run(), &job_in_bots)
            .await,
        "cannot create resource \"jobs\"",
    )?;

    // What the operator does for every bot: admitted through `bind` alone.
    let bindings = Api::<RoleBinding>::namespaced(operator.client.clone(), &bots);
    let agent_binding = role_binding(
        &bots,
        "probe-agent",
        "ClusterRole",
        &operator.agent_role,
        &bots,
        "probe-agent",
    );
    bindings
        .create(&dry_run(), &agent_binding)
        .await
        .map_err(|error| {
            Failure::message(format!(
                "the operator may not bind {} for a bot's agent account in {bots}: {}",
                operator.agent_role,
                saint_e2e::api_message(&error)
            ))
        })?;

    // Stronger roles: RBAC's escalation check, in its own words.
    let edit_like = edit_like_role(&admin, "priv-token-edit-like").await?;
    for role in ["cluster-admin", edit_like.as_str()] {
        assert_forbidden(
            &format!("a RoleBinding to ClusterRole {role} as the operator"),
            bindings
                .create(
                    &dry_run(),
                    &role_binding(
                        &bots,
                        "stronger-agent",
                        "ClusterRole",
                        role,
                        &bots,
                        "stronger-agent",
                    ),
                )
                .await,
            "is attempting to grant RBAC permissions not currently held",
        )?;
    }
    assert_forbidden(
        "a ClusterRoleBinding to the agent ClusterRole as the operator",
        Api::<ClusterRoleBinding>::all(operator.client.clone())
            .create(
                &dry_run(),
                &ClusterRoleBinding {
                    metadata: ObjectMeta {
                        name: Some("probe-agent".to_owned()),
                        ..ObjectMeta::default()
                    },
                    role_ref: agent_binding.role_ref.clone(),
                    subjects: agent_binding.subjects.clone(),
                },
            )
            .await,
        "cannot create resource \"clusterrolebindings\"",
    )?;

    // The two-step attack `bind` would open without the bindings policy: the agent
    // ClusterRole bound to the operator's own account in kube-system, under either name.
    // A new admission policy takes effect once the API server has loaded it, shortly
    // after `helm install` returns: each probe is retried until refused or the deadline.
    let cases = [
        (
            "kube-system",
            install.service_account.clone(),
            install.namespace.clone(),
            install.service_account.clone(),
        ),
        (
            "kube-system",
            "probe-agent".to_owned(),
            install.namespace.clone(),
            install.service_account.clone(),
        ),
        (
            bots.as_str(),
            "probe-agent".to_owned(),
            "kube-system".to_owned(),
            "probe-agent".to_owned(),
        ),
    ];
    for (namespace, name, subject_namespace, subject) in &cases {
        let api = Api::<RoleBinding>::namespaced(operator.client.clone(), namespace);
        let binding = role_binding(
            namespace,
            name,
            "ClusterRole",
            &operator.agent_role,
            subject_namespace,
            subject,
        );
        wait::until(
            &format!(
                "RoleBinding {namespace}/{name} of the agent ClusterRole to                  {subject_namespace}/{subject} refused by the bindings policy"
            ),
            POLICY_TIMEOUT,
            || async {
                let (code, message) = refusal("the binding", api.create(&dry_run(), &binding).await)
                    .map_err(|failure| format!("{failure:?}"))?;
                if message.contains("saint operator binding policy [own-agent-account-only]") {
                    Ok(())
                } else {
                    Err(format!("refused ({code}), but not by the bindings policy: {message}"))
                }
            },
        )
        .await?;
    }
    namespace::delete(&admin, &bots).await?;
    Ok(())
}

/// With the operator's own token, the chart's write policy keeps it to its own
/// children: it changes no object a SaintBot does not control (a ConfigMap of
/// kube-system, one of a bot namespace), creates nothing without a SaintBot owner, and
/// makes only bot-shaped Deployments — so no pod in kube-system as any account with a
/// Secret mounted (the attack, through a Deployment instead of a Job), no host
/// namespaces or paths, no privilege escalation. A bot-shaped Deployment is admitted.
#[tokio::test]
async fn a_leaked_operator_token_changes_no_foreign_object_and_runs_no_foreign_pod() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "priv-writes", &[]).await?;
    let operator = OperatorAccount::of(&install).await?;
    let bots = namespace::create(&admin, "priv-writes-bots", true).await?;
    let foreign: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "foreign", "namespace": bots},
        "data": {"setting": "a person's"},
    }))?;
    Api::<ConfigMap>::namespaced(admin.clone(), &bots)
        .create(&PostParams::default(), &foreign)
        .await
        .map_err(|error| Failure::message(saint_e2e::api_message(&error)))?;

    let patch = Patch::Merge(serde_json::json!({"data": {"injected": "by a leaked token"}}));
    let patch_params = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    for (namespace, name) in [
        ("kube-system", "extension-apiserver-authentication"),
        (bots.as_str(), "foreign"),
    ] {
        let config_maps = Api::<ConfigMap>::namespaced(operator.client.clone(), namespace);
        refused_by_rule(
            &format!("a patch of ConfigMap {namespace}/{name} as the operator"),
            "saint operator write policy [saintbot-children-only]",
            || config_maps.patch(name, &patch_params, &patch),
        )
        .await?;
    }

    let kube_system = Api::<Deployment>::namespaced(operator.client.clone(), "kube-system");
    let secret_volume = serde_json::json!({
        "volumes": [{"name": "secret", "secret": {"secretName": "any"}}],
    });
    let cases = [
        (
            "as a kube-system account, a Secret mounted",
            deployment(
                "kube-system",
                "leaked-token",
                false,
                "generic-garbage-collector",
                secret_volume.clone(),
            )?,
            "[owned-by-saintbot]",
        ),
        (
            "with a SaintBot owner, as a kube-system account",
            deployment(
                "kube-system",
                "leaked-token",
                true,
                "generic-garbage-collector",
                secret_volume,
            )?,
            "[bot-account-only]",
        ),
        (
            "bot-shaped but in the host's PID namespace",
            deployment(
                "kube-system",
                "leaked-token",
                true,
                "leaked-token-agent",
                serde_json::json!({"hostPID": true}),
            )?,
            "[no-host-access]",
        ),
        (
            "bot-shaped but with a hostPath volume",
            deployment(
                "kube-system",
                "leaked-token",
                true,
                "leaked-token-agent",
                serde_json::json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
            )?,
            "[no-host-access]",
        ),
        (
            "bot-shaped but a container may escalate privileges",
            deployment(
                "kube-system",
                "leaked-token",
                true,
                "leaked-token-agent",
                serde_json::json!({"containers": [{"name": "run", "image": "busybox"}]}),
            )?,
            "[unprivileged-containers]",
        ),
    ];
    let create_params = dry_run();
    for (what, object, rule) in &cases {
        refused_by_rule(
            &format!("a Deployment in kube-system {what} (dry run)"),
            rule,
            || kube_system.create(&create_params, object),
        )
        .await?;
    }
    // The shape the operator makes for a bot passes the fence.
    Api::<Deployment>::namespaced(operator.client.clone(), &bots)
        .create(
            &dry_run(),
            &deployment(&bots, "probe", true, "probe-agent", serde_json::json!({}))?,
        )
        .await
        .map_err(|error| {
            Failure::message(format!(
                "a bot-shaped Deployment as the operator: {}",
                saint_e2e::api_message(&error)
            ))
        })?;
    namespace::delete(&admin, &bots).await?;
    Ok(())
}

/// In watchNamespace mode the operator's `bind` sits in a namespaced Role: the real
/// API server honours it for RoleBindings in that namespace and nowhere else.
#[tokio::test]
async fn with_watch_namespace_the_operator_binds_the_agent_role_only_there() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let watched = namespace::create(&admin, "priv-one-watched", true).await?;
    let other = namespace::create(&admin, "priv-one-other", true).await?;
    let watch_value = format!("watchNamespace={watched}");
    let install = chart::install(&environment, &admin, "priv-one", &[&watch_value]).await?;
    let operator = OperatorAccount::of(&install).await?;
    let edit_like = edit_like_role(&admin, "priv-one-edit-like").await?;

    let binding = |namespace: &str, role: &str| {
        let name = format!("{role}-agent");
        role_binding(namespace, &name, "ClusterRole", role, namespace, &name)
    };
    Api::<RoleBinding>::namespaced(operator.client.clone(), &watched)
        .create(&dry_run(), &binding(&watched, &operator.agent_role))
        .await
        .map_err(|error| {
            Failure::message(format!(
                "watchNamespace: the operator may not bind {} in {watched} through its Role: {}",
                operator.agent_role,
                saint_e2e::api_message(&error)
            ))
        })?;
    assert_forbidden(
        "watchNamespace: a RoleBinding of the agent ClusterRole in another namespace",
        Api::<RoleBinding>::namespaced(operator.client.clone(), &other)
            .create(&dry_run(), &binding(&other, &operator.agent_role))
            .await,
        "cannot create resource \"rolebindings\"",
    )?;
    assert_forbidden(
        "watchNamespace: a RoleBinding to an edit-like ClusterRole in the watched namespace",
        Api::<RoleBinding>::namespaced(operator.client.clone(), &watched)
            .create(&dry_run(), &binding(&watched, &edit_like))
            .await,
        "is attempting to grant RBAC permissions not currently held",
    )?;
    for name in [&watched, &other] {
        namespace::delete(&admin, name).await?;
    }
    Ok(())
}

/// The operator (the real binary, as the chart's account) binds the example bot's
/// agent account to the agent ClusterRole and builds no Role; with that binding the
/// agent creates its sandbox Job (the agent's own builder, dry run) in its namespace,
/// and the same Job anywhere else is refused by RBAC.
#[tokio::test]
async fn a_bots_agent_runs_sandbox_jobs_in_its_own_namespace_only() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "priv-agent", &[]).await?;
    let operator_account = OperatorAccount::of(&install).await?;
    let operator = install.start_operator(&environment, "priv-agent-0")?;
    let bot = CompanyBot::apply(&environment, &admin, "priv-agent-bot").await?;
    let other = namespace::create(&admin, "priv-agent-other", true).await?;
    bot.wait_converged(|| operator.process.log_tail(20)).await?;

    let agent_account = format!("{BOT}-agent");
    let binding = Api::<RoleBinding>::namespaced(admin.clone(), &bot.namespace)
        .get(&agent_account)
        .await
        .map_err(|error| {
            Failure::message(format!(
                "RoleBinding {agent_account}: {}",
                saint_e2e::api_message(&error)
            ))
        })?;
    let expected_ref = RoleRef {
        api_group: "rbac.authorization.k8s.io".to_owned(),
        kind: "ClusterRole".to_owned(),
        name: operator_account.agent_role.clone(),
    };
    if binding.role_ref != expected_ref {
        return Err(Failure::message(format!(
            "RoleBinding {agent_account} must bind ClusterRole {} (the operator's \
             --agent-cluster-role), binds {} {}",
            operator_account.agent_role, binding.role_ref.kind, binding.role_ref.name
        )));
    }
    let subjects: Vec<(String, String, Option<String>)> = binding
        .subjects
        .unwrap_or_default()
        .into_iter()
        .map(|subject| (subject.kind, subject.name, subject.namespace))
        .collect();
    assert_eq!(
        subjects,
        vec![(
            "ServiceAccount".to_owned(),
            agent_account.clone(),
            Some(bot.namespace.clone())
        )],
        "the binding names only the bot's agent account"
    );
    match Api::<Role>::namespaced(admin.clone(), &bot.namespace)
        .get(&agent_account)
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        other => {
            return Err(Failure::message(format!(
                "the operator builds no Role any more, yet Role {agent_account}: {other:?}"
            )));
        }
    }

    let (_, config) = bot.rendered_config().await?;
    let template = config
        .sandbox
        .job_template
        .clone()
        .ok_or_else(|| Failure::message("the rendered config has no sandbox.jobTemplate"))?;
    let bot_object = bot.bot().await?;
    let owner = OwnerReference {
        api_version: "saint.work/v1alpha1".to_owned(),
        kind: "SaintBot".to_owned(),
        name: BOT.to_owned(),
        uid: bot_object.metadata.uid.clone().unwrap_or_default(),
        ..OwnerReference::default()
    };
    let scope = ScopeKey::for_caller(
        config.sandbox.scope,
        "http:e2e-privilege",
        &Viewer {
            role: "e2e",
            person: Some("privilege"),
        },
    );
    let view = View::empty();
    let job = build_job(
        &template,
        &JobParameters {
            bot: BOT,
            scope: &scope,
            view: &view,
            suffix: "priv1",
            runner_token: "e2e-runner-token",
            seed: &[],
            runner_idle_timeout_seconds: 600,
            owner: Some(&owner),
        },
    )?;
    let agent = client_from_kubeconfig(
        &service_account::kubeconfig(&environment, &admin, &bot.namespace, &agent_account).await?,
    )
    .await?;
    Api::<Job>::namespaced(agent.clone(), &bot.namespace)
        .create(&dry_run(), &job)
        .await
        .map_err(|error| {
            Failure::message(format!(
                "the agent may not create its sandbox Job in {}: {}",
                bot.namespace,
                saint_e2e::api_message(&error)
            ))
        })?;
    for elsewhere in [other.as_str(), "kube-system"] {
        let mut moved = job.clone();
        moved.metadata.namespace = Some(elsewhere.to_owned());
        assert_forbidden(
            &format!("the agent's sandbox Job in {elsewhere}"),
            Api::<Job>::namespaced(agent.clone(), elsewhere)
                .create(&dry_run(), &moved)
                .await,
            "cannot create resource \"jobs\"",
        )?;
    }

    let log = operator.process.log();
    let forbidden: Vec<&str> = log
        .lines()
        .filter(|line| line.to_lowercase().contains("forbidden"))
        // Writes into a namespace an earlier scenario is deleting are refused by the
        // namespace's lifecycle, not by RBAC or a policy: the operator (watching every
        // namespace) still sees that scenario's bot for a moment.
        .filter(|line| !line.contains("because it is being terminated"))
        .collect();
    for name in [&bot.namespace, &other] {
        namespace::delete(&admin, name).await?;
    }
    if forbidden.is_empty() {
        Ok(())
    } else {
        Err(Failure::message(format!(
            "the operator was refused with the chart's RBAC:\n{}",
            forbidden.join("\n")
        )))
    }
}
