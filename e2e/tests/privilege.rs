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
    api::{DynamicObject, ObjectMeta, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use saint_e2e::{
    Environment, Failure, TestResult,
    chart::{self, ChartInstall},
    company_bot::{BOT, CompanyBot, saintbot_resource},
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
            // Blank lines and deeper headings belong to no list.
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

/// The uid of an owner reference naming a SaintBot that does not exist.
const MADE_UP_UID: &str = "7d3f0d5e-0000-4000-8000-000000000001";

/// What the chart's owners policy answers for a namespace without any SaintBot (no
/// parameter for its binding, `parameterNotFoundAction: Deny`).
const NO_SAINTBOT: &str = "no params found for policy binding with `Deny` parameterNotFoundAction";

/// A controller owner reference to SaintBot `name` with `uid`, as every child the
/// operator makes carries (the chart's write policies require one, naming a real bot).
fn saintbot_owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "saint.work/v1alpha1".to_owned(),
        kind: "SaintBot".to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        ..OwnerReference::default()
    }
}

/// Creates (as the admin) a minimal SaintBot `name` in `namespace` — no operator
/// reconciles it here, it is only there for the chart's policies to read — and returns
/// the controller owner reference its children would carry.
async fn saintbot_in(
    admin: &Client,
    namespace: &str,
    name: &str,
) -> Result<OwnerReference, Failure> {
    let bot: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "saint.work/v1alpha1",
        "kind": "SaintBot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": {"provider": "anthropic", "name": "claude-sonnet-4-5"}},
    }))?;
    let created =
        Api::<DynamicObject>::namespaced_with(admin.clone(), namespace, &saintbot_resource())
            .create(&PostParams::default(), &bot)
            .await
            .map_err(|error| {
                Failure::message(format!(
                    "failed to create SaintBot {namespace}/{name}: {}",
                    saint_e2e::api_message(&error)
                ))
            })?;
    Ok(saintbot_owner(
        name,
        &created.metadata.uid.unwrap_or_default(),
    ))
}

/// RoleBinding `name` in `namespace`: `role_kind/role` → ServiceAccount
/// `subject_namespace/subject`, controlled by `owner` and labelled like the operator's.
fn role_binding(
    owner: &OwnerReference,
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
            owner_references: Some(vec![owner.clone()]),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "saint-operator".to_owned(),
                ),
                ("saint.work/bot".to_owned(), owner.name.clone()),
            ])),
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
async fn refused_by_rule<T, F, Fut>(what: &str, rule: &str, attempt: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    refused_by_any(what, &[rule], attempt).await
}

/// Like [`refused_by_rule`], for a request several of the chart's policies refuse:
/// the API server reports the first refusing policy it evaluated, in an order it does
/// not promise, so any of `rules` will do.
async fn refused_by_any<T, F, Fut>(what: &str, rules: &[&str], mut attempt: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let named = rules.join(" or ");
    wait::until(
        &format!("{what} refused by {named}"),
        POLICY_TIMEOUT,
        || {
            let outcome = attempt();
            let named = named.clone();
            async move {
                let (code, message) =
                    refusal(what, outcome.await).map_err(|failure| format!("{failure:?}"))?;
                if rules.iter().any(|rule| message.contains(rule)) {
                    Ok(())
                } else {
                    Err(format!("refused ({code}), but not by {named}: {message}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// A Deployment `name` in `namespace` whose pod runs as `account` with `pod` merged
/// into its pod spec, controlled by `owner` if given.
fn deployment(
    namespace: &str,
    name: &str,
    owner: Option<&OwnerReference>,
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
    let owners = match owner {
        Some(owner) => vec![serde_json::to_value(owner)?],
        None => Vec::new(),
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

    // What the operator does for every bot: admitted through `bind` alone. The chart's
    // write policies want a real SaintBot as the binding's owner: `probe`, which no
    // operator reconciles here. Its parameter reaches the policies shortly after it is
    // created, so the first attempts may still be refused for want of it.
    let probe = saintbot_in(&admin, &bots, "probe").await?;
    let bindings = Api::<RoleBinding>::namespaced(operator.client.clone(), &bots);
    let agent_binding = role_binding(
        &probe,
        &bots,
        "probe-agent",
        "ClusterRole",
        &operator.agent_role,
        &bots,
        "probe-agent",
    );
    wait::until(
        &format!(
            "a RoleBinding of {} for a bot's agent account in {bots} admitted",
            operator.agent_role
        ),
        POLICY_TIMEOUT,
        || async {
            bindings
                .create(&dry_run(), &agent_binding)
                .await
                .map(|_| ())
                .map_err(|error| saint_e2e::api_message(&error))
        },
    )
    .await?;

    // Stronger roles: RBAC's escalation check, in its own words.
    let edit_like = edit_like_role(&admin, "priv-token-edit-like").await?;
    for role in ["cluster-admin", edit_like.as_str()] {
        assert_forbidden(
            &format!("a RoleBinding to ClusterRole {role} as the operator"),
            bindings
                .create(
                    &dry_run(),
                    &role_binding(
                        &probe,
                        &bots,
                        "probe-agent",
                        "ClusterRole",
                        role,
                        &bots,
                        "probe-agent",
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
    // ClusterRole bound to the operator's own account, or to an account of another
    // namespace, under the name of a real bot's binding (so the bindings policy alone
    // refuses it).
    let create_params = dry_run();
    let cases = [
        (install.namespace.clone(), install.service_account.clone()),
        ("kube-system".to_owned(), "probe-agent".to_owned()),
    ];
    for (subject_namespace, subject) in &cases {
        let binding = role_binding(
            &probe,
            &bots,
            "probe-agent",
            "ClusterRole",
            &operator.agent_role,
            subject_namespace,
            subject,
        );
        refused_by_rule(
            &format!(
                "RoleBinding {bots}/probe-agent of the agent ClusterRole to {subject_namespace}/{subject}"
            ),
            "saint operator binding policy [own-agent-account-only]",
            || bindings.create(&create_params, &binding),
        )
        .await?;
    }
    // The same in kube-system, which has no SaintBot: refused by every chart policy at
    // once, whichever the API server reports.
    let kube_system = Api::<RoleBinding>::namespaced(operator.client.clone(), "kube-system");
    let binding = role_binding(
        &saintbot_owner("probe", MADE_UP_UID),
        "kube-system",
        &install.service_account,
        "ClusterRole",
        &operator.agent_role,
        &install.namespace,
        &install.service_account,
    );
    refused_by_any(
        "RoleBinding kube-system/<operator> of the agent ClusterRole to the operator",
        &[
            "saint operator binding policy [own-agent-account-only]",
            "saint operator write policy [named-after-owner]",
            NO_SAINTBOT,
        ],
        || kube_system.create(&create_params, &binding),
    )
    .await?;
    namespace::delete(&admin, &bots).await?;
    Ok(())
}

/// With the operator's own token, the chart's write policies keep it to its own
/// children: it changes no object a SaintBot does not control (a ConfigMap of
/// kube-system, one of a bot namespace), creates nothing without a SaintBot owner, and
/// makes only bot-shaped Deployments — so no pod in kube-system as any account with a
/// Secret mounted (the attack, through a Deployment instead of a Job), no host
/// namespaces or paths, no privilege escalation. (That the operator's own children are
/// admitted, the forged-owner scenario below shows with the real operator.)
#[tokio::test]
async fn a_leaked_operator_token_changes_no_foreign_object_and_runs_no_foreign_pod() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "priv-writes", &[]).await?;
    let operator = OperatorAccount::of(&install).await?;
    let bots = namespace::create(&admin, "priv-writes-bots", true).await?;
    saintbot_in(&admin, &bots, "probe").await?;
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
    // A namespace with a SaintBot: the rule itself answers. kube-system has none, so
    // the owners policy (no parameter) may answer first.
    for (namespace, name, rules) in [
        (
            "kube-system",
            "extension-apiserver-authentication",
            &[
                "saint operator write policy [saintbot-children-only]",
                NO_SAINTBOT,
            ][..],
        ),
        (
            bots.as_str(),
            "foreign",
            &["saint operator write policy [saintbot-children-only]"][..],
        ),
    ] {
        let config_maps = Api::<ConfigMap>::namespaced(operator.client.clone(), namespace);
        refused_by_any(
            &format!("a patch of ConfigMap {namespace}/{name} as the operator"),
            rules,
            || config_maps.patch(name, &patch_params, &patch),
        )
        .await?;
    }

    let kube_system = Api::<Deployment>::namespaced(operator.client.clone(), "kube-system");
    let made_up = saintbot_owner("leaked-token", MADE_UP_UID);
    let secret_volume = serde_json::json!({
        "volumes": [{"name": "secret", "secret": {"secretName": "any"}}],
    });
    let cases = [
        (
            "as a kube-system account, a Secret mounted",
            deployment(
                "kube-system",
                "leaked-token",
                None,
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
                Some(&made_up),
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
                Some(&made_up),
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
                Some(&made_up),
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
                Some(&made_up),
                "leaked-token-agent",
                serde_json::json!({"containers": [{"name": "run", "image": "busybox"}]}),
            )?,
            "[unprivileged-containers]",
        ),
    ];
    let create_params = dry_run();
    for (what, object, rule) in &cases {
        // Each breaks its rule and others too (kube-system has no SaintBot, and the
        // containers are not the operator's), and the API server reports the first
        // refusing policy it evaluated: the rule named, or another of the chart's
        // write policies. The forged-owner scenario below breaks one rule at a time.
        let rule = format!("saint operator write policy {rule}");
        refused_by_any(
            &format!("a Deployment in kube-system {what} (dry run)"),
            &[&rule, "saint operator write policy [", NO_SAINTBOT],
            || kube_system.create(&create_params, object),
        )
        .await?;
    }
    namespace::delete(&admin, &bots).await?;
    Ok(())
}

/// The kinds of a bot's children the forged-owner scenario reads and forges:
/// `(group/version, kind, plural, name suffix after the bot's name)`.
const FORGED_KINDS: &[(&str, &str, &str, &str)] = &[
    ("apps/v1", "Deployment", "deployments", ""),
    ("v1", "ServiceAccount", "serviceaccounts", "-agent"),
    (
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "rolebindings",
        "-agent",
    ),
    (
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "networkpolicies",
        "-agent",
    ),
    ("v1", "Service", "services", ""),
    ("networking.k8s.io/v1", "Ingress", "ingresses", "-webhooks"),
];

/// The API resource of `api_version` `kind` (`plural`).
fn api_resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The names the operator derives from a bot's (operator/src/labels.rs), which a
/// forged child for another owner takes over.
const DERIVED_SUFFIXES: &[&str] = &[
    "",
    "-agent",
    "-config",
    "-persona",
    "-workspace",
    "-sandbox",
    "-webhooks",
];

/// `child` as a new request: without what the API server set on the stored object,
/// controlled by `owner`, and every name derived from the bot's (the object's name,
/// its labels and selectors, its account, ConfigMaps and claim) derived from the
/// owner's instead. Secret names stay: a forgery wants the bot's credentials.
fn forge(child: &serde_json::Value, owner: &OwnerReference) -> Result<serde_json::Value, Failure> {
    fn rename(value: &mut serde_json::Value, to: &str) {
        match value {
            serde_json::Value::String(text) => {
                if let Some(suffix) = text.strip_prefix(BOT)
                    && DERIVED_SUFFIXES.contains(&suffix)
                {
                    *text = format!("{to}{suffix}");
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|item| rename(item, to)),
            serde_json::Value::Object(fields) => {
                fields.values_mut().for_each(|field| rename(field, to))
            }
            _ => {}
        }
    }
    let mut forged = child.clone();
    if let Some(metadata) = forged
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        for stored in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            metadata.remove(stored);
        }
    }
    if let Some(fields) = forged.as_object_mut() {
        fields.remove("status");
    }
    // A Service's addresses are the API server's to choose.
    if let Some(spec) = forged
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    rename(&mut forged, &owner.name);
    forged["metadata"]["ownerReferences"] = serde_json::json!([serde_json::to_value(owner)?]);
    Ok(forged)
}

/// `value[pointer]`, which must exist in the operator's render.
fn at<'a>(
    value: &'a mut serde_json::Value,
    pointer: &str,
) -> Result<&'a mut serde_json::Value, Failure> {
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    value
        .pointer_mut(pointer)
        .ok_or_else(|| Failure::message(format!("the operator's {kind} has no {pointer}")))
}

/// Appends `item` to `list`, a list in the operator's render.
fn push(list: &mut serde_json::Value, item: serde_json::Value) -> TestResult {
    match list.as_array_mut() {
        Some(items) => {
            items.push(item);
            Ok(())
        }
        None => Err(Failure::message(format!(
            "not a list in the operator's render: {list}"
        ))),
    }
}

/// The index of the pod template's container (or volume) named `name` in `list`.
fn named(list: &serde_json::Value, name: &str) -> Result<usize, Failure> {
    list.as_array()
        .and_then(|items| items.iter().position(|item| item["name"] == name))
        .ok_or_else(|| Failure::message(format!("the operator's Deployment has no {name}")))
}

/// Creates `value` (dry run) as whoever `client` authenticates.
async fn create_dry_run(client: &Client, value: &serde_json::Value) -> Result<(), kube::Error> {
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    let kind = value["kind"].as_str().unwrap_or_default();
    let plural = FORGED_KINDS
        .iter()
        .find(|(_, known, _, _)| *known == kind)
        .map_or("", |(_, _, plural, _)| plural);
    let namespace = value["metadata"]["namespace"].as_str().unwrap_or_default();
    let object: DynamicObject =
        serde_json::from_value(value.clone()).map_err(kube::Error::SerdeError)?;
    Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &api_resource(api_version, kind, plural),
    )
    .create(&dry_run(), &object)
    .await
    .map(|_| ())
}

/// The escalation attempts, replayed with the operator's own token against the
/// chart's write policies, each with a forged controller owner reference — the real
/// bot's name and uid, and a made-up SaintBot — on a copy of what the real operator
/// rendered for the example bot, changed in one place: a `<x>-agent` ServiceAccount
/// with its token automounted; a Deployment with another image, with a Secret volume of
/// the bot's LLM key, reading a Secret the bot does not name, with a mounted token; a
/// RoleBinding giving `<x>-agent` the operator's own ClusterRole; an allow-all
/// NetworkPolicy (`podSelector: {}`, `ingress: [{}]`, `egress: [{}]`); a `LoadBalancer`
/// Service and one with `externalIPs` (also in kube-system); an Ingress for another
/// host (or, for another owner, for the bot's own host); and the bot's Deployment in a
/// namespace without a SaintBot. Each is refused naming the rule. Meanwhile the same
/// operator's own reconcile of the bot is admitted: its log has no refusal.
///
/// Not refused, and so not here (charts/saint/README.md, "A leaked operator token"):
/// a made-up owner in a namespace that has a SaintBot may still read a Secret of that
/// namespace as Porter's files, and route the webhook paths of a host no bot of the
/// namespace claims.
#[tokio::test]
async fn a_leaked_operator_token_cannot_forge_a_bots_children() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "priv-forge", &[]).await?;
    let account = OperatorAccount::of(&install).await?;
    let operator = install.start_operator(&environment, "priv-forge-0")?;
    let bot = CompanyBot::apply(&environment, &admin, "priv-forge-bot").await?;
    let elsewhere = namespace::create(&admin, "priv-forge-other", true).await?;
    bot.wait_converged(|| operator.process.log_tail(20)).await?;

    let stored = bot.bot().await?;
    let uid = stored.metadata.uid.clone().unwrap_or_default();
    let llm_secret = stored.data["spec"]["model"]["apiKeySecretRef"]["name"]
        .as_str()
        .ok_or_else(|| Failure::message("the example SaintBot names no model.apiKeySecretRef"))?
        .to_owned();
    // What the operator made, read as the admin once each exists.
    let mut children = BTreeMap::new();
    for (api_version, kind, plural, suffix) in FORGED_KINDS {
        let name = format!("{BOT}{suffix}");
        let api = Api::<DynamicObject>::namespaced_with(
            admin.clone(),
            &bot.namespace,
            &api_resource(api_version, kind, plural),
        );
        let child = wait::until(
            &format!("the operator's {kind} {name}"),
            POLICY_TIMEOUT,
            || async {
                api.get(&name)
                    .await
                    .map_err(|error| saint_e2e::api_message(&error))
            },
        )
        .await?;
        children.insert(*kind, serde_json::to_value(child)?);
    }
    let child = |kind: &str| children[kind].clone();

    let real = saintbot_owner(BOT, &uid);
    let made_up = saintbot_owner("forged", MADE_UP_UID);
    let operator_role = install.service_account.clone();
    let mut cases: Vec<(String, serde_json::Value, Vec<&str>)> = Vec::new();
    for (whose, owner) in [
        ("the bot's own name and uid", &real),
        ("a made-up SaintBot", &made_up),
    ] {
        let x = &owner.name;
        let mut case = |what: String, value: serde_json::Value, rules: Vec<&'static str>| {
            cases.push((format!("{what}, owned by {whose}"), value, rules));
        };

        let mut account = forge(&child("ServiceAccount"), owner)?;
        account["automountServiceAccountToken"] = true.into();
        case(
            format!("ServiceAccount {x}-agent with its token automounted"),
            account,
            vec!["[service-account-as-rendered]"],
        );

        let mut other_image = forge(&child("Deployment"), owner)?;
        let containers = at(&mut other_image, "/spec/template/spec/containers")?;
        let agent = named(containers, "agent")?;
        containers[agent]["image"] = "busybox:1.36".into();
        case(
            format!("Deployment {x} running another image"),
            other_image,
            vec!["[rendered-images]"],
        );

        let mut secret_volume = forge(&child("Deployment"), owner)?;
        push(
            at(&mut secret_volume, "/spec/template/spec/volumes")?,
            serde_json::json!({"name": "llm", "secret": {"secretName": llm_secret}}),
        )?;
        let containers = at(&mut secret_volume, "/spec/template/spec/containers")?;
        let agent = named(containers, "agent")?;
        push(
            &mut containers[agent]["volumeMounts"],
            serde_json::json!({"name": "llm", "mountPath": "/llm"}),
        )?;
        case(
            format!("Deployment {x} mounting the bot's LLM key Secret {llm_secret}"),
            secret_volume,
            vec!["[secrets-as-rendered]"],
        );

        let mut automounted = forge(&child("Deployment"), owner)?;
        *at(
            &mut automounted,
            "/spec/template/spec/automountServiceAccountToken",
        )? = true.into();
        case(
            format!("Deployment {x} with the token automounted"),
            automounted,
            vec!["[token-as-rendered]"],
        );

        let mut token_in_porter = forge(&child("Deployment"), owner)?;
        let containers = at(&mut token_in_porter, "/spec/template/spec/containers")?;
        let porter = named(containers, "porter")?;
        push(
            &mut containers[porter]["volumeMounts"],
            serde_json::json!({"name": "kube-api-access", "readOnly": true,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}),
        )?;
        case(
            format!("Deployment {x} with the token mounted into porter"),
            token_in_porter,
            vec!["[token-as-rendered]"],
        );

        let mut binding = forge(&child("RoleBinding"), owner)?;
        *at(&mut binding, "/roleRef/name")? = operator_role.clone().into();
        case(
            format!(
                "RoleBinding {x}-agent giving {x}-agent the operator's ClusterRole {operator_role}"
            ),
            binding,
            vec!["[agent-role-only]"],
        );

        let mut all_pods = forge(&child("NetworkPolicy"), owner)?;
        *at(&mut all_pods, "/spec/podSelector")? = serde_json::json!({});
        case(
            format!("NetworkPolicy {x}-agent selecting every pod (podSelector: {{}})"),
            all_pods,
            vec!["[bot-pods-only]"],
        );
        for direction in ["ingress", "egress"] {
            let mut allow_all = forge(&child("NetworkPolicy"), owner)?;
            *at(&mut allow_all, &format!("/spec/{direction}"))? = serde_json::json!([{}]);
            case(
                format!("NetworkPolicy {x}-agent allowing all {direction} ({direction}: [{{}}])"),
                allow_all,
                vec!["[no-allow-all]"],
            );
        }

        let mut load_balancer = forge(&child("Service"), owner)?;
        *at(&mut load_balancer, "/spec/type")? = "LoadBalancer".into();
        let mut external = forge(&child("Service"), owner)?;
        at(&mut external, "/spec")?["externalIPs"] = serde_json::json!(["203.0.113.7"]);
        for (what, service) in [
            ("of type LoadBalancer", load_balancer),
            ("with externalIPs", external),
        ] {
            let mut in_kube_system = service.clone();
            in_kube_system["metadata"]["namespace"] = "kube-system".into();
            case(
                format!("Service {x} {what}"),
                service,
                vec!["[cluster-ip-only]"],
            );
            // kube-system has no SaintBot: the owners policy refuses too, and may answer first.
            case(
                format!("Service {x} {what} in kube-system"),
                in_kube_system,
                vec!["[cluster-ip-only]", NO_SAINTBOT],
            );
        }

        let mut elsewhere_deployment = forge(&child("Deployment"), owner)?;
        elsewhere_deployment["metadata"]["namespace"] = elsewhere.clone().into();
        case(
            format!("Deployment {x} in {elsewhere}, which has no SaintBot"),
            elsewhere_deployment,
            vec![NO_SAINTBOT],
        );
    }

    // The real owner: what only its spec decides.
    let mut unnamed_secret = forge(&child("Deployment"), &real)?;
    let volumes = at(&mut unnamed_secret, "/spec/template/spec/volumes")?;
    let porter_secrets = named(volumes, "porter-secrets")?;
    push(
        &mut volumes[porter_secrets]["projected"]["sources"],
        serde_json::json!({"secret": {"name": "not-named-by-the-bot"}}),
    )?;
    cases.push((
        "Deployment reading a Secret the bot does not name (as Porter's files)".to_owned(),
        unnamed_secret,
        vec!["[bot-secrets-only]"],
    ));
    let mut other_host = forge(&child("Ingress"), &real)?;
    *at(&mut other_host, "/spec/rules/0/host")? = "webhooks.attacker.example".into();
    if let Some(spec) = other_host["spec"].as_object_mut() {
        spec.remove("tls");
    }
    cases.push((
        "Ingress for another host".to_owned(),
        other_host,
        vec!["[bot-webhook-ingress]"],
    ));
    let mut snippet = forge(&child("Ingress"), &real)?;
    snippet["metadata"]["annotations"] = serde_json::json!({
        "nginx.ingress.kubernetes.io/server-snippet": "location / { return 200; }",
    });
    cases.push((
        "Ingress with an annotation the bot does not set".to_owned(),
        snippet,
        vec!["[bot-webhook-ingress]", "[allowed-annotations]"],
    ));
    // Nor, whoever the owner, an annotation that configures the shared ingress
    // controller, on a host no bot claims.
    let mut snippet_elsewhere = forge(&child("Ingress"), &made_up)?;
    *at(&mut snippet_elsewhere, "/spec/rules/0/host")? = "webhooks.attacker.example".into();
    if let Some(spec) = snippet_elsewhere["spec"].as_object_mut() {
        spec.remove("tls");
    }
    snippet_elsewhere["metadata"]["annotations"] = serde_json::json!({
        "nginx.ingress.kubernetes.io/server-snippet": "location / { return 200; }",
    });
    cases.push((
        "Ingress for another host with a server-snippet, owned by a made-up SaintBot".to_owned(),
        snippet_elsewhere,
        vec!["[allowed-annotations]"],
    ));
    // A made-up owner may not take the bot's host either.
    cases.push((
        "Ingress for the bot's host, owned by a made-up SaintBot".to_owned(),
        forge(&child("Ingress"), &made_up)?,
        vec!["[bot-webhook-ingress]"],
    ));
    // Half a real owner reference: the name with another uid, the uid under another name.
    cases.push((
        "Deployment naming the bot with another uid".to_owned(),
        forge(&child("Deployment"), &saintbot_owner(BOT, MADE_UP_UID))?,
        vec!["[real-owner]"],
    ));
    cases.push((
        "Deployment naming the bot's uid under another name".to_owned(),
        forge(&child("Deployment"), &saintbot_owner("forged", &uid))?,
        vec!["[real-owner]"],
    ));

    for (what, value, rules) in &cases {
        let rules: Vec<String> = rules
            .iter()
            .map(|rule| {
                if rule.starts_with('[') {
                    format!("saint operator write policy {rule}")
                } else {
                    (*rule).to_owned()
                }
            })
            .collect();
        let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
        refused_by_any(
            &format!("{what} (dry run, the operator's token)"),
            &rules,
            || create_dry_run(&account.client, value),
        )
        .await?;
    }

    // The bot's own Deployment changed in place to another image.
    let deployments = Api::<Deployment>::namespaced(account.client.clone(), &bot.namespace);
    let mut changed = bot.deployment().await?;
    if let Some(agent) = changed
        .spec
        .as_mut()
        .and_then(|spec| spec.template.spec.as_mut())
        .and_then(|pod| {
            pod.containers
                .iter_mut()
                .find(|container| container.name == "agent")
        })
    {
        agent.image = Some("busybox:1.36".to_owned());
    }
    let replace_params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    refused_by_rule(
        "the bot's Deployment replaced with another agent image (dry run, the operator's token)",
        "saint operator write policy [rendered-images]",
        || deployments.replace(BOT, &replace_params, &changed),
    )
    .await?;

    // Anyone else's writes where no SaintBot is are none of these policies' business
    // (the API server looks their parameters up before it matches the requesting
    // account, so a binding that refused for want of a SaintBot would refuse these).
    let unrelated: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "unrelated", "namespace": elsewhere},
        "data": {"setting": "a person's"},
    }))?;
    Api::<ConfigMap>::namespaced(admin.clone(), &elsewhere)
        .create(&dry_run(), &unrelated)
        .await
        .map_err(|error| {
            Failure::message(format!(
                "an administrator's ConfigMap in {elsewhere}, which has no SaintBot, was refused: {}",
                saint_e2e::api_message(&error)
            ))
        })?;

    // The operator's own writes for the bot were all admitted.
    let log = operator.process.log();
    let refused: Vec<&str> = log
        .lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            lower.contains("forbidden") || lower.contains("denied request")
        })
        .filter(|line| !line.contains("because it is being terminated"))
        .collect();
    for name in [&bot.namespace, &elsewhere] {
        namespace::delete(&admin, name).await?;
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Failure::message(format!(
            "the operator's own reconcile was refused by the chart's RBAC or policies:\n{}",
            refused.join("\n")
        )))
    }
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
    // The binding's owner: a SaintBot `probe` of the watched namespace (the chart's
    // write policies want a real one).
    let probe = saintbot_in(&admin, &watched, "probe").await?;

    let binding = |namespace: &str, role: &str| {
        role_binding(
            &probe,
            namespace,
            "probe-agent",
            "ClusterRole",
            role,
            namespace,
            "probe-agent",
        )
    };
    let in_watched = binding(&watched, &operator.agent_role);
    wait::until(
        &format!(
            "watchNamespace: a RoleBinding of {} in {watched} through the operator's Role admitted",
            operator.agent_role
        ),
        POLICY_TIMEOUT,
        || async {
            Api::<RoleBinding>::namespaced(operator.client.clone(), &watched)
                .create(&dry_run(), &in_watched)
                .await
                .map(|_| ())
                .map_err(|error| saint_e2e::api_message(&error))
        },
    )
    .await?;
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
