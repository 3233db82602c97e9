#!/usr/bin/env python3
"""Renders the Saint chart with `helm template` under several value sets and
checks what a reviewer would otherwise check by eye: the objects it makes, that
the operator's RBAC holds no Job or Pod rights, reads Secrets only by name, uses
no wildcards and may bind only the agent ClusterRole, that the operator pod is
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
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"helm template {' '.join(arguments)} failed:\n{result.stderr}")
    return [document for document in yaml.load_all(result.stdout, Loader=YAML_LOADER) if document]


def render_fails(helm: str, chart: str, *arguments: str) -> str:
    """Renders with arguments that must be refused; returns helm's error text."""
    command = [helm, "template", "saint", chart, *arguments]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    check(result.returncode != 0, f"helm template {' '.join(arguments)} should fail but succeeded")
    return result.stderr


def by_kind(objects: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for item in objects:
        kinds.setdefault(item["kind"], []).append(item)
    return kinds


AGENT_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]


def check_rbac_rules(rules: list[dict], where: str, agent_role: str | None = None) -> None:
    """No wildcards, no escalate/impersonate; Secrets only `get`; `bind` only on the
    agent ClusterRole named `agent_role` (None: no bind at all)."""
    for rule in rules:
        resources = rule.get("resources", [])
        verbs = rule.get("verbs", [])
        groups = rule.get("apiGroups", [])
        if "secrets" in resources:
            # The operator checks that referenced Secrets exist (metadata only): get by
            # name, never list or watch, and nothing else in the same rule.
            check(rule == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
                  f"{where}: Secrets may only be `get` in a rule of their own: {rule}")
        check("*" not in resources and "*" not in verbs and "*" not in groups,
              f"{where}: a rule uses a wildcard: {rule}")
        for verb in ("escalate", "impersonate"):
            check(verb not in verbs, f"{where}: a rule grants '{verb}': {rule}")
        if "bind" in verbs:
            check(agent_role is not None and rule == {
                "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                "resourceNames": [agent_role], "verbs": ["bind"]},
                  f"{where}: `bind` only on ClusterRole {agent_role}, in a rule of its own: {rule}")
        if resources in (["pods"],) and groups == [""]:
            check(set(verbs) <= {"get", "list", "watch"}, f"{where}: pods must be read-only: {rule}")


def check_operator_rules(rules: list[dict], where: str, agent_role: str) -> None:
    """The operator's own rules (ClusterRole, or Role in watchNamespace mode)."""
    check_rbac_rules(rules, where, agent_role)
    # No Job rights and of pods only `list` (their waiting reasons for the SaintBot's
    # status): it binds the agent ClusterRole instead of granting them itself.
    for group, resource, allowed in (("batch", "jobs", ()), ("", "pods", ("list",))):
        for verb in ("create", "get", "list", "watch", "delete", "patch", "update"):
            if verb not in allowed:
                check(not granted(rules, group, resource, verb), f"{where}: the operator must not {verb} {resource}")
    check(granted(rules, "", "pods", "list"), f"{where}: the operator lists bot pods for their waiting reasons")
    check(granted(rules, "rbac.authorization.k8s.io", "clusterroles", "bind"),
          f"{where}: missing bind on ClusterRole {agent_role}")
    check(not any("roles" in rule.get("resources", []) and "rbac.authorization.k8s.io" in rule.get("apiGroups", [])
                  for rule in rules), f"{where}: the operator builds no Roles any more")
    # Applied, restored on drift (update), an earlier version's binding to a per-bot Role
    # read (get) and deleted to be made again (roleRef is immutable).
    for verb in ("get", "list", "watch", "create", "patch", "update", "delete"):
        check(granted(rules, "rbac.authorization.k8s.io", "rolebindings", verb), f"{where}: missing rolebindings {verb}")
    check(granted(rules, "", "secrets", "get"), f"{where}: missing secrets get (the Secret check)")
    check(granted(rules, "events.k8s.io", "events", "create"), f"{where}: missing events create")
    # Events are created once per transition, never updated.
    check(not granted(rules, "events.k8s.io", "events", "patch"), f"{where}: events patch is not needed")
    # The agents' model-chain Events are watched for ModelAvailable: read only.
    for verb in ("list", "watch"):
        check(granted(rules, "", "events", verb), f"{where}: missing events {verb} (the agents' model-chain reports)")
    for verb in ("create", "patch", "update", "delete"):
        check(not granted(rules, "", "events", verb), f"{where}: the operator must not {verb} core events")


def check_agent_cluster_role(kinds: dict[str, list[dict]], arguments: list[str], where: str) -> str:
    """The agent ClusterRole exists with exactly the agent's rules and the operator is
    told its name; returns the name."""
    named = [argument.split("=", 1)[1] for argument in arguments if argument.startswith("--agent-cluster-role=")]
    check(len(named) == 1, f"{where}: the operator must be told --agent-cluster-role once: {arguments}")
    name = named[0] if named else ""
    roles = [role for role in kinds.get("ClusterRole", []) if role["metadata"]["name"] == name]
    check(len(roles) == 1, f"{where}: no ClusterRole {name!r} for the agent")
    for role in roles:
        check(role["rules"] == AGENT_RULES, f"{where}: agent ClusterRole rules {role['rules']} != {AGENT_RULES}")
        check("aggregationRule" not in role and not any(
            label.startswith("rbac.authorization.k8s.io/aggregate-to") for label in role["metadata"]["labels"]),
              f"{where}: the agent ClusterRole must neither aggregate nor be aggregated")
        check_rbac_rules(role["rules"], f"{where} agent ClusterRole")
    return name


def check_writes_policy(kinds: dict[str, list[dict]], release: str, service_account: str, where: str) -> None:
    """The admission policy keeping the operator's writes to its SaintBots' children."""
    policies = [policy for policy in kinds.get("ValidatingAdmissionPolicy", [])
                if policy["metadata"]["name"].endswith("-operator-writes")]
    check(len(policies) == 1, f"{where}: operator writes policy missing")
    for policy in policies:
        check(policy["spec"]["failurePolicy"] == "Fail", f"{where}: writes policy must fail closed")
        match = policy["spec"]["matchConditions"][0]["expression"]
        check(f"'system:serviceaccount:{release}:{service_account}'" in match,
              f"{where}: writes policy must match exactly the operator's account: {match}")
        covered = {(group, resource) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
                   for group in rule["apiGroups"] for resource in rule["resources"]
                   if set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}}
        # Every kind the operator's RBAC lets it write, except its own status and Events.
        written = {("", "configmaps"), ("", "persistentvolumeclaims"), ("", "serviceaccounts"), ("", "services"),
                   ("apps", "deployments"), ("networking.k8s.io", "networkpolicies"),
                   ("networking.k8s.io", "ingresses"), ("rbac.authorization.k8s.io", "rolebindings")}
        check(covered == written, f"{where}: writes policy covers {sorted(covered)}, not {sorted(written)}")
        text = " ".join(validation["expression"] for validation in policy["spec"]["validations"])
        variables = {variable["name"]: variable["expression"] for variable in policy["spec"]["variables"]}
        # The one controller owner of the object written (or deleted), a SaintBot.
        check("variables.current.metadata.ownerReferences" in variables.get("controllers", "")
              and "== 'SaintBot'" in variables.get("ownerName", ""),
              f"{where}: writes policy must read the controller owner of the object: {variables}")
        for needle in ("oldObject.metadata.ownerReferences", "r.kind == 'SaintBot'",
                       "serviceAccountName == object.metadata.name + '-agent'", "hostPath", "allowPrivilegeEscalation"):
            check(needle in text, f"{where}: writes policy lacks {needle!r}")
        for needle in ("[managed-by-label]", "[named-after-owner]", "[rendered-containers]", "[token-as-rendered]",
                       "[secrets-as-rendered]", "[cluster-ip-only]", "[bot-pods-only]", "[no-allow-all]",
                       "[webhook-paths-only]", "[agent-role-only]"):
            check(any(needle in validation.get("messageExpression", "") for validation in policy["spec"]["validations"]),
                  f"{where}: writes policy lacks the rule {needle}")
        rendered = operator_prepare_workspace_script()
        command = json.loads(variables.get("prepareWorkspaceCommand", "[]"))
        check(command[:2] == ["/bin/sh", "-c"] and len(command) > 2 and command[2] == rendered,
              f"{where}: the writes policy's prepare-workspace command {command[:3]} is not the operator's"
              f" (operator/src/saintbot_controller/build/workload.rs): {rendered!r}")
        binding = [item for item in kinds.get("ValidatingAdmissionPolicyBinding", [])
                   if item["spec"]["policyName"] == policy["metadata"]["name"]]
        check(len(binding) == 1 and binding[0]["spec"]["validationActions"] == ["Deny"],
              f"{where}: writes policy must be bound with Deny: {binding}")
    check_owner_policies(kinds, release, service_account, where)


def operator_prepare_workspace_script() -> str:
    """The script of the bot pod's init container, as the operator renders it (the raw
    string after "/bin/sh", "-c" in prepare_workspace_container): the writes policy
    admits no other command."""
    import pathlib
    import re
    source = (pathlib.Path(__file__).resolve().parents[1]
              / "operator/src/saintbot_controller/build/workload.rs").read_text()
    found = re.search(r'"/bin/sh", "-c",\s*(?://[^\n]*\n\s*)*r#"(.*?)"#', source, re.DOTALL)
    return found.group(1) if found else ""


def check_owner_policies(kinds: dict[str, list[dict]], release: str, service_account: str, where: str) -> None:
    """The policies binding the operator's writes to real SaintBots: -operator-owners
    (every SaintBot of the namespace as a parameter; none there: Allow, because the API
    server looks parameters up before it evaluates matchConditions) and
    -operator-owner-exists (the same, Deny, but only for creations of objects labelled
    as the operator's, which the writes policy requires of its creations)."""
    policies = {policy["metadata"]["name"].rsplit("-operator-", 1)[-1]: policy
                for policy in kinds.get("ValidatingAdmissionPolicy", [])
                if policy["metadata"]["name"].endswith(("-operator-owners", "-operator-owner-exists"))}
    check(set(policies) == {"owners", "owner-exists"}, f"{where}: owner policies {sorted(policies)}")
    bindings = {item["spec"]["policyName"]: item for item in kinds.get("ValidatingAdmissionPolicyBinding", [])}
    for suffix, policy in policies.items():
        name = policy["metadata"]["name"]
        check(policy["spec"]["failurePolicy"] == "Fail", f"{where}: {name} must fail closed")
        check(policy["spec"].get("paramKind") == {"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot"},
              f"{where}: {name} must read SaintBots as parameters")
        match = policy["spec"]["matchConditions"][0]["expression"]
        check(f"'system:serviceaccount:{release}:{service_account}'" in match,
              f"{where}: {name} must match exactly the operator's account: {match}")
        for validation in policy["spec"]["validations"]:
            check("saint operator write policy [" in validation.get("messageExpression", ""),
                  f"{where}: {name} rule without a named message: {validation['expression']}")
        binding = bindings.get(name, {}).get("spec", {})
        action = "Deny" if suffix == "owner-exists" else "Allow"
        check(binding.get("paramRef") == {"selector": {}, "parameterNotFoundAction": action},
              f"{where}: {name} must select every SaintBot of the namespace, {action} without one: {binding}")
        check(binding.get("validationActions") == ["Deny"], f"{where}: {name} must be bound with Deny")
        operations = {operation for rule in policy["spec"]["matchConstraints"]["resourceRules"]
                      for operation in rule["operations"]}
        if suffix == "owner-exists":
            # Deny for want of a parameter reaches every account: only the operator's creations.
            check(operations == {"CREATE"}, f"{where}: {name} must match creations only: {operations}")
            check(binding.get("matchResources", {}).get("objectSelector")
                  == {"matchLabels": {"app.kubernetes.io/managed-by": "saint-operator"}},
                  f"{where}: {name} must select only objects labelled as the operator's: {binding}")
        else:
            text = " ".join(validation["messageExpression"] for validation in policy["spec"]["validations"])
            for rule in ("[real-owner]", "[rendered-images]", "[bot-secrets-only]", "[bot-webhook-ingress]"):
                check(rule in text, f"{where}: {name} lacks the rule {rule}")
            variables = {variable["name"]: variable["expression"] for variable in policy["spec"]["variables"]}
            for variable, image in (("chartAgentImage", "saint-agent"), ("chartPorterImage", "saint-porter"),
                                    ("chartSandboxImage", "saint-sandbox")):
                check(json.loads(variables.get(variable, "null")) == f"ghcr.io/saint-work/{image}:0.1.0",
                      f"{where}: {name} {variable} is not the chart's image")


def check_bindings_policy(kinds: dict[str, list[dict]], release: str, service_account: str, where: str) -> None:
    """The admission policy fencing the RoleBindings the operator makes."""
    policies = [policy for policy in kinds.get("ValidatingAdmissionPolicy", [])
                if policy["metadata"]["name"].endswith("-operator-bindings")]
    check(len(policies) == 1, f"{where}: operator bindings policy missing")
    for policy in policies:
        check(policy["spec"]["failurePolicy"] == "Fail", f"{where}: bindings policy must fail closed")
        match = policy["spec"]["matchConditions"][0]["expression"]
        check(f"'system:serviceaccount:{release}:{service_account}'" in match,
              f"{where}: bindings policy must match exactly the operator's account: {match}")
        text = " ".join(validation["expression"] for validation in policy["spec"]["validations"])
        check("object.subjects[0].name == object.metadata.name" in text
              and "object.subjects[0].namespace == request.namespace" in text,
              f"{where}: bindings policy must hold subjects to the binding's own name and namespace: {text}")
        binding = [item for item in kinds.get("ValidatingAdmissionPolicyBinding", [])
                   if item["spec"]["policyName"] == policy["metadata"]["name"]]
        check(len(binding) == 1 and binding[0]["spec"]["validationActions"] == ["Deny"],
              f"{where}: bindings policy must be bound with Deny: {binding}")


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

    deployment = kinds["Deployment"][0]
    arguments = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    agent_role = check_agent_cluster_role(kinds, arguments, "default render")
    check(agent_role == "saint-agent", f"release saint: agent ClusterRole {agent_role!r} != the operator's default")
    operator_roles = [role for role in kinds["ClusterRole"] if role["metadata"]["name"] == "saint-operator"]
    check(len(operator_roles) == 1 and len(kinds["ClusterRole"]) == 2,
          f"default render: ClusterRoles {[role['metadata']['name'] for role in kinds['ClusterRole']]}"
          " != saint-agent, saint-operator")
    cluster_rules = operator_roles[0]["rules"] if operator_roles else []
    check_operator_rules(cluster_rules, "ClusterRole saint-operator", agent_role)
    for resource in ("configmaps", "persistentvolumeclaims", "serviceaccounts", "services"):
        for verb in ("create", "patch", "list", "watch"):
            check(granted(cluster_rules, "", resource, verb), f"ClusterRole: missing {resource} {verb} (apply, watch)")
        check(not granted(cluster_rules, "", resource, "delete"),
              f"ClusterRole: {resource} delete is never used (children are garbage-collected)")
        # Drift is restored with a PUT, for every child but the claim (the volume
        # controller's spec.volumeName is not drift).
        check(granted(cluster_rules, "", resource, "update") == (resource != "persistentvolumeclaims"),
              f"ClusterRole: {resource} update only for children restored on drift")
    check(granted(cluster_rules, "saint.work", "saintbots/status", "patch"), "ClusterRole: missing saintbots/status patch")
    check(not granted(cluster_rules, "saint.work", "saintbots", "patch"),
          "ClusterRole: the operator must not write SaintBot specs")
    bindings = [binding for binding in kinds["ClusterRoleBinding"]]
    check([binding["roleRef"]["name"] for binding in bindings] == ["saint-operator"],
          f"only the operator's ClusterRole is bound cluster-wide (the agent's per namespace): {bindings}")
    check_bindings_policy(kinds, "saint-system", "saint-operator", "default render")
    check_writes_policy(kinds, "saint-system", "saint-operator", "default render")

    lease_roles = [role for role in kinds["Role"] if role["metadata"]["name"].endswith("-leader-election")]
    check(len(lease_roles) == 1, "leader election Role missing")
    for role in lease_roles:
        check(role["metadata"]["namespace"] == "saint-system", "leader election Role must be in the release namespace")
        check(all(rule.get("resources") == ["leases"] for rule in role["rules"]),
              "leader election Role must only touch leases")

    check_operator_pod(deployment)
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
    # The bot-bounds policy: each SaintBot of the namespace as a parameter, Deny without
    # one, so its binding must select only sandbox-labelled Jobs (parameters are looked
    # up before matchConditions: otherwise every Job of every account would be refused
    # in a namespace without a SaintBot).
    bounds = [policy for policy in kinds["ValidatingAdmissionPolicy"]
              if policy["metadata"]["name"].endswith("-sandbox-bot-bounds")]
    check(len(bounds) == 1, "the sandbox bot-bounds policy is missing")
    for policy in bounds:
        text = " ".join(validation["messageExpression"] for validation in policy["spec"]["validations"])
        for rule in ("[runtime-class]", "[bot-resources]", "[bot-deadline]"):
            check(rule in text, f"the sandbox bot-bounds policy lacks the rule {rule}")
        bound = [item for item in kinds["ValidatingAdmissionPolicyBinding"]
                 if item["spec"]["policyName"] == policy["metadata"]["name"]]
        spec = bound[0]["spec"] if bound else {}
        check(spec.get("paramRef") == {"selector": {}, "parameterNotFoundAction": "Deny"},
              f"bot-bounds binding must read every SaintBot of the namespace, Deny without one: {spec}")
        check(spec.get("matchResources") == {"objectSelector": {"matchLabels": {"saint.work/sandbox": "true"}}},
              f"bot-bounds binding must select only sandbox-labelled Jobs: {spec}")


def check_single_namespace(helm: str, chart: str) -> None:
    kinds = by_kind(render(helm, chart, "--set", "watchNamespace=acme", "--set", "replicaCount=2"))
    arguments = kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    agent_role = check_agent_cluster_role(kinds, arguments, "watchNamespace set")
    # The agent's ClusterRole is the one cluster-scoped RBAC object: RoleBindings can
    # name only a Role of their own namespace or a ClusterRole. It is bound nowhere.
    check([role["metadata"]["name"] for role in kinds.get("ClusterRole", [])] == [agent_role]
          and "ClusterRoleBinding" not in kinds,
          "watchNamespace set: no cluster-wide RBAC expected beyond the agent ClusterRole")
    bot_roles = [role for role in kinds.get("Role", []) if role["metadata"]["namespace"] == "acme"]
    check(len(bot_roles) == 1, "watchNamespace set: one Role in that namespace expected")
    for role in bot_roles:
        check_operator_rules(role["rules"], "Role acme", agent_role)
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


def check_release_name(helm: str, chart: str) -> None:
    """Another release: the agent ClusterRole, the operator's flag, its bind grant and the
    bindings policy all name the same release-scoped role."""
    command = [helm, "template", "team", chart, "--namespace", "team-system"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"helm template team failed:\n{result.stderr}")
    kinds = by_kind([document for document in yaml.load_all(result.stdout, Loader=YAML_LOADER) if document])
    arguments = kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    agent_role = check_agent_cluster_role(kinds, arguments, "release team")
    check(agent_role == "team-saint-agent", f"release team: agent ClusterRole {agent_role!r}")
    operator_roles = [role for role in kinds["ClusterRole"] if role["metadata"]["name"] == "team-saint-operator"]
    for role in operator_roles:
        check_operator_rules(role["rules"], "ClusterRole team-saint-operator", agent_role)
    check_bindings_policy(kinds, "team-system", "team-saint-operator", "release team")
    check_writes_policy(kinds, "team-system", "team-saint-operator", "release team")

    kinds = by_kind(render(helm, chart, "--set", "rbac.create=false"))
    check("ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds,
          "rbac.create=false: no ClusterRole (not even the agent's) expected")


def check_sandbox_images(helm: str, chart: str) -> None:
    kinds = by_kind(render(helm, chart, "--set", "sandbox.image.tag=1.2.3",
                           "--set", "sandbox.extraAllowedImages[0]=registry.example/sbx@sha256:abc"))
    images = policy_allowed_images(kinds["ValidatingAdmissionPolicy"][0])
    check(images == ["ghcr.io/saint-work/saint-sandbox:1.2.3", "registry.example/sbx@sha256:abc"],
          f"allowed images not taken from values: {images}")


def check_ingress_annotations(helm: str, chart: str) -> None:
    """webhookIngress.allowedAnnotations reaches the operator, one flag per entry; an
    empty list passes none (bots may set no annotation); a malformed key is refused."""
    def flags(*arguments: str) -> list[str]:
        kinds = by_kind(render(helm, chart, *arguments))
        return [argument for argument in kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
                if argument.startswith("--allowed-ingress-annotation")]
    check(flags() == ["--allowed-ingress-annotation=cert-manager.io/cluster-issuer",
                      "--allowed-ingress-annotation=cert-manager.io/issuer"],
          f"default allowedAnnotations must reach the operator: {flags()}")
    check(flags("--set-json", "webhookIngress.allowedAnnotations=[]") == [],
          "an empty allowedAnnotations must pass no flag")
    check(flags("--set-json", 'webhookIngress.allowedAnnotations=["traefik.ingress.kubernetes.io/*"]')
          == ["--allowed-ingress-annotation=traefik.ingress.kubernetes.io/*"],
          "a prefix/* entry must reach the operator")
    error = render_fails(helm, chart, "--set-json", 'webhookIngress.allowedAnnotations=["a b"]')
    check("allowedAnnotations" in error, f"schema must refuse a malformed annotation key: {error!r}")


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


def operator_embedder_labels(chart: str) -> dict[str, str]:
    """The pod labels the operator's NetworkPolicies open egress to
    (operator/src/settings.rs, SHARED_EMBEDDER_POD_LABELS): the chart must set exactly them."""
    import pathlib
    import re
    settings = (pathlib.Path(chart).resolve().parents[1] / "operator/src/settings.rs").read_text()
    block = settings.split("SHARED_EMBEDDER_POD_LABELS", 1)[1].split("];", 1)[0]
    return dict(re.findall(r'\("([^"]+)", "([^"]+)"\)', block))


def check_shared_embedder(helm: str, chart: str) -> None:
    kinds = by_kind(render(helm, chart))
    check(len(kinds["Deployment"]) == 1, "embedder.enabled defaults to false: one Deployment expected")
    kinds = by_kind(render(helm, chart, "--set", "embedder.enabled=true", "--set", "embedder.port=9123"))
    deployments = {item["metadata"]["name"]: item for item in kinds["Deployment"]}
    check(set(deployments) == {"saint-operator", "saint-embedder"}, f"embedder on: Deployments {sorted(deployments)}")
    embedder = deployments.get("saint-embedder")
    services = {item["metadata"]["name"]: item for item in kinds["Service"]}
    service = services.get("saint-embedder")
    if embedder is None or service is None:
        check(False, "embedder on: no saint-embedder Deployment and Service")
        return
    pod = embedder["spec"]["template"]
    labels = pod["metadata"]["labels"]
    wanted = operator_embedder_labels(chart)
    check(len(wanted) == 2 and all(labels.get(key) == value for key, value in wanted.items()),
          f"embedder pods {labels} lack the labels the operator's NetworkPolicies select: {wanted}")
    check(all(labels.get(key) == value for key, value in service["spec"]["selector"].items()),
          "the embedder Service does not select its pods")
    check([port["port"] for port in service["spec"]["ports"]] == [9123], "embedder Service port")
    container = pod["spec"]["containers"][0]
    check(container["command"] == ["/usr/local/bin/saint-embedder"], f"embedder command {container['command']}")
    check(container["image"] == "ghcr.io/saint-work/saint-agent:0.1.0", "the embedder runs the agent image (it has the model)")
    check("--listen=0.0.0.0:9123" in container["args"] and "--weights=f32" in container["args"],
          f"embedder args {container['args']}")
    context = container.get("securityContext", {})
    check(context.get("readOnlyRootFilesystem") is True and context.get("capabilities", {}).get("drop") == ["ALL"]
          and pod["spec"]["securityContext"].get("runAsNonRoot") is True, "embedder pod must be restricted")
    check(pod["spec"].get("automountServiceAccountToken") is False, "the embedder needs no API token")
    arguments = deployments["saint-operator"]["spec"]["template"]["spec"]["containers"][0]["args"]
    check("--shared-embedder=saint-system/saint-embedder:9123" in arguments
          and "--shared-embedder-weights=f32" in arguments,
          f"the operator is not told about the shared embedder: {arguments}")
    policies = [item for item in kinds.get("NetworkPolicy", []) if item["metadata"]["name"] == "saint-embedder"]
    if len(policies) != 1:
        check(False, "embedder on: no saint-embedder NetworkPolicy")
    else:
        spec = policies[0]["spec"]
        check(all(spec["podSelector"]["matchLabels"].get(key) == value for key, value in wanted.items()),
              "the embedder NetworkPolicy does not select the embedder pods")
        peers = spec["ingress"][0]["from"]
        check(spec["egress"] == [] and len(spec["ingress"]) == 1
              and peers[0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "saint", "app.kubernetes.io/component": "agent"}
              and spec["ingress"][0]["ports"] == [{"port": 9123, "protocol": "TCP"}],
              f"the embedder must admit only bots' agent pods on its port and call nothing: {spec}")
    error = render_fails(helm, chart, "--set", "embedder.weights=q4")
    check("weights" in error, f"schema must refuse unknown embedder weights: {error!r}")


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
    checks = [check_default, check_single_namespace, check_release_name, check_explicit_api_server,
              check_sandbox_images, check_shared_embedder, check_ingress_annotations,
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
