#!/usr/bin/env python3
"""Drives the chart's sandbox admission policy through a real API server: one
Job shaped like the operator's sandbox template must be admitted when a bot's
agent ServiceAccount creates it, and each single deviation from it must be
refused with a message naming the rule it breaks.

Requests use `kubectl create --dry-run=server --as=<agent account>`: the API
server runs authentication, RBAC and every admission plugin (the
ValidatingAdmissionPolicy included) but stores nothing. Expects KUBECONFIG to
be an administrator's, the policies and their bindings to be installed already,
and the SaintBot CRD (the bot-bounds policy reads each bot's SaintBot).
Creates and deletes its own namespaces, with a SaintBot per agent in them."""

import argparse
import copy
import json
import subprocess
import sys
import time

BOT = "acme-assistant"
JOB = f"{BOT}-sandbox-test"
NAMESPACE = "saint-admission-test"
OTHER_NAMESPACE = "saint-admission-other"
# A namespace without any SaintBot: the bot-bounds policy has no parameter there.
EMPTY_NAMESPACE = "saint-admission-empty"
AGENT = f"system:serviceaccount:{NAMESPACE}:{BOT}-agent"
# The runtime class BOT's SaintBot names; its sandbox Jobs must keep exactly it.
RUNTIME_CLASS = "gvisor"
# BOT's sandbox bounds (spec.sandbox.resources, maxLifetimeSeconds): its Jobs may ask
# for no more.
BOT_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
BOT_MAX_LIFETIME = 3600
# A bot that names no runtime class, resources or lifetime: its Jobs must name no
# runtime class either, and are bounded by the operator's defaults (1 CPU, 1Gi, a day).
PLAIN_BOT = "plain-bot"
# The group the template gives sandbox pods (saint_config::uids::SHARED_GID).
SHARED_GID = 65532
PLAIN_AGENT = f"system:serviceaccount:{NAMESPACE}:{PLAIN_BOT}-agent"


def kubectl(options, *arguments, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([options.kubectl, *arguments], input=stdin, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(arguments)} failed: {result.stderr.strip()}")
    return result


def sandbox_job(image: str, sandbox_uid: int, bot: str = BOT) -> dict:
    """The Job the agent creates from the operator-rendered sandbox template."""
    labels = {
        "app.kubernetes.io/name": "saint",
        "app.kubernetes.io/instance": bot,
        "app.kubernetes.io/managed-by": "saint-operator",
        "app.kubernetes.io/component": "sandbox",
        "saint.work/bot": bot,
        "saint.work/sandbox": "true",
    }
    restricted = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB, "namespace": NAMESPACE, "labels": dict(labels)},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": BOT_MAX_LIFETIME,
            "ttlSecondsAfterFinished": 60,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": sandbox_uid,
                        "runAsGroup": SHARED_GID,
                        "fsGroup": SHARED_GID,
                        "supplementalGroups": [SHARED_GID],
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    # On the bot pod's node (the workspace and Porter's socket are there).
                    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {
                            "app.kubernetes.io/name": "saint", "app.kubernetes.io/instance": bot,
                            "app.kubernetes.io/component": "agent"}},
                        "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [{
                        "name": "sandbox",
                        "image": image,
                        "env": [{"name": "SAINT_SANDBOX_ID", "value": "test"}],
                        "securityContext": restricted,
                        "resources": copy.deepcopy(BOT_RESOURCES),
                        "volumeMounts": [
                            # The caller's view: one subPath mount per permitted subtree or file.
                            {"name": "agent-workspace", "mountPath": "/agent/memory/shared",
                             "subPath": "memory/shared", "readOnly": True},
                            {"name": "agent-workspace", "mountPath": "/agent/SOUL.md",
                             "subPath": "SOUL.md", "readOnly": True},
                            {"name": "agent-workspace", "mountPath": "/run/saint/porter",
                             "subPath": ".saint/run/porter", "readOnly": True},
                            {"name": "agent-workspace", "mountPath": "/run/saint/sandbox",
                             "subPath": f".saint/run/sandboxes/{JOB}"},
                            {"name": "agent-workspace", "mountPath": "/run/saint/browser",
                             "subPath": f".saint/run/browsers/{JOB}", "readOnly": True},
                            {"name": "workspace", "mountPath": "/workspace"},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }],
                    "volumes": [
                        {"name": "agent-workspace", "persistentVolumeClaim": {"claimName": f"{bot}-workspace"}},
                        {"name": "workspace", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory"}},
                    ],
                },
            },
        },
    }
    if bot == BOT:
        pod(job)["runtimeClassName"] = RUNTIME_CLASS
    return job


def pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def container(job: dict) -> dict:
    return pod(job)["containers"][0]


def mount(job: dict, path: str) -> dict:
    return next(m for m in container(job)["volumeMounts"] if m["mountPath"] == path)


def mutation_cases(image: str, sandbox_uid: int) -> list[tuple[str, str | tuple[str, ...], object]]:
    """(what, expected rule (or rules, any of which may answer), function mutating a
    copy of the good Job)."""

    def set_path(*keys_and_value):
        *keys, value = keys_and_value

        def apply(job):
            node = job
            for key in keys[:-1]:
                node = node[key]
            node[keys[-1]] = value
        return apply

    def sub_path_expr(job):
        runner_directory = mount(job, "/run/saint/sandbox")
        runner_directory.pop("subPath")
        runner_directory["subPathExpr"] = "$(SAINT_SANDBOX_ID)"

    def limits(job):
        return container(job)["resources"]["limits"]

    return [
        # Both policies refuse these; the API server names the first it evaluated, in
        # an order it does not promise.
        ("no activeDeadlineSeconds", ("deadline", "bot-deadline"), lambda job: job["spec"].pop("activeDeadlineSeconds")),
        ("a deadline of a year", ("deadline", "bot-deadline"), set_path("spec", "activeDeadlineSeconds", 31536000)),
        ("no ttlSecondsAfterFinished", "ttl", lambda job: job["spec"].pop("ttlSecondsAfterFinished")),
        ("a ttl of a week", "ttl", set_path("spec", "ttlSecondsAfterFinished", 604800)),
        ("backoffLimit unset (the API default is 6)", "no-retries", lambda job: job["spec"].pop("backoffLimit")),
        ("backoffLimit 6", "no-retries", set_path("spec", "backoffLimit", 6)),
        ("parallelism 1000", "one-pod", set_path("spec", "parallelism", 1000)),
        ("completions 50", "one-pod", set_path("spec", "completions", 50)),
        ("no resource limits", "resource-limits", lambda job: container(job)["resources"].pop("limits")),
        ("no memory limit", "resource-limits", lambda job: limits(job).pop("memory")),
        ("no cpu limit", "resource-limits", lambda job: limits(job).pop("cpu")),
        ("an init container without limits", "resource-limits",
         lambda job: pod(job).update({"initContainers": [
             {**{key: value for key, value in container(job).items() if key != "resources"}, "name": "init"}]})),
        ("Job without the sandbox label", "sandbox-label",
         lambda job: job["metadata"]["labels"].pop("saint.work/sandbox")),
        ("pod template without the sandbox label", "sandbox-label",
         lambda job: job["spec"]["template"]["metadata"]["labels"].pop("saint.work/sandbox")),
        ("sandbox label 'false'", "sandbox-label",
         lambda job: job["metadata"]["labels"].update({"saint.work/sandbox": "false"})),
        ("another bot's label", "bot-label",
         lambda job: job["spec"]["template"]["metadata"]["labels"].update({"saint.work/bot": "other-bot"})),
        ("pod labelled as the agent component", "component-label",
         lambda job: job["spec"]["template"]["metadata"]["labels"].update({"app.kubernetes.io/component": "agent"})),
        ("another image", "sandbox-image", lambda job: container(job).update({"image": "busybox:1.36"})),
        ("the sandbox repository with another tag", "sandbox-image",
         lambda job: container(job).update({"image": image.rsplit(":", 1)[0] + ":latest"})),
        ("an init container with another image", "sandbox-image",
         lambda job: pod(job).update({"initContainers": [dict(copy.deepcopy(container(job)), name="init",
                                                             image="alpine:3")]})),
        ("a token automounted", "no-service-account-token",
         lambda job: pod(job).update({"automountServiceAccountToken": True})),
        ("automountServiceAccountToken left unset", "no-service-account-token",
         lambda job: pod(job).pop("automountServiceAccountToken")),
        ("a projected service-account token", "no-service-account-token",
         lambda job: pod(job)["volumes"].append({"name": "token", "projected": {"sources": [
             {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}})),
        ("a Secret volume", "no-secret-volumes",
         lambda job: pod(job)["volumes"].append({"name": "creds", "secret": {"secretName": "acme-llm"}})),
        ("a projected Secret", "no-secret-volumes",
         lambda job: pod(job)["volumes"].append({"name": "creds", "projected": {"sources": [
             {"secret": {"name": "acme-llm"}}]}})),
        ("a hostPath volume", "no-host-path",
         lambda job: pod(job)["volumes"].append({"name": "host", "hostPath": {"path": "/var/run"}})),
        ("a CSI volume", "volume-types",
         lambda job: pod(job)["volumes"].append({"name": "csi", "csi": {"driver": "secrets-store.csi.k8s.io"}})),
        ("another bot's workspace claim", "own-workspace",
         lambda job: pod(job)["volumes"][0]["persistentVolumeClaim"].update({"claimName": "other-bot-workspace"})),
        ("a view mount writable", "workspace-read-only",
         lambda job: mount(job, "/agent/memory/shared").pop("readOnly")),
        ("a view mount with readOnly false", "workspace-read-only",
         lambda job: mount(job, "/agent/memory/shared").update({"readOnly": False})),
        ("the whole workspace read-only at /agent (no subPath)", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent", "readOnly": True})),
        ("the whole workspace through subPath ''", "workspace-view",
         lambda job: mount(job, "/agent/memory/shared").update({"subPath": ""})),
        ("the sessions database in the view", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent/sessions", "subPath": "sessions", "readOnly": True})),
        ("the memory index under .saint in the view", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent/idx", "subPath": ".saint/memory", "readOnly": True})),
        ("the usage log in the view", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent/usage", "subPath": "logs/usage.jsonl", "readOnly": True})),
        ("the rendered config in the view", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent/config", "subPath": "config", "readOnly": True})),
        ("runtime state through './sessions'", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent/s", "subPath": "./sessions", "readOnly": True})),
        ("runtime state through 'sessions/'", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent/s", "subPath": "sessions/", "readOnly": True})),
        ("Porter's directory mounted into the view", "workspace-view",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/agent/porter", "subPath": ".saint/run/porter", "readOnly": True})),
        ("a view mount with a subPathExpr", "workspace-view",
         lambda job: (mount(job, "/agent/SOUL.md").pop("subPath"),
                      mount(job, "/agent/SOUL.md").update({"subPathExpr": "$(SAINT_SANDBOX_ID)"}))),
        ("Porter's socket directory writable", "workspace-read-only",
         lambda job: mount(job, "/run/saint/porter").pop("readOnly")),
        ("the whole run directory writable at /run/saint (the old layout)", "workspace-read-only",
         lambda job: container(job)["volumeMounts"].append(
             {"name": "agent-workspace", "mountPath": "/run/saint", "subPath": ".saint/run"})),
        ("a subPath traversing out of the runner directory", "workspace-read-only",
         lambda job: mount(job, "/run/saint/sandbox").update({"subPath": f".saint/run/sandboxes/{JOB}/../../porter"})),
        ("a subPath '..' to the sandboxes directory", "workspace-read-only",
         lambda job: mount(job, "/run/saint/sandbox").update({"subPath": ".saint/run/sandboxes/.."})),
        ("the browser socket directory writable (a command could listen there for the browser's key)",
         "workspace-read-only",
         lambda job: mount(job, "/run/saint/browser").pop("readOnly")),
        ("another sandbox's browser socket directory", "workspace-view",
         lambda job: mount(job, "/run/saint/browser").update({"subPath": ".saint/run/browsers/other-job"})),
        ("the whole browsers directory", "workspace-view",
         lambda job: mount(job, "/run/saint/browser").update({"subPath": ".saint/run/browsers"})),
        ("the browser socket directory inside the writable runner directory", "workspace-view",
         lambda job: mount(job, "/run/saint/browser").update({"mountPath": "/run/saint/sandbox/browser"})),
        ("another sandbox's runner directory", "workspace-read-only",
         lambda job: mount(job, "/run/saint/sandbox").update({"subPath": ".saint/run/sandboxes/other-job"})),
        ("the template's placeholder left unfilled", "workspace-read-only",
         lambda job: mount(job, "/run/saint/sandbox").update({"subPath": ".saint/run/sandboxes/{{job-name}}"})),
        ("a subPathExpr instead of the own directory", "workspace-read-only",
         sub_path_expr),
        ("the runner directory mounted elsewhere", "workspace-read-only",
         lambda job: mount(job, "/run/saint/sandbox").update({"mountPath": "/run/saint/other"})),
        ("an init container with the workspace writable", "workspace-read-only",
         lambda job: pod(job).update({"initContainers": [dict(
             copy.deepcopy(container(job)), name="init",
             volumeMounts=[{"name": "agent-workspace", "mountPath": "/agent-rw"}])]})),
        ("env from a Secret key", "no-secret-env",
         lambda job: container(job)["env"].append({"name": "TOKEN", "valueFrom": {
             "secretKeyRef": {"name": "acme-llm", "key": "apiKey"}}})),
        ("envFrom a Secret", "no-secret-env",
         lambda job: container(job).update({"envFrom": [{"secretRef": {"name": "acme-llm"}}]})),
        ("hostNetwork", "no-host-namespaces", set_path("spec", "template", "spec", "hostNetwork", True)),
        ("hostPID", "no-host-namespaces", set_path("spec", "template", "spec", "hostPID", True)),
        ("a host port", "no-host-ports",
         lambda job: container(job).update({"ports": [{"containerPort": 8080, "hostPort": 8080}]})),
        ("runAsNonRoot false on the container", "run-as-non-root",
         lambda job: container(job)["securityContext"].update({"runAsNonRoot": False})),
        ("runAsUser 0", "run-as-non-root",
         lambda job: container(job)["securityContext"].update({"runAsUser": 0})),
        ("the pod running as the agent's uid 65532", "sandbox-uid",
         set_path("spec", "template", "spec", "securityContext", "runAsUser", 65532)),
        ("the container running as another uid", "sandbox-uid",
         lambda job: container(job)["securityContext"].update({"runAsUser": sandbox_uid + 1})),
        ("runAsUser left to the image", "sandbox-uid",
         lambda job: pod(job)["securityContext"].pop("runAsUser")),
        ("an init container as the agent's uid", "sandbox-uid",
         lambda job: pod(job).update({"initContainers": [dict(
             copy.deepcopy(container(job)), name="init",
             securityContext=dict(container(job)["securityContext"], runAsUser=65532))]})),
        ("the runtime class changed", "runtime-class", set_path("spec", "template", "spec", "runtimeClassName", "runc")),
        ("the runtime class removed", "runtime-class", lambda job: pod(job).pop("runtimeClassName")),
        ("allowPrivilegeEscalation true", "no-privilege-escalation",
         lambda job: container(job)["securityContext"].update({"allowPrivilegeEscalation": True})),
        # The API server itself refuses privileged with allowPrivilegeEscalation
        # false, so the privileged case leaves the latter unset. An API server
        # started with --allow-privileged=false (the e2e one) refuses it before
        # admission; see ALSO_REFUSED_BY_API_SERVER.
        ("privileged", "no-privilege-escalation",
         lambda job: (container(job)["securityContext"].update({"privileged": True}),
                      container(job)["securityContext"].pop("allowPrivilegeEscalation"))),
        ("a capability added", "drop-all-capabilities",
         lambda job: container(job)["securityContext"]["capabilities"].update({"add": ["NET_RAW"]})),
        ("capabilities not dropped", "drop-all-capabilities",
         lambda job: container(job)["securityContext"].pop("capabilities")),
        ("a writable root filesystem", "read-only-root",
         lambda job: container(job)["securityContext"].update({"readOnlyRootFilesystem": False})),
        ("seccomp Unconfined", "seccomp",
         lambda job: container(job)["securityContext"].update({"seccompProfile": {"type": "Unconfined"}})),
        # Bounded by the bot (BOT_RESOURCES, BOT_MAX_LIFETIME).
        ("a limit of 64 CPUs", "bot-resources", lambda job: limits(job).update({"cpu": "64"})),
        ("a memory limit of 256Gi", "bot-resources", lambda job: limits(job).update({"memory": "256Gi"})),
        ("a cpu limit just above the bot's (1001m)", "bot-resources", lambda job: limits(job).update({"cpu": "1001m"})),
        ("8 GPUs the bot does not name", "bot-resources",
         lambda job: (limits(job).update({"nvidia.com/gpu": "8"}),
                      container(job)["resources"]["requests"].update({"nvidia.com/gpu": "8"}))),
        ("ephemeral storage the bot does not name", "bot-resources",
         lambda job: container(job)["resources"]["requests"].update({"ephemeral-storage": "1Ti"})),
        ("a cpu request above the bot's limit", "bot-resources",
         lambda job: (container(job)["resources"]["requests"].update({"cpu": "2"}), limits(job).update({"cpu": "2"}))),
        ("an init container above the bot's limits", "bot-resources",
         lambda job: pod(job).update({"initContainers": [dict(
             copy.deepcopy(container(job)), name="init",
             resources={"limits": {"cpu": "16", "memory": "512Mi"}})]})),
        ("a deadline one second above the bot's maxLifetimeSeconds", "bot-deadline",
         set_path("spec", "activeDeadlineSeconds", BOT_MAX_LIFETIME + 1)),
        ("a 30-day deadline (the CRD's maximum, not the bot's)", "bot-deadline",
         set_path("spec", "activeDeadlineSeconds", 2592000)),
        ("priorityClassName system-cluster-critical", "no-priority-class",
         set_path("spec", "template", "spec", "priorityClassName", "system-cluster-critical")),
        ("a nodeName", "no-node-selection", set_path("spec", "template", "spec", "nodeName", "control-plane-0")),
        ("a nodeSelector", "no-node-selection",
         set_path("spec", "template", "spec", "nodeSelector", {"node-role.kubernetes.io/control-plane": ""})),
        ("tolerating every taint", "no-tolerations",
         set_path("spec", "template", "spec", "tolerations", [{"operator": "Exists"}])),
        ("the pod affinity removed", "rendered-affinity", lambda job: pod(job).pop("affinity")),
        ("a node affinity added", "rendered-affinity",
         lambda job: pod(job)["affinity"].update({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
             "nodeSelectorTerms": [{"matchExpressions": [
                 {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}]}}})),
        ("affinity to another bot's pod", "rendered-affinity",
         lambda job: pod(job)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
         ["labelSelector"]["matchLabels"].update({"app.kubernetes.io/instance": "other-bot"})),
        ("affinity to the bot pod in any namespace", "rendered-affinity",
         lambda job: pod(job)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
         .update({"namespaceSelector": {}})),
        ("another serviceAccountName", "no-service-account",
         set_path("spec", "template", "spec", "serviceAccountName", f"{BOT}-agent")),
        ("runAsGroup 0", "shared-group", set_path("spec", "template", "spec", "securityContext", "runAsGroup", 0)),
        ("runAsGroup left to the image", "shared-group", lambda job: pod(job)["securityContext"].pop("runAsGroup")),
        ("a container with runAsGroup 0", "shared-group",
         lambda job: container(job)["securityContext"].update({"runAsGroup": 0})),
        ("fsGroup 0", "shared-group", set_path("spec", "template", "spec", "securityContext", "fsGroup", 0)),
        ("supplementalGroups with group 0", "shared-group",
         set_path("spec", "template", "spec", "securityContext", "supplementalGroups", [SHARED_GID, 0])),
        ("the bot's config ConfigMap as a volume", "volume-types",
         lambda job: pod(job)["volumes"].append({"name": "config", "configMap": {"name": f"{BOT}-config"}})),
        ("a downwardAPI volume", "volume-types",
         lambda job: pod(job)["volumes"].append({"name": "labels", "downwardAPI": {"items": [
             {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}})),
        ("pod-level resources", "no-extra-resources",
         set_path("spec", "template", "spec", "resources", {"limits": {"cpu": "1", "memory": "512Mi"}})),
    ]


# Refusals the API server's own validation may give before admission runs,
# by case: still a refusal, but not the policy's.
ALSO_REFUSED_BY_API_SERVER = {
    "privileged": "privileged: Forbidden: disallowed by cluster policy",
    # Pod validation refuses '..' in a subPath before admission; the policy's own
    # rule (subPath equal to the Job's runner directory) would refuse it as well.
    "a subPath traversing out of the runner directory": "must not contain '..'",
    "a subPath '..' to the sandboxes directory": "must not contain '..'",
}


def create(options, job: dict, user: str) -> subprocess.CompletedProcess:
    return kubectl(options, "create", "--dry-run=server", f"--as={user}", "-o", "name", "-f", "-",
                   stdin=json.dumps(job), check=False)


def saint_bot(name: str, namespace: str, runtime_class: str | None) -> dict:
    """A SaintBot as the bot-bounds policy reads it (never reconciled here: the
    throwaway control plane runs no operator); with a runtime class also with
    BOT_RESOURCES and BOT_MAX_LIFETIME, without one with the operator's defaults."""
    sandbox = ({"runtimeClassName": runtime_class, "resources": BOT_RESOURCES,
                "maxLifetimeSeconds": BOT_MAX_LIFETIME} if runtime_class else {})
    return {"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"provider": "anthropic", "name": "claude-sonnet-4-5"}, "sandbox": sandbox}}


def setup(options) -> None:
    for namespace in (NAMESPACE, OTHER_NAMESPACE, EMPTY_NAMESPACE):
        kubectl(options, "create", "namespace", namespace, check=False)
        # What the operator grants each agent (RBAC is not what is under test).
        kubectl(options, "apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "job-creator", "namespace": namespace},
                 "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "job-creator", "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "job-creator"},
                 "subjects": [
                     {"kind": "ServiceAccount", "name": f"{BOT}-agent", "namespace": NAMESPACE},
                     {"kind": "ServiceAccount", "name": f"{PLAIN_BOT}-agent", "namespace": NAMESPACE},
                     {"kind": "ServiceAccount", "name": f"{BOT}-agent", "namespace": EMPTY_NAMESPACE},
                     {"kind": "ServiceAccount", "name": "builder", "namespace": NAMESPACE}]},
            ]}))
    # The other namespace has BOT too, so a Job there is refused for the namespace
    # alone, not for a missing parameter.
    bots = [saint_bot(BOT, NAMESPACE, RUNTIME_CLASS), saint_bot(PLAIN_BOT, NAMESPACE, None),
            saint_bot(BOT, OTHER_NAMESPACE, RUNTIME_CLASS)]
    kubectl(options, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": bots}))


def sandbox_uid_of_policy(options) -> int:
    """The sandbox uid the installed policy requires (its `sandboxUid` variable, which
    a saint-config test holds equal to saint_config::uids::SANDBOX_UID)."""
    policies = json.loads(kubectl(options, "get", "validatingadmissionpolicies", "-o", "json").stdout)
    for policy in policies["items"]:
        for variable in policy["spec"].get("variables", []):
            if variable["name"] == "sandboxUid":
                return int(variable["expression"])
    raise SystemExit("no installed ValidatingAdmissionPolicy defines the variable sandboxUid")


def teardown(options) -> None:
    for namespace in (NAMESPACE, OTHER_NAMESPACE, EMPTY_NAMESPACE):
        kubectl(options, "delete", "namespace", namespace, "--wait=false", check=False)


def wait_for_policy(options, image: str, sandbox_uid: int) -> None:
    """Policies (and the parameters they read) take effect asynchronously; wait until
    a Job breaking only the first policy, and one breaking only the runtime-class
    policy, are refused."""
    host_path = sandbox_job(image, sandbox_uid)
    pod(host_path)["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    no_runtime_class = sandbox_job(image, sandbox_uid)
    pod(no_runtime_class).pop("runtimeClassName")
    deadline = time.monotonic() + 30
    for bad, marker in ((host_path, "saint sandbox policy [no-host-path]"),
                        (no_runtime_class, "saint sandbox policy [runtime-class]")):
        while marker not in create(options, bad, AGENT).stderr:
            if time.monotonic() >= deadline:
                raise SystemExit(f"the sandbox admission policies did not refuse with {marker} within 30 s "
                                 "(are the chart's ValidatingAdmissionPolicies installed?)")
            time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--sandbox-image", required=True)
    parser.add_argument("--verbose", action="store_true", help="print each refusal in the API server's words")
    options = parser.parse_args()
    image = options.sandbox_image

    setup(options)
    failures = []
    passed = 0
    try:
        sandbox_uid = sandbox_uid_of_policy(options)
        wait_for_policy(options, image, sandbox_uid)

        def sandbox_job_for(bot: str = BOT) -> dict:
            return sandbox_job(image, sandbox_uid, bot)

        result = create(options, sandbox_job_for(), AGENT)
        if result.returncode == 0:
            passed += 1
            print(f"ok   admitted: the sandbox template from {AGENT}")
        else:
            failures.append(f"the sandbox template was refused: {result.stderr.strip()}")

        for what, rules, mutate in mutation_cases(image, sandbox_uid):
            job = sandbox_job_for()
            mutate(job)
            result = create(options, job, AGENT)
            rules = (rules,) if isinstance(rules, str) else rules
            rule = " or ".join(rules)
            api_server_marker = ALSO_REFUSED_BY_API_SERVER.get(what)
            if result.returncode != 0 and any(f"saint sandbox policy [{name}]" in result.stderr for name in rules):
                passed += 1
                print(f"ok   refused [{rule}]: {what}")
                if options.verbose:
                    print(f"       {result.stderr.strip()}")
            elif result.returncode != 0 and api_server_marker and api_server_marker in result.stderr:
                passed += 1
                print(f"ok   refused by the API server's own validation before admission: {what}")
            else:
                outcome = "admitted" if result.returncode == 0 else result.stderr.strip()
                failures.append(f"{what}: expected a refusal naming [{rule}], got: {outcome}")

        # A bot that names no runtime class: its template has none, and a Job may not
        # choose one.
        plain = sandbox_job_for(PLAIN_BOT)
        result = create(options, plain, PLAIN_AGENT)
        if result.returncode == 0:
            passed += 1
            print(f"ok   admitted: the sandbox template without a runtime class from {PLAIN_AGENT}")
        else:
            failures.append(f"the plain bot's sandbox template was refused: {result.stderr.strip()}")
        # ...and its bounds are the operator's defaults: 1 CPU, 1Gi, a day.
        at_defaults = sandbox_job_for(PLAIN_BOT)
        at_defaults["spec"]["activeDeadlineSeconds"] = 86400
        container(at_defaults)["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"},
                                               "limits": {"cpu": "1", "memory": "1Gi"}}
        result = create(options, at_defaults, PLAIN_AGENT)
        if result.returncode == 0:
            passed += 1
            print("ok   admitted: the operator's default sandbox bounds for a bot that sets none")
        else:
            failures.append(f"the default bounds were refused: {result.stderr.strip()}")
        plain_cases = [
            ("a runtime class added to a bot that names none", "runtime-class",
             lambda job: pod(job).update({"runtimeClassName": RUNTIME_CLASS})),
            ("a deadline above the default maxLifetimeSeconds (86400)", "bot-deadline",
             lambda job: job["spec"].update({"activeDeadlineSeconds": 86401})),
            ("2 CPUs where the defaults give 1", "bot-resources",
             lambda job: container(job)["resources"]["limits"].update({"cpu": "2"})),
            ("2Gi where the defaults give 1Gi", "bot-resources",
             lambda job: container(job)["resources"]["limits"].update({"memory": "2Gi"})),
        ]
        for what, rule, mutate in plain_cases:
            job = sandbox_job_for(PLAIN_BOT)
            mutate(job)
            result = create(options, job, PLAIN_AGENT)
            if result.returncode != 0 and f"saint sandbox policy [{rule}]" in result.stderr:
                passed += 1
                print(f"ok   refused [{rule}]: {what}")
            else:
                failures.append(f"{what}: expected [{rule}], got: {result.stderr.strip() or 'admitted'}")

        # An agent account in a namespace without any SaintBot: no parameter, refused.
        job = sandbox_job_for()
        job["metadata"]["namespace"] = EMPTY_NAMESPACE
        empty_agent = f"system:serviceaccount:{EMPTY_NAMESPACE}:{BOT}-agent"
        result = create(options, job, empty_agent)
        if result.returncode != 0 and "no params found" in result.stderr:
            passed += 1
            print("ok   refused (no SaintBot in the namespace): a Job from an agent account without its bot")
        else:
            failures.append(f"Job without a SaintBot: expected 'no params found', got: {result.stderr.strip() or 'admitted'}")

        # The agent of one namespace creating Jobs in another (if RBAC ever allowed it).
        job = sandbox_job_for()
        job["metadata"]["namespace"] = OTHER_NAMESPACE
        result = create(options, job, AGENT)
        if result.returncode != 0 and "saint sandbox policy [own-namespace]" in result.stderr:
            passed += 1
            print("ok   refused [own-namespace]: a Job in another namespace")
        else:
            failures.append(f"Job in another namespace: expected [own-namespace], got: {result.stderr.strip() or 'admitted'}")

        # Nor are other Jobs in a namespace without a SaintBot: the bot-bounds binding
        # selects only Jobs labelled as sandboxes, so its Deny for want of a parameter
        # reaches no one else (the administrator here).
        plain_job = {"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "nightly-backup", "namespace": EMPTY_NAMESPACE},
                     "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                    "containers": [{"name": "run", "image": "busybox:1.36"}]}}}}
        result = kubectl(options, "create", "--dry-run=server", "-o", "name", "-f", "-",
                         stdin=json.dumps(plain_job), check=False)
        if result.returncode == 0:
            passed += 1
            print("ok   admitted: an administrator's Job in a namespace without a SaintBot (not matched)")
        else:
            failures.append(f"an unrelated Job in a namespace without a SaintBot was refused: {result.stderr.strip()}")

        # Accounts that are not bot agents are not this policy's business.
        job = sandbox_job_for()
        pod(job)["volumes"].append({"name": "creds", "secret": {"secretName": "build-credentials"}})
        result = create(options, job, f"system:serviceaccount:{NAMESPACE}:builder")
        if result.returncode == 0:
            passed += 1
            print("ok   admitted: a Job with a Secret volume from a non-agent account (not matched)")
        else:
            failures.append(f"non-agent account was refused: {result.stderr.strip()}")
    finally:
        teardown(options)

    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    print(f"admission policy: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
