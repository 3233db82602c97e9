#!/usr/bin/env python3
"""Validates every Saint custom resource in the examples directory against the
openAPIV3Schema of the generated CRDs in crds/, the way the API server's
schema check would, and stricter about unknown fields: an object schema that
lists properties and does not preserve unknown fields rejects any other key
(kubectl's strict field validation does the same; the API server would
otherwise prune a misspelt field silently).

CEL rules (x-kubernetes-validations) are not evaluated here; the end-to-end
suite applies the examples to a real API server, which does.

Also checks that every Secret, ConfigMap (and key) a custom resource names
exists among the examples, and that Roles and Contacts it names do (approvers
included). Reads only the two directories; writes nothing."""

import argparse
import copy
import pathlib
import sys

import jsonschema
import yaml

# libyaml's loader when PyYAML has it (Debian's does): the same documents, parsed
# several times faster than the pure-Python SafeLoader.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def strict(schema: dict) -> dict:
    """Copies an OpenAPI v3 schema into JSON Schema: unknown fields rejected,
    `nullable` honoured, Kubernetes extensions kept as annotations."""
    schema = copy.deepcopy(schema)

    def walk(node: dict) -> None:
        if not isinstance(node, dict):
            return
        if node.get("nullable") and "type" in node:
            node["type"] = [node["type"], "null"] if isinstance(node["type"], str) else [*node["type"], "null"]
        if node.get("x-kubernetes-int-or-string"):
            node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for key in ("properties", "patternProperties"):
            for child in node.get(key, {}).values():
                walk(child)
        for key in ("items", "additionalProperties", "not"):
            if isinstance(node.get(key), dict):
                walk(node[key])
        for key in ("allOf", "anyOf", "oneOf"):
            for child in node.get(key, []):
                walk(child)

    walk(schema)
    # apiVersion, kind and metadata are the API server's own business: a CRD
    # schema may leave them out, and the server validates metadata itself.
    properties = schema.setdefault("properties", {})
    properties.setdefault("apiVersion", {"type": "string"})
    properties.setdefault("kind", {"type": "string"})
    properties["metadata"] = {"type": "object"}
    return schema


def load_crd_schemas(crd_directory: pathlib.Path) -> dict[tuple[str, str], dict]:
    schemas = {}
    for path in sorted(crd_directory.glob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=YAML_LOADER):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group = crd["spec"]["group"]
            kind = crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                api_version = f"{group}/{version['name']}"
                schemas[(api_version, kind)] = strict(version["schema"]["openAPIV3Schema"])
    return schemas


def secret_references(node, path: str = "") -> list[tuple[str, str, str]]:
    """(path, Secret name, key) for every Secret a spec references: objects of
    exactly {name, key} (the CRDs' SecretKeyReference)."""
    found = []
    if isinstance(node, dict):
        if set(node) == {"name", "key"}:
            return [(path, node["name"], node["key"])]
        for key, value in node.items():
            child_path = f"{path}.{key}"
            if key == "configMapRef":
                continue  # {name, key} of a ConfigMap, checked by config_map_references
            found.extend(secret_references(value, child_path))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(secret_references(value, f"{path}[{index}]"))
    return found


def config_map_references(spec: dict) -> list[tuple[str, str, str]]:
    """(path, ConfigMap name, key) for every ConfigMap a SaintBot spec references: its
    persona ConfigMap (any key) and each skill's configMapRef (key default SKILL.md)."""
    found = []
    persona = spec.get("persona", {}).get("configMapName")
    if persona:
        found.append(("spec.persona.configMapName", persona, None))
    for index, skill in enumerate(spec.get("skills", [])):
        reference = skill.get("configMapRef", {})
        found.append((f"spec.skills[{index}].configMapRef", reference.get("name"), reference.get("key", "SKILL.md")))
    return found


def self_test(schemas: dict, custom_resources: list[tuple[str, dict]]) -> list[str]:
    """Proves this check is not vacuous: a misspelt field and a value outside an
    enum, planted in a copy of each kind's first example, must be refused."""
    problems = []
    seen = set()
    for name, document in custom_resources:
        if document["kind"] in seen:
            continue
        seen.add(document["kind"])
        validator = jsonschema.Draft7Validator(schemas[(document["apiVersion"], document["kind"])])
        misspelt = copy.deepcopy(document)
        misspelt["spec"]["displayNme"] = "typo"
        if validator.is_valid(misspelt):
            problems.append(f"self-test: {name} with a misspelt spec field passed validation")
        wrong_type = copy.deepcopy(document)
        wrong_type["spec"] = "not an object"
        if validator.is_valid(wrong_type):
            problems.append(f"self-test: {name} with a string spec passed validation")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crds", required=True, type=pathlib.Path)
    parser.add_argument("--examples", required=True, type=pathlib.Path)
    options = parser.parse_args()

    schemas = load_crd_schemas(options.crds)
    if not schemas:
        print(f"validate-examples: no CRDs found in {options.crds}", file=sys.stderr)
        return 1

    failures: list[str] = []
    custom_resources: list[tuple[str, dict]] = []
    secrets: dict[str, set[str]] = {}
    config_maps: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for path in sorted(options.examples.glob("*.yaml")):
        for document in yaml.load_all(path.read_text(), Loader=YAML_LOADER):
            if not document:
                continue
            name = f"{path.name}: {document.get('kind')}/{document.get('metadata', {}).get('name')}"
            if document.get("kind") == "Secret" and document.get("apiVersion") == "v1":
                keys = set(document.get("stringData", {})) | set(document.get("data", {}))
                secrets[document["metadata"]["name"]] = keys
                continue
            if document.get("kind") == "ConfigMap" and document.get("apiVersion") == "v1":
                keys = set(document.get("data", {})) | set(document.get("binaryData", {}))
                config_maps[document["metadata"]["name"]] = keys
                continue
            schema = schemas.get((document.get("apiVersion"), document.get("kind")))
            if schema is None:
                failures.append(f"{name}: no CRD for {document.get('apiVersion')} {document.get('kind')}")
                continue
            validator = jsonschema.Draft7Validator(schema)
            for error in sorted(validator.iter_errors(document), key=lambda error: list(error.path)):
                location = ".".join(str(part) for part in error.path) or "(root)"
                failures.append(f"{name}: {location}: {error.message}")
            custom_resources.append((name, document))
            counts[document["kind"]] = counts.get(document["kind"], 0) + 1

    for name, document in custom_resources:
        for path, secret, key in secret_references(document.get("spec", {}), "spec"):
            if secret not in secrets:
                failures.append(f"{name}: {path} names Secret {secret!r}, which no example defines")
            elif key not in secrets[secret]:
                failures.append(f"{name}: {path} names key {key!r}, which Secret {secret!r} lacks")

    # ConfigMaps the operator would report as missing (persona: retried; skills:
    # ConfigMapNotFound).
    for name, document in custom_resources:
        if document["kind"] != "SaintBot":
            continue
        for path, config_map, key in config_map_references(document.get("spec", {})):
            if config_map not in config_maps:
                failures.append(f"{name}: {path} names ConfigMap {config_map!r}, which no example defines")
            elif key is not None and key not in config_maps[config_map]:
                failures.append(f"{name}: {path} names key {key!r}, which ConfigMap {config_map!r} lacks")

    # Cross-references the operator would report as RoleNotFound (and heartbeat
    # notify entries naming no Contact, which it refuses).
    contact_names = {document["metadata"]["name"] for _, document in custom_resources if document["kind"] == "Contact"}
    role_names = {document["metadata"]["name"] for _, document in custom_resources if document["kind"] == "Role"}
    for name, document in custom_resources:
        spec = document.get("spec", {})
        wanted = []
        if document["kind"] == "Contact":
            wanted.append(("spec.role", spec.get("role")))
        if document["kind"] == "SaintBot":
            wanted.append(("spec.defaultRole", spec.get("defaultRole", "external")))
            heartbeat = spec.get("heartbeat")
            if heartbeat:
                wanted.append(("spec.heartbeat.role", heartbeat.get("role")))
                for contact in heartbeat.get("notify", []):
                    if contact not in contact_names:
                        failures.append(f"{name}: spec.heartbeat.notify names Contact {contact!r}, which no example defines")
        if document["kind"] == "Role":
            wanted.extend(("spec.sessionsVisibleRoles", role) for role in spec.get("sessionsVisibleRoles", []))
            # Approvers the bot lacks leave the Role out of it (the operator says so).
            for index, rule in enumerate(spec.get("approvals", [])):
                approvers = rule.get("approvers", {})
                wanted.extend((f"spec.approvals[{index}].approvers.roles", role) for role in approvers.get("roles", []))
                for contact in approvers.get("contacts", []):
                    if contact not in contact_names:
                        failures.append(f"{name}: spec.approvals[{index}].approvers.contacts names Contact "
                                        f"{contact!r}, which no example defines")
        for path, role in wanted:
            if role not in role_names:
                failures.append(f"{name}: {path} names Role {role!r}, which no example defines")

    for kind in ("SaintBot", "Contact", "Role"):
        if counts.get(kind, 0) == 0:
            failures.append(f"examples contain no {kind}")

    failures.extend(self_test(schemas, custom_resources))

    if failures:
        for failure in failures:
            print(f"FAIL: {failure}", file=sys.stderr)
        print(f"validate-examples: {len(failures)} problem(s)", file=sys.stderr)
        return 1
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
    print(f"validate-examples: {summary} valid against the CRD schemas; {len(secrets)} Secrets and "
          f"{len(config_maps)} ConfigMaps cover every reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
