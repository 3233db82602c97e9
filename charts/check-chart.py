#!/usr/bin/env python3
"""Renders the Saint chart with `helm template` under several value sets and
checks what a reviewer would otherwise check by eye: the objects it makes, that
the operator's RBAC never reaches Secrets or wildcards, that the operator pod is
Pod Security "restricted", that the admission policy allows exactly the
configured sandbox image, and that bad values are refused by the schema.

Reads only the chart; writes nothing. Exits non-zero with one line per failed
check."""

import argparse
import json
import subprocess
import sys

import yaml

# libyaml's loader when PyYAML has it (Debian's does): the same documents, parsed
# several times faster than the pure-Python SafeLoader.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

SANDBOX_IMAGE = "ghcr.io/saint-work/saint-sandbox:0.1.0"
RULE_PREFIX = "saint sandbox policy ["

failures: list[str] = []


def check(condition: bool, message: str) -> None:
    if not condition:
        failures.append(message)


def render(helm: str, chart: str, *arguments: str) -> list[dict]:
    command = [helm, "template", "saint", chart, "--namespace", "saint-system", *arguments]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"helm template {' '.join(arguments)} failed:\n{result.stderr}")
    return [document for document in yaml.load_all(result.stdout, Loader=YAML_LOADER) if document]


def render_fails(helm: str, chart: str, *arguments: str) -> str:
    """Renders with arguments that must be refused; returns helm's error text."""
    command = [helm, "template", "saint", chart, *arguments]
    result = subprocess.run(command, capture_output=True, text=True)
    check(result.returncode != 0, f"helm template {' '.join(arguments)} should fail but succeeded")
    return result.stderr


def by_kind(objects: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for item in objects:
        kinds.setdefault(item["kind"], []).append(item)
    return kinds


def check_rbac_rules(rules: list[dict], where: str) -> None:
    for rule in rules:
        resources = rule.get("resources", [])
        verbs = rule.get("verbs", [])
        groups = rule.get("apiGroups", [])
        check("secrets" not in resources, f"{where}: a rule grants access to secrets: {rule}")
        check("*" not in resources and "*" not in verbs and "*" not in groups,
              f"{where}: a rule uses a wildcard: {rule}")
        for verb in ("escalate", "bind", "impersonate"):
            check(verb not in verbs, f"{where}: a rule grants '{verb}': {rule}")
        if resources in (["pods"],) and groups == [""]:
            check(set(verbs) == {"get", "list", "watch"}, f"{where}: pods must be read-only: {rule}")


def granted(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
               and verb in rule.get("verbs", []) for rule in rules)


def check_operator_pod(deployment: dict) -> None:
    pod = deployment["spec"]["template"]["spec"]
    security = pod.get("securityContext", {})
    check(security.get("runAsNonRoot") is True, "operator pod: runAsNonRoot must be true")
    check(security.get("seccompProfile", {}).get("type") == "RuntimeDefault",
          "operator pod: seccompProfile must be RuntimeDefault")
    for container in pod["containers"]:
        name = f"operator container {container['name']}"
        context = container.get("securityContext", {})
        check(context.get("allowPrivilegeEscalation") is False, f"{name}: allowPrivilegeEscalation must be false")
        check(context.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem must be true")
        check(context.get("capabilities", {}).get("drop") == ["ALL"], f"{name}: must drop ALL capabilities")
        check(container.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz",
              f"{name}: liveness probe must be /healthz")
        check(container.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz",
              f"{name}: readiness probe must be /readyz")
        resources = container.get("resources", {})
        check(bool(resources.get("requests")) and bool(resources.get("limits")),
              f"{name}: requests and limits must be set")
        check(container["image"] == "ghcr.io/saint-work/saint-operator:0.1.0",
              f"{name}: image tag must default to appVersion, got {container['image']}")


def policy_allowed_images(policy: dict) -> list[str]:
    variables = {variable["name"]: variable["expression"] for variable in policy["spec"]["variables"]}
    # The variable is a JSON list literal, which is also a CEL list literal.
    return json.loads(variables["allowedImages"])


def check_default(helm: str, chart: str) -> None:
    kinds = by_kind(render(helm, chart))
    expected = {"ServiceAccount", "Service", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                "Deployment", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    check(set(kinds) == expected, f"default render: kinds {sorted(kinds)} != {sorted(expected)}")

    cluster_rules = kinds["ClusterRole"][0]["rules"]
    check_rbac_rules(cluster_rules, "ClusterRole")
    # The operator grants each agent Role jobs and pods; escalation prevention
    # requires it to hold them itself.
    for verb in ("create", "get", "list", "watch", "delete"):
        check(granted(cluster_rules, "batch", "jobs", verb), f"ClusterRole: missing jobs {verb}")
    # ... and events (the agent reports refused channel credentials on its SaintBot).
    for verb in ("create", "patch"):
        check(granted(cluster_rules, "events.k8s.io", "events", verb), f"ClusterRole: missing events {verb}")
    for resource in ("configmaps", "persistentvolumeclaims", "serviceaccounts", "services"):
        for verb in ("create", "patch", "list", "watch"):
            check(granted(cluster_rules, "", resource, verb), f"ClusterRole: missing {resource} {verb} (apply, watch)")
        for verb in ("update", "delete"):
            check(not granted(cluster_rules, "", resource, verb),
                  f"ClusterRole: {resource} {verb} is never used (children are applied and garbage-collected)")
    check(granted(cluster_rules, "saint.work", "saintbots/status", "patch"), "ClusterRole: missing saintbots/status patch")
    check(not granted(cluster_rules, "saint.work", "saintbots", "patch"),
          "ClusterRole: the operator must not write SaintBot specs")

    lease_roles = [role for role in kinds["Role"] if role["metadata"]["name"].endswith("-leader-election")]
    check(len(lease_roles) == 1, "leader election Role missing")
    for role in lease_roles:
        check(role["metadata"]["namespace"] == "saint-system", "leader election Role must be in the release namespace")
        check(all(rule.get("resources") == ["leases"] for rule in role["rules"]),
              "leader election Role must only touch leases")

    deployment = kinds["Deployment"][0]
    check_operator_pod(deployment)
    arguments = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    check(f"--sandbox-image={SANDBOX_IMAGE}" in arguments, f"operator must be told the sandbox image: {arguments}")
    check("--leader-election=true" in arguments, f"leader election flag missing: {arguments}")
    check(not any(argument.startswith("--api-server-cidr") for argument in arguments),
          "no API server CIDRs by default: the operator discovers them")

    discovery = [role for role in kinds["Role"] if role["metadata"]["name"].endswith("-api-server-discovery")]
    check(len(discovery) == 1 and discovery[0]["metadata"]["namespace"] == "default"
          and discovery[0]["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                                         "verbs": ["list"]}],
          f"API server discovery needs exactly list on endpointslices in default: {discovery}")

    policy = kinds["ValidatingAdmissionPolicy"][0]
    check(policy["spec"]["failurePolicy"] == "Fail", "admission policy must fail closed")
    check(policy_allowed_images(policy) == [SANDBOX_IMAGE],
          f"admission policy images {policy_allowed_images(policy)} != [{SANDBOX_IMAGE}]")
    for validation in policy["spec"]["validations"]:
        text = validation.get("messageExpression", "") + validation.get("message", "")
        check(RULE_PREFIX in text, f"admission policy rule without a named message: {validation['expression']}")
    match = policy["spec"]["matchConditions"][0]["expression"]
    check("system:serviceaccount:" in match and "-agent" in match, "admission policy must match *-agent accounts")
    binding = kinds["ValidatingAdmissionPolicyBinding"][0]
    check(binding["spec"]["policyName"] == policy["metadata"]["name"], "binding names another policy")
    check(binding["spec"]["validationActions"] == ["Deny"], "binding must deny by default")
    check("matchResources" not in binding["spec"], "default binding must cover all namespaces")


def check_single_namespace(helm: str, chart: str) -> None:
    kinds = by_kind(render(helm, chart, "--set", "watchNamespace=acme", "--set", "replicaCount=2"))
    check("ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds,
          "watchNamespace set: no cluster-wide RBAC expected")
    bot_roles = [role for role in kinds.get("Role", []) if role["metadata"]["namespace"] == "acme"]
    check(len(bot_roles) == 1, "watchNamespace set: one Role in that namespace expected")
    for role in bot_roles:
        check_rbac_rules(role["rules"], "Role acme")
    deployment = kinds["Deployment"][0]
    check(deployment["spec"]["replicas"] == 2, "replicaCount=2 not applied")
    check("--namespace=acme" in deployment["spec"]["template"]["spec"]["containers"][0]["args"],
          "operator must be told its namespace")
    selector = kinds["ValidatingAdmissionPolicyBinding"][0]["spec"].get("matchResources", {}).get("namespaceSelector")
    check(selector == {"matchLabels": {"kubernetes.io/metadata.name": "acme"}},
          f"binding must be narrowed to the watched namespace, got {selector}")


def check_explicit_api_server(helm: str, chart: str) -> None:
    kinds = by_kind(render(helm, chart, "--set", "apiServer.cidrs[0]=10.0.0.10/32", "--set", "apiServer.port=443"))
    arguments = kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    check("--api-server-cidr=10.0.0.10/32" in arguments and "--api-server-port=443" in arguments,
          f"API server CIDRs and port must reach the operator: {arguments}")
    check(not [role for role in kinds["Role"] if role["metadata"]["name"].endswith("-api-server-discovery")],
          "with apiServer.cidrs set the operator needs no EndpointSlice access")


def check_sandbox_images(helm: str, chart: str) -> None:
    kinds = by_kind(render(helm, chart, "--set", "sandbox.image.tag=1.2.3",
                           "--set", "sandbox.extraAllowedImages[0]=registry.example/sbx@sha256:abc"))
    images = policy_allowed_images(kinds["ValidatingAdmissionPolicy"][0])
    check(images == ["ghcr.io/saint-work/saint-sandbox:1.2.3", "registry.example/sbx@sha256:abc"],
          f"allowed images not taken from values: {images}")


def check_refusals(helm: str, chart: str) -> None:
    error = render_fails(helm, chart, "--set", "replicaCount=2", "--set", "leaderElection.enabled=false")
    check("leaderElection" in error, f"two replicas without leader election: unexpected error {error!r}")
    error = render_fails(helm, chart, "--set", "unknownKey=1")
    check("unknownKey" in error, f"schema must refuse unknown keys: {error!r}")
    error = render_fails(helm, chart, "--set", "http.port=0")
    check("port" in error, f"schema must refuse port 0: {error!r}")
    error = render_fails(helm, chart, "--set", "apiServer.cidrs[0]=not-a-cidr")
    check("cidrs" in error, f"schema must refuse a malformed CIDR: {error!r}")
    error = render_fails(helm, chart, "--set", "sandbox.extraAllowedImages[0]=bad'quote")
    check("extraAllowedImages" in error, f"schema must refuse a quote in an image (CEL literal): {error!r}")
    error = render_fails(helm, chart, "--set", "admissionPolicy.validationActions[0]=Allow")
    check("validationActions" in error, f"schema must refuse an unknown validation action: {error!r}")


def check_crds(helm: str, chart: str) -> None:
    objects = render(helm, chart, "--include-crds")
    crds = sorted(item["metadata"]["name"] for item in objects if item["kind"] == "CustomResourceDefinition")
    check(crds == ["contacts.saint.work", "roles.saint.work", "saintbots.saint.work"],
          f"chart CRDs {crds} != contacts, roles, saintbots")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--helm", required=True)
    parser.add_argument("--chart", required=True)
    options = parser.parse_args()
    checks = [check_default, check_single_namespace, check_explicit_api_server, check_sandbox_images,
              check_refusals, check_crds]
    for step in checks:
        step(options.helm, options.chart)
    if failures:
        for failure in failures:
            print(f"FAIL: {failure}", file=sys.stderr)
        print(f"check-chart: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"check-chart: {len(checks)} groups of chart checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
