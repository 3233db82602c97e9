#!/usr/bin/env python3
"""Runs the real saint-operator binary as the chart's ServiceAccount (a token
from the API server, not admin credentials) against a cluster the chart is
installed in, applies the example company bot, and checks that the chart's
RBAC is enough and no more:

- the operator reconciles the example bot without one Forbidden error: every
  child exists, the bot's status reports the rendered config, Contacts are Ready;
- the bot's agent account is bound (RoleBinding `<bot>-agent`) to the chart's agent
  ClusterRole, no per-bot Role exists, and the operator holds no Job rights;
- the operator may only `get` Secrets (it checks that referenced ones exist), never
  list them, and the bot's agent account cannot read Secrets at all;
- the sandbox Job template the operator rendered into the bot's config is
  admitted when the agent creates it, and refused once it mounts a Secret.

The example bot is applied with every kind of Secret reference a SaintBot has,
each to a Secret of its own (a fallback model key, a rotated key, an OTLP
header besides the example's own), so the owners policy's [bot-secrets-only]
must admit the Deployment reading each of them.

Expects KUBECONFIG to be an administrator's and the chart to be installed as
release `saint` in `saint-system`. Uses (creating it if needed) the namespace
given by --namespace and deletes it afterwards; stops the operator process it
started. With --watch-namespace the operator watches only that namespace (the
chart installed with watchNamespace set to it: Role instead of ClusterRole)."""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import yaml

BOT = "acme-assistant"
OPERATOR_ACCOUNT = "system:serviceaccount:saint-system:saint-operator"
# The chart's agent ClusterRole for release `saint` (templates/rbac.yaml).
AGENT_CLUSTER_ROLE = "saint-agent"
# Set from the command line in main().
NAMESPACE = "saint-rbac-check"
AGENT_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{BOT}-agent"
CHILDREN = [
    ("configmap", f"{BOT}-config"),
    ("persistentvolumeclaim", f"{BOT}-workspace"),
    ("serviceaccount", f"{BOT}-agent"),
    ("rolebinding.rbac.authorization.k8s.io", f"{BOT}-agent"),
    ("service", BOT),
    ("networkpolicy", f"{BOT}-agent"),
    ("networkpolicy", f"{BOT}-sandbox"),
    ("deployment", BOT),
]

failures: list[str] = []


def check(condition: bool, message: str) -> bool:
    print(f"{'ok  ' if condition else 'FAIL'} {message}")
    if not condition:
        failures.append(message)
    return condition


def kubectl(options, *arguments, stdin: str | None = None, check_status: bool = True,
            kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ)
    if kubeconfig:
        environment["KUBECONFIG"] = kubeconfig
    result = subprocess.run([options.kubectl, *arguments], input=stdin, capture_output=True, text=True,
                            env=environment, check=False)
    if check_status and result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(arguments)} failed: {result.stderr.strip()}")
    return result


def operator_kubeconfig(options, run_dir: pathlib.Path) -> str:
    token = kubectl(options, "-n", "saint-system", "create", "token", "saint-operator",
                    "--duration=1h").stdout.strip()
    server = kubectl(options, "config", "view", "--minify", "-o",
                     "jsonpath={.clusters[0].cluster.server}").stdout.strip()
    path = run_dir / "operator.kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {"server": server,
                                                     "certificate-authority": options.ca_file}}],
        "users": [{"name": "saint-operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "cluster", "user": "saint-operator"}}],
        "current-context": "operator",
    }))
    return str(path)


# Secret references the example bot lacks, or shares a Secret for, added by
# with_every_secret_reference: (Secret, key, what reads it in the agent container).
EXTRA_SECRETS = [
    ("acme-assistant-llm-spare", "api-key", "SAINT_MODEL_API_KEY_1"),
    ("acme-assistant-openai", "api-key", "SAINT_MODEL_FALLBACK_1_API_KEY"),
    ("acme-assistant-otel", "authorization", "SAINT_OTLP_HEADER_0"),
]


def with_every_secret_reference(examples: pathlib.Path, run_dir: pathlib.Path) -> pathlib.Path:
    """A copy of the examples whose bot also names a rotated model key, a fallback key
    in a Secret of its own and an OTLP header, with those Secrets."""
    copy = run_dir / "examples-every-secret"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(examples, copy, ignore=shutil.ignore_patterns("minimal"))
    documents = list(yaml.safe_load_all((copy / "saintbot.yaml").read_text()))
    bot = next(document for document in documents if document and document.get("kind") == "SaintBot")
    model = bot["spec"]["model"]
    model["additionalApiKeySecretRefs"] = [{"name": EXTRA_SECRETS[0][0], "key": EXTRA_SECRETS[0][1]}]
    model["fallbacks"][0]["apiKeySecretRef"] = {"name": EXTRA_SECRETS[1][0], "key": EXTRA_SECRETS[1][1]}
    bot["spec"]["telemetry"] = {"otlp": {"endpoint": "https://otel.company.hr", "headers": [
        {"name": "Authorization", "secretKeyRef": {"name": EXTRA_SECRETS[2][0], "key": EXTRA_SECRETS[2][1]}}]}}
    (copy / "saintbot.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    secrets = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque",
                "stringData": {key: "REPLACE-ME"}} for name, key, _ in EXTRA_SECRETS]
    (copy / "secrets-every-reference.yaml").write_text(yaml.safe_dump_all(secrets, sort_keys=False))
    return copy


def wait_for_status(options, deadline_seconds: int) -> dict:
    deadline = time.monotonic() + deadline_seconds
    status: dict = {}
    while time.monotonic() < deadline:
        result = kubectl(options, "-n", NAMESPACE, "get", "saintbot", BOT, "-o", "json", check_status=False)
        if result.returncode == 0:
            status = json.loads(result.stdout).get("status", {})
            rendered = [condition for condition in status.get("conditions", [])
                        if condition["type"] == "ConfigRendered" and condition["status"] == "True"]
            if status.get("observedGeneration") == 1 and rendered:
                return status
        time.sleep(1)
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--operator", required=True, help="path of the saint-operator binary")
    parser.add_argument("--ca-file", required=True, help="CA of the API server's serving certificate")
    parser.add_argument("--examples", required=True)
    parser.add_argument("--run-dir", required=True, type=pathlib.Path)
    parser.add_argument("--namespace", default="saint-rbac-check")
    parser.add_argument("--watch-namespace", action="store_true",
                        help="run the operator with --namespace (the chart's watchNamespace mode)")
    options = parser.parse_args()
    global NAMESPACE, AGENT_ACCOUNT
    NAMESPACE = options.namespace
    AGENT_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{BOT}-agent"
    print(f"operator as {OPERATOR_ACCOUNT}, bot in namespace {NAMESPACE}"
          f"{' (operator watches only it)' if options.watch_namespace else ' (operator watches all namespaces)'}")

    kubectl(options, "create", "namespace", NAMESPACE, check_status=False)
    kubectl(options, "label", "--overwrite", "namespace", NAMESPACE,
            "pod-security.kubernetes.io/enforce=restricted")
    log_path = options.run_dir / "operator.log"
    environment = dict(os.environ, KUBECONFIG=operator_kubeconfig(options, options.run_dir),
                       POD_NAMESPACE="saint-system", POD_NAME="rbac-check", RUST_LOG="info")
    with open(log_path, "w") as log:
        arguments = [options.operator, "--listen-address", "127.0.0.1:0", "--leader-election=true",
                     "--lease-name=saint-operator", "--lease-namespace=saint-system",
                     f"--agent-cluster-role={AGENT_CLUSTER_ROLE}"]
        if options.watch_namespace:
            arguments.append(f"--namespace={NAMESPACE}")
        operator = subprocess.Popen(arguments,
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=environment)
    try:
        examples = with_every_secret_reference(pathlib.Path(options.examples), options.run_dir)
        kubectl(options, "-n", NAMESPACE, "apply", "-f", str(examples))
        status = wait_for_status(options, 60)
        check(status.get("observedGeneration") == 1,
              f"the bot's status reports observedGeneration 1 with ConfigRendered (status: {json.dumps(status)})")
        check(status.get("contacts") == 3 and status.get("roles") == 5,
              f"3 contacts and 5 roles rendered (got {status.get('contacts')}, {status.get('roles')})")
        for kind, name in CHILDREN:
            result = kubectl(options, "-n", NAMESPACE, "get", kind, name, "-o", "json", check_status=False)
            owned = result.returncode == 0 and any(
                reference.get("kind") == "SaintBot" and reference.get("controller")
                for reference in json.loads(result.stdout)["metadata"].get("ownerReferences", []))
            check(owned, f"{kind}/{name} exists with the SaintBot as controller owner")
        deployment = kubectl(options, "-n", NAMESPACE, "get", "deployment", BOT, "-o", "json", check_status=False)
        if deployment.returncode == 0:
            containers = json.loads(deployment.stdout)["spec"]["template"]["spec"]["containers"]
            agent_env = {entry["name"]: entry.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
                         for container in containers if container["name"] == "agent"
                         for entry in container.get("env", [])}
            for name, _, variable in EXTRA_SECRETS:
                check(agent_env.get(variable) == name,
                      f"the admitted Deployment's agent reads Secret {name} as {variable} "
                      f"(got {agent_env.get(variable)})")
        contacts = json.loads(kubectl(options, "-n", NAMESPACE, "get", "contacts", "-o", "json").stdout)["items"]
        for contact in contacts:
            ready = [condition["status"] for condition in contact.get("status", {}).get("conditions", [])
                     if condition["type"] == "Ready"]
            check(ready == ["True"], f"Contact {contact['metadata']['name']} is Ready")
        lease = kubectl(options, "-n", "saint-system", "get", "lease", "saint-operator", "-o",
                        "jsonpath={.spec.holderIdentity}", check_status=False).stdout
        check(lease == "rbac-check", f"the operator holds the Lease (holder: {lease!r})")

        log_text = log_path.read_text()
        # Refusals of the operator's account: RBAC ("cannot <verb> resource", the
        # escalation check) or an admission policy. A 403 for writing into a namespace
        # being deleted (another check's, cleaning up) is neither.
        forbidden = [line for line in log_text.splitlines() if "forbidden" in line.lower() and any(
            words in line for words in (" cannot ", "attempting to grant", "denied request"))]
        check(not forbidden, "no RBAC or admission refusal in the operator's log" +
              (":\n    " + "\n    ".join(line[:400] for line in forbidden[:5]) if forbidden else ""))

        binding = json.loads(kubectl(options, "-n", NAMESPACE, "get", "rolebinding", f"{BOT}-agent",
                                     "-o", "json").stdout)
        check(binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                     "name": AGENT_CLUSTER_ROLE},
              f"the agent's RoleBinding binds ClusterRole {AGENT_CLUSTER_ROLE} (roleRef: {binding['roleRef']})")
        role = kubectl(options, "-n", NAMESPACE, "get", "role.rbac.authorization.k8s.io", f"{BOT}-agent",
                       check_status=False)
        check(role.returncode != 0 and "NotFound" in role.stderr, "no per-bot Role: the operator builds none")
        for account, verb, expected in ((OPERATOR_ACCOUNT, "get", "yes"), (OPERATOR_ACCOUNT, "list", "no"),
                                        (AGENT_ACCOUNT, "get", "no"), (AGENT_ACCOUNT, "list", "no")):
            allowed = kubectl(options, "auth", "can-i", verb, "secrets", "-n", NAMESPACE, f"--as={account}",
                              check_status=False).stdout.strip()
            check(allowed == expected, f"{account} {'may' if expected == 'yes' else 'cannot'} {verb} Secrets "
                  f"(can-i: {allowed})")
        for verb in ("create", "get"):
            allowed = kubectl(options, "auth", "can-i", verb, "jobs.batch", "-n", NAMESPACE,
                              f"--as={OPERATOR_ACCOUNT}", check_status=False).stdout.strip()
            check(allowed == "no", f"the operator cannot {verb} Jobs (can-i: {allowed})")
            allowed = kubectl(options, "auth", "can-i", verb, "jobs.batch", "-n", NAMESPACE,
                              f"--as={AGENT_ACCOUNT}", check_status=False).stdout.strip()
            check(allowed == "yes", f"the agent may {verb} Jobs in its namespace (can-i: {allowed})")

        config_map = json.loads(kubectl(options, "-n", NAMESPACE, "get", "configmap", f"{BOT}-config",
                                        "-o", "json").stdout)
        template = json.loads(config_map["data"]["bot-config.json"])["sandbox"].get("jobTemplate")
        if check(template is not None, "the rendered config carries the sandbox Job template"):
            job_name = f"{BOT}-sandbox-check"
            template["metadata"]["name"] = job_name
            owners = template["metadata"].get("ownerReferences", [])
            check([(o.get("kind"), o.get("name"), o.get("controller"), o.get("blockOwnerDeletion"))
                   for o in owners] == [("SaintBot", BOT, True, False)],
                  f"the template is owned by the SaintBot, blockOwnerDeletion false (got {owners})")
            # Unfilled, the runner-directory placeholder is refused...
            result = kubectl(options, "create", "--dry-run=server", f"--as={AGENT_ACCOUNT}", "-f", "-",
                             stdin=json.dumps(template), check_status=False)
            check(result.returncode != 0 and "saint sandbox policy [workspace-read-only]" in result.stderr,
                  "the template with its runner-directory placeholder unfilled is refused: "
                  f"{result.stderr.strip() or 'admitted'}")
            # ...so fill it, and the browser socket directory's, as the agent does
            # (agent-pod/sandbox/src/kubernetes.rs).
            for mount in template["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]:
                for directory in ("sandboxes", "browsers"):
                    if mount.get("subPath") == f".saint/run/{directory}/{{{{job-name}}}}":
                        mount["subPath"] = f".saint/run/{directory}/{job_name}"
            result = kubectl(options, "create", "--dry-run=server", f"--as={AGENT_ACCOUNT}", "-f", "-",
                             stdin=json.dumps(template), check_status=False)
            check(result.returncode == 0, "the agent may create the rendered sandbox Job " +
                  f"(policy and Pod Security admit it) {result.stderr.strip()}")
            template["spec"]["template"]["spec"].setdefault("volumes", []).append(
                {"name": "creds", "secret": {"secretName": "acme-assistant-llm"}})
            result = kubectl(options, "create", "--dry-run=server", f"--as={AGENT_ACCOUNT}", "-f", "-",
                             stdin=json.dumps(template), check_status=False)
            check(result.returncode != 0 and "saint sandbox policy [no-secret-volumes]" in result.stderr,
                  f"the same Job with a Secret volume is refused: {result.stderr.strip() or 'admitted'}")
    finally:
        operator.terminate()
        try:
            operator.wait(timeout=15)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        kubectl(options, "delete", "namespace", NAMESPACE, "--wait=false", check_status=False)

    if failures:
        print(f"--- last lines of the operator's log ({log_path}):", file=sys.stderr)
        print("\n".join(log_path.read_text().splitlines()[-15:]), file=sys.stderr)
    print(f"operator with the chart's RBAC: {len(failures)} failed check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
