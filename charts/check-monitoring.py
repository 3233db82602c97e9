#!/usr/bin/env python3
"""Checks the chart's monitoring objects (ServiceMonitor, PodMonitor,
PrometheusRule, Grafana dashboard ConfigMap) against the code they observe:

- every metric an alert or dashboard query reads is one the Rust code registers
  (read from each `Registry::with_prefix` and its `register` calls, with the
  suffixes prometheus-client adds), or Prometheus's own `up`;
- every label a query matches or groups by is a label of those metrics (their
  `EncodeLabelSet` struct) or a target label the monitors attach, and every
  value a matcher names is a string literal somewhere in the Rust code;
- alerts about bots keep `namespace` and `bot` and name them in their summary;
- promtool parses the rendered PrometheusRule's groups and every dashboard
  query (each as a throwaway recording rule), and runs the alert unit tests;
- the monitors select what the operator really labels bot pods with
  (operator/tests/golden, which the operator's own tests pin) and not sandbox
  pods, scrape ports the pods declare, and pass the Prometheus Operator CRD
  schemas;
- the dashboard's structure: panels with a data source, targets, unique ids,
  a grid that fits, variables that are defined; the panels
  docs/observability.md points to exist, read their metric and are named there.

`--self-test` also proves the checker refuses a rule that reads a metric the
code does not export, a label the metric does not carry, a matcher value the
code never writes, an annotation naming a label its aggregation drops, a
query promtool cannot parse, and a dashboard without a documented panel.

That the monitoring objects are off by default is checked by check-chart.py,
which pins every kind the default render makes."""

import argparse
import copy
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import jsonschema
import yaml

FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ALL_ON = ["--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true",
          "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.grafanaDashboard.enabled=true"]
# Labels Prometheus Operator puts on every target of a PodMonitor or
# ServiceMonitor, plus `bot`, which the chart's PodMonitor relabels in.
TARGET_LABELS = {"job", "namespace", "pod", "container", "endpoint", "instance", "service", "bot"}
# Labels whose values come from a bot's configuration (role and CLI names, the
# model) or from tools a deployment adds, not from a fixed set in the code.
CONFIGURED_LABELS = {"role", "cli", "model", "tool"}
# Series Prometheus makes itself for each target.
PROMETHEUS_SERIES = {"up": set()}
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                "group_right", "inf", "nan", "atan2"}
# Dashboard panels docs/observability.md sends readers to, each with a metric it
# must read: renaming or dropping one, or pointing it elsewhere, fails here.
DOCUMENTED_PANELS = {"Approvals": "saint_approvals_total", "Spend by person": "saint_llm_cost_usd_total"}
# Grafana's built-in variables, replaced by a value of the right kind before
# promtool parses a dashboard query.
GRAFANA_SUBSTITUTIONS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}

failures: list[str] = []


def check(condition: bool, message: str) -> None:
    if not condition:
        failures.append(message)


# ---------------------------------------------------------------------------
# What the code exports


def rust_sources(repository: pathlib.Path) -> list[pathlib.Path]:
    # Build output directories are pruned, not walked: a target/ can hold millions of files.
    skip = {"target", ".git", "node_modules"}
    sources = []
    for directory, subdirectories, files in os.walk(repository):
        subdirectories[:] = [name for name in subdirectories if name not in skip]
        sources.extend(pathlib.Path(directory, name) for name in files if name.endswith(".rs"))
    return sorted(sources)


def exported_metrics(sources: list[pathlib.Path]) -> dict[str, dict]:
    """Metric name -> {"labels": set, "file": path} for every metric registered on a
    prometheus-client Registry with a prefix. Fails on a registration it cannot read,
    so a new way of registering cannot hide a metric from the check."""
    metrics: dict[str, dict] = {}
    for path in sources:
        text = path.read_text(errors="replace")
        prefix = re.search(r'Registry::with_prefix\(\s*"([a-z_]+)"\s*\)', text)
        if not prefix:
            continue
        registrations = re.findall(r'\.register\(\s*"([a-z_]+)",\s*"[^"]*",\s*(\w+)\.clone\(\)', text, re.DOTALL)
        check(bool(registrations), f"{path}: has a prefixed Registry but no register(\"name\", \"help\", x.clone()) call")
        for name, variable in registrations:
            declared = re.search(
                rf"\b{variable}:\s*(?:Family<\s*(\w+),\s*(Counter|Gauge|Histogram)\b|(Counter|Gauge|Histogram)\b)", text)
            if not declared:
                failures.append(f"{path}: cannot tell the type of metric {name!r} (field {variable!r})")
                continue
            label_struct, family_kind, plain_kind = declared.groups()
            kind = family_kind or plain_kind
            labels: set[str] = set()
            if label_struct:
                body = re.search(rf"struct\s+{label_struct}\s*\{{([^}}]*)\}}", text)
                if not body:
                    failures.append(f"{path}: label struct {label_struct} of {name!r} not found")
                    continue
                labels = set(re.findall(r"(?:pub\s+)?(\w+)\s*:", re.sub(r"//[^\n]*", "", body.group(1))))
            base = f"{prefix.group(1)}_{name}"
            names = {"Counter": [f"{base}_total"], "Gauge": [base],
                     "Histogram": [f"{base}_bucket", f"{base}_sum", f"{base}_count"]}[kind]
            for exported in names:
                metrics[exported] = {"labels": labels | ({"le"} if exported.endswith("_bucket") else set()),
                                     "file": str(path)}
    return metrics


def cross_check_with_code_tests(metrics: dict[str, dict], sources: list[pathlib.Path]) -> None:
    """The metrics modules' own tests assert on exposition text; every metric name
    they expect must be one this reader found, or the reader is wrong."""
    expected = set()
    for path in {pathlib.Path(info["file"]) for info in metrics.values()}:
        for literal in re.findall(r'"((?:[^"\\]|\\.)*)"', path.read_text()):
            expected.update(re.findall(r"\b((?:saint|porter)_[a-z_]+)(?=[{ ])", literal))
    for name in sorted(expected):
        check(name in metrics, f"metric reader missed {name}, which the code's tests expect")
    check(len(expected) >= 3, f"metric reader cross-check found only {sorted(expected)} in the code's tests")


def string_literals(sources: list[pathlib.Path]) -> set[str]:
    literals: set[str] = set()
    for path in sources:
        literals.update(re.findall(r'"([A-Za-z0-9_.-]+)"', path.read_text(errors="replace")))
    return literals


# ---------------------------------------------------------------------------
# PromQL references


def references(expression: str) -> dict:
    """Metric names, label names (matchers and grouping) and matchers of a query.
    Enough PromQL for the queries this chart writes; promtool parses them fully."""
    matchers = []
    grouping: list[tuple[str, list[str]]] = []

    def selector(match: re.Match) -> str:
        for label, operator, value in re.findall(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"',
                                                 match.group(1)):
            matchers.append((label, operator, value))
        return " "

    text = re.sub(r"\{([^{}]*)\}", selector, expression)

    def group(match: re.Match) -> str:
        grouping.append((match.group(1), [label.strip() for label in match.group(2).split(",") if label.strip()]))
        return " "

    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", group, text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', " ", text)
    metrics = set()
    for match in re.finditer(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if name and not call and name.lower() not in PROMQL_WORDS:
            metrics.add(name)
    labels = {label for label, _, _ in matchers} | {label for _, labels in grouping for label in labels}
    return {"metrics": metrics, "labels": labels, "matchers": matchers, "grouping": grouping}


def check_query(where: str, expression: str, metrics: dict[str, dict], literals: set[str],
                jobs: set[str], endpoints: set[str]) -> dict:
    found = references(expression)
    known = {**{name: {"labels": labels} for name, labels in PROMETHEUS_SERIES.items()}, **metrics}
    check(bool(found["metrics"]), f"{where}: reads no metric: {expression}")
    available = set(TARGET_LABELS)
    for name in sorted(found["metrics"]):
        if name not in known:
            failures.append(f"{where}: metric {name} is not exported by the Rust code (nor by Prometheus)")
            continue
        available |= known[name]["labels"]
    for label in sorted(found["labels"] - available):
        failures.append(f"{where}: label {label!r} is on none of {sorted(found['metrics'])} nor a target label")
    for label, operator, value in found["matchers"]:
        if value.startswith("$"):
            continue  # a dashboard variable
        if label == "job":
            check(value in jobs, f"{where}: job={value!r} is not a job the chart's monitors make ({sorted(jobs)})")
        elif label == "endpoint":
            check(value in endpoints, f"{where}: endpoint={value!r} is not a port the monitors scrape ({sorted(endpoints)})")
        elif label not in TARGET_LABELS | CONFIGURED_LABELS:
            alternatives = value.split("|") if operator in ("=~", "!~") else [value]
            for alternative in alternatives:
                check(re.fullmatch(r"[A-Za-z0-9_.-]+", alternative) is not None,
                      f"{where}: matcher {label}{operator}{value!r}: only plain values or a|b|c alternations are checked")
                check(alternative in literals,
                      f"{where}: {label}{operator}{value!r}: the code never writes the value {alternative!r}")
    return found


# ---------------------------------------------------------------------------
# Rendering and tools


def render(helm: str, chart: str, *arguments: str) -> list[dict]:
    command = [helm, "template", "saint", chart, "--namespace", "saint-system", *arguments]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"helm template {' '.join(arguments)} failed:\n{result.stderr}")
    return [document for document in yaml.load_all(result.stdout, Loader=FAST_LOADER) if document]


def promtool(binary: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *arguments], capture_output=True, text=True, check=False)


def load_validate_examples(charts: pathlib.Path):
    spec = importlib.util.spec_from_file_location("validate_examples", charts / "validate-examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------
# Checks


def check_rules(groups: list[dict], context: dict, where: str) -> None:
    for group in groups:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            found = check_query(f"{where} {name}", rule["expr"], **context)
            if "alert" not in rule:
                continue
            annotations = rule.get("annotations", {})
            check(bool(annotations.get("summary")) and bool(annotations.get("description")),
                  f"{where} {name}: needs summary and description annotations")
            check(rule.get("labels", {}).get("severity") in ("critical", "warning", "info"),
                  f"{where} {name}: severity must be critical, warning or info")
            used = set(re.findall(r"\$labels\.(\w+)", " ".join(annotations.values())))
            # Aggregations keep only their `by` labels; an annotation naming any
            # other label would print an empty string.
            kept = [labels for keyword, labels in found["grouping"] if keyword == "by"]
            for label in sorted(used):
                check(all(label in labels for labels in kept),
                      f"{where} {name}: annotation uses $labels.{label}, which its aggregation drops")
            about_bots = not any(metric.startswith("saint_operator_") for metric in found["metrics"]) and \
                ("job", "=", "saint-operator") not in found["matchers"]
            if about_bots:
                check({"bot", "namespace"} <= used and "$labels.bot" in annotations.get("summary", ""),
                      f"{where} {name}: a bot alert must name $labels.namespace and $labels.bot (in its summary)")


def rules_file(groups: list[dict], directory: pathlib.Path, name: str) -> pathlib.Path:
    path = directory / name
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def check_promtool_rules(binary: str, path: pathlib.Path, what: str) -> None:
    result = promtool(binary, "check", "rules", str(path))
    check(result.returncode == 0, f"promtool check rules ({what}) failed:\n{result.stdout}{result.stderr}")


DASHBOARD_SCHEMA = {
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "templating"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 30},
        "templating": {"type": "object", "required": ["list"], "properties": {"list": {"type": "array", "items": {
            "type": "object", "required": ["name", "type"]}}}},
        "panels": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["id", "type", "title", "gridPos"],
            "properties": {
                "id": {"type": "integer"},
                "gridPos": {"type": "object", "required": ["h", "w", "x", "y"], "properties": {
                    "w": {"type": "integer", "minimum": 1, "maximum": 24},
                    "x": {"type": "integer", "minimum": 0, "maximum": 23}}},
            },
            "if": {"properties": {"type": {"not": {"const": "row"}}}},
            "then": {
                "required": ["datasource", "targets"],
                "properties": {
                    "datasource": {"type": "object", "required": ["type", "uid"],
                                   "properties": {"type": {"const": "prometheus"}}},
                    "targets": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "required": ["refId", "expr", "datasource"],
                        "properties": {"expr": {"type": "string", "minLength": 1}}}},
                },
            },
        }},
    },
}


def check_dashboard(dashboard: dict, context: dict, binary: str, directory: pathlib.Path) -> int:
    errors = sorted(jsonschema.Draft7Validator(DASHBOARD_SCHEMA).iter_errors(dashboard), key=str)
    for error in errors:
        failures.append(f"dashboard: {'/'.join(map(str, error.absolute_path))}: {error.message}")
    if errors:
        return 0
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    ids = [panel["id"] for panel in dashboard["panels"]]
    check(len(ids) == len(set(ids)), f"dashboard: panel ids repeat: {ids}")
    cells: dict[tuple[int, int], str] = {}
    rules = []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        check(grid["x"] + grid["w"] <= 24, f"dashboard: panel {panel['title']!r} is wider than the grid")
        for row in range(grid["y"], grid["y"] + grid["h"]):
            for column in range(grid["x"], grid["x"] + grid["w"]):
                other = cells.setdefault((row, column), panel["title"])
                check(other == panel["title"], f"dashboard: panels {other!r} and {panel['title']!r} overlap")
        if panel["type"] == "row":
            continue
        text = json.dumps(panel)
        for variable in re.findall(r"\$\{?([A-Za-z]\w*)", text):
            check(variable in variables, f"dashboard: panel {panel['title']!r} uses undefined variable ${variable}")
        check(panel["datasource"]["uid"] == "${datasource}",
              f"dashboard: panel {panel['title']!r} must use the $datasource variable")
        refs = [target["refId"] for target in panel["targets"]]
        check(len(refs) == len(set(refs)), f"dashboard: panel {panel['title']!r} repeats a refId")
        for target in panel["targets"]:
            check(target["datasource"] == panel["datasource"],
                  f"dashboard: panel {panel['title']!r} target {target['refId']} uses another data source")
            check_query(f"dashboard panel {panel['title']!r}", target["expr"], **context)
            expression = target["expr"]
            for variable, value in GRAFANA_SUBSTITUTIONS.items():
                expression = expression.replace(variable, value)
            expression = re.sub(r"\$\{?[A-Za-z]\w*\}?", ".*", expression)
            rules.append({"record": f"dashboard:panel_{panel['id']}:{target['refId']}", "expr": expression})
    check_promtool_rules(binary, rules_file([{"name": "dashboard", "rules": rules}], directory, "dashboard.rules.yaml"),
                         "dashboard queries")
    return len(rules)


def check_documented_panels(dashboard: dict, documentation: str) -> None:
    """Each panel of DOCUMENTED_PANELS exists, reads its metric, and the page names it."""
    panels = {panel["title"]: panel for panel in dashboard.get("panels", [])}
    for title, metric in DOCUMENTED_PANELS.items():
        panel = panels.get(title)
        if panel is None:
            failures.append(f"dashboard: no panel {title!r}, which docs/observability.md points to")
            continue
        read = set().union(*(references(target.get("expr", ""))["metrics"] for target in panel.get("targets", [])))
        check(metric in read, f"dashboard: panel {title!r} must read {metric} (it reads {sorted(read)})")
        check(f'"{title}"' in documentation or f"**{title}**" in documentation,
              f"docs/observability.md does not name the dashboard panel {title!r}")


def check_monitors(kinds: dict[str, list[dict]], golden: pathlib.Path) -> tuple[set[str], set[str]]:
    """Returns the job names and endpoint names the monitors produce."""
    deployment = yaml.safe_load((golden / "deployment.yaml").read_text())
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    container_ports = {port["name"]: port["containerPort"] for container in deployment["spec"]["template"]["spec"]["containers"]
                       for port in container.get("ports", [])}
    bot_config = json.loads(yaml.safe_load((golden / "config-map.yaml").read_text())["data"]["bot-config.json"])
    sandbox_labels = bot_config["sandbox"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]

    pod_monitor = kinds["PodMonitor"][0]["spec"]
    selector = pod_monitor["selector"]["matchLabels"]
    check(all(pod_labels.get(key) == value for key, value in selector.items()),
          f"PodMonitor selector {selector} does not match the bot pod labels {pod_labels}")
    check(not all(sandbox_labels.get(key) == value for key, value in selector.items()),
          f"PodMonitor selector {selector} also selects sandbox pods {sandbox_labels}")
    jobs = {pod_labels[pod_monitor["jobLabel"]]}
    endpoints = set()
    for endpoint in pod_monitor["podMetricsEndpoints"]:
        check(endpoint["port"] in container_ports,
              f"PodMonitor scrapes port {endpoint['port']!r}, which bot pods do not declare ({sorted(container_ports)})")
        endpoints.add(endpoint["port"])
        for relabel in endpoint.get("relabelings", []):
            for source in relabel.get("sourceLabels", []):
                if source.startswith("__meta_kubernetes_pod_label_"):
                    wanted = source.removeprefix("__meta_kubernetes_pod_label_")
                    check(any(re.sub(r"[^A-Za-z0-9_]", "_", key) == wanted for key in pod_labels),
                          f"PodMonitor relabels from pod label {wanted!r}, which bot pods do not carry")
    network_policy = yaml.safe_load((golden / "agent-network-policy.yaml").read_text())
    open_ports = {port["port"] for rule in network_policy["spec"].get("ingress", []) for port in rule.get("ports", [])}
    for name in sorted(endpoints):
        check(container_ports.get(name) in open_ports,
              f"PodMonitor scrapes {name} ({container_ports.get(name)}), to which the bot NetworkPolicy "
              "admits no ingress: Prometheus could not scrape it where NetworkPolicies are enforced")

    service_monitor = kinds["ServiceMonitor"][0]["spec"]
    services = [service for service in kinds["Service"] if service["metadata"]["name"].endswith("-metrics")]
    check(len(services) == 1, "ServiceMonitor needs the operator metrics Service")
    service = services[0]
    check(all(service["metadata"]["labels"].get(key) == value
              for key, value in service_monitor["selector"]["matchLabels"].items()),
          "ServiceMonitor selector does not match the metrics Service's labels")
    service_ports = {port["name"] for port in service["spec"]["ports"]}
    for endpoint in service_monitor["endpoints"]:
        check(endpoint["port"] in service_ports, f"ServiceMonitor port {endpoint['port']!r} not on the metrics Service")
        endpoints.add(endpoint["port"])
    jobs.add(service["metadata"]["labels"][service_monitor["jobLabel"]])
    return jobs, endpoints


class CrdLoader(FAST_LOADER):
    """PyYAML reads a bare `=` (an enum value in these CRDs) as the YAML 1.1
    "value" tag it cannot construct; YAML 1.2 and the API server read a string."""


CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))

MONITORING_CRD_FILES = {"PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
                        "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
                        "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml"}


def check_crd_schemas(objects: list[dict], crds: pathlib.Path, charts: pathlib.Path) -> int:
    strict = load_validate_examples(charts).strict
    checked = 0
    for item in objects:
        if item["apiVersion"] != "monitoring.coreos.com/v1":
            continue
        path = crds / MONITORING_CRD_FILES.get(item["kind"], "missing")
        if not path.is_file():
            failures.append(f"no CRD for {item['kind']} in {crds}")
            continue
        crd = yaml.load(path.read_text(), Loader=CrdLoader)
        versions = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
        schema = strict(versions[0]["schema"]["openAPIV3Schema"])
        for error in jsonschema.Draft7Validator(schema).iter_errors(item):
            failures.append(f"{item['kind']} {item['metadata']['name']}: {'/'.join(map(str, error.absolute_path))}: "
                            f"{error.message}")
        checked += 1
    return checked


def check_values(helm: str, chart: str) -> None:
    """Off by default is pinned by check-chart.py, which lists every kind the
    default render makes."""
    result = subprocess.run([helm, "template", "saint", chart, "--set", "monitoring.serviceMonitor.enabled=true",
                             "--set", "metrics.service.enabled=false"], capture_output=True, text=True, check=False)
    check(result.returncode != 0 and "metrics.service.enabled" in result.stderr,
          "a ServiceMonitor without the metrics Service must be refused")
    pod_monitors = render(helm, chart, "--show-only", "templates/podmonitor.yaml", *ALL_ON,
                          "--set", "watchNamespace=acme", "--set", "monitoring.podMonitor.porter=false")
    check(pod_monitors[0]["spec"]["namespaceSelector"] == {"matchNames": ["acme"]},
          "watchNamespace must narrow the PodMonitor to that namespace")
    check([endpoint["port"] for endpoint in pod_monitors[0]["spec"]["podMetricsEndpoints"]] == ["metrics"],
          "porter=false must leave only the agent endpoint")


# ---------------------------------------------------------------------------


def check_rule_groups(groups: list[dict], context: dict, options, directory: pathlib.Path,
                      run_unit_tests: bool) -> int:
    check_rules(groups, context, "rule")
    rendered_rules = rules_file(groups, directory, "saint.rules.yaml")
    check_promtool_rules(options.promtool, rendered_rules, "rendered PrometheusRule")
    if run_unit_tests and options.rule_tests:
        tests = yaml.safe_load(pathlib.Path(options.rule_tests).read_text())
        # The tests' series must look like what the monitors collect, or they
        # prove the rules against data that never occurs.
        for test in tests["tests"]:
            for series in test.get("input_series", []):
                check_query(f"rule test {test.get('name')!r} series", series["series"], **context)
        tests["rule_files"] = [str(rendered_rules)]
        test_file = directory / "saint.rules.test.yaml"
        test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
        result = promtool(options.promtool, "test", "rules", str(test_file))
        check(result.returncode == 0, f"promtool test rules failed:\n{result.stdout}{result.stderr}")
    return sum(1 for group in groups for rule in group["rules"] if "alert" in rule)


def run_checks(options, metrics, literals, directory: pathlib.Path) -> dict:
    objects = render(options.helm, options.chart, *ALL_ON)
    kinds: dict[str, list[dict]] = {}
    for item in objects:
        kinds.setdefault(item["kind"], []).append(item)
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        check(len(kinds.get(kind, [])) == 1, f"all monitoring on: expected one {kind}, got {len(kinds.get(kind, []))}")
    jobs, endpoints = check_monitors(kinds, pathlib.Path(options.golden))
    context = {"metrics": metrics, "literals": literals, "jobs": jobs, "endpoints": endpoints}
    alerts = check_rule_groups(kinds["PrometheusRule"][0]["spec"]["groups"], context, options, directory, True)

    dashboards = [item for item in kinds.get("ConfigMap", []) if item["metadata"]["name"].endswith("-dashboard")]
    check(len(dashboards) == 1 and dashboards[0]["metadata"]["labels"].get("grafana_dashboard") == "1",
          "dashboard ConfigMap must carry the Grafana sidecar label grafana_dashboard: \"1\"")
    queries = 0
    for name, text in dashboards[0]["data"].items() if dashboards else []:
        try:
            dashboard = json.loads(text)
        except json.JSONDecodeError as error:
            failures.append(f"dashboard {name}: not JSON: {error}")
            continue
        queries += check_dashboard(dashboard, context, options.promtool, directory)
        check_documented_panels(dashboard, (pathlib.Path(options.repository) / "docs/observability.md").read_text())
    crds = check_crd_schemas(objects, pathlib.Path(options.monitoring_crds), pathlib.Path(__file__).parent)
    return {"alerts": alerts, "queries": queries, "crds": crds, "context": context}


def self_test(options, context: dict) -> None:
    """The checker must refuse each of these rules, with the reason named."""
    base = {"labels": {"severity": "warning"},
            "annotations": {"summary": "{{ $labels.namespace }}/{{ $labels.bot }}", "description": "d"}}
    cases = [
        ("a metric the code does not export", "sum by (namespace, bot) (rate(saint_messages_total[5m])) > 0",
         "saint_messages_total is not exported"),
        ("a label the metric does not carry", "sum by (namespace, bot, channel) (rate(saint_llm_cost_usd_total[5m])) > 0",
         "label 'channel'"),
        ("a matcher value the code never writes", 'sum by (namespace, bot) (rate(saint_turns_total{outcome="exploded"}[5m])) > 0',
         "never writes the value 'exploded'"),
        ("a query promtool cannot parse", "sum by (namespace, bot) (rate(saint_turns_total[5m]) > 0",
         "promtool check rules"),
        ("an annotation naming a label the aggregation drops",
         "sum by (namespace) (rate(saint_turns_total[5m])) > 0", "aggregation drops"),
    ]
    global failures
    # A dashboard without a documented panel.
    saved, failures = failures, []
    check_documented_panels({"panels": []}, "")
    caught = [failure for failure in failures if "no panel 'Approvals'" in failure]
    failures = saved
    check(bool(caught), "self-test: the checker accepted a dashboard without the documented panel 'Approvals'")
    for what, expression, expected in cases:
        saved, failures = failures, []
        bad = [{"name": "bad", "rules": [{"alert": "Bad", "expr": expression, **copy.deepcopy(base)}]}]
        if "promtool" in expected:
            # The reader above is not a parser; only promtool is asked about syntax.
            with tempfile.TemporaryDirectory() as directory:
                check_promtool_rules(options.promtool, rules_file(bad, pathlib.Path(directory), "bad.rules.yaml"),
                                     "self-test")
        else:
            check_rules(bad, context, "rule")
        caught = [failure for failure in failures if expected in failure]
        failures = saved
        check(bool(caught), f"self-test: the checker accepted a rule with {what}: {expression}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--helm", required=True)
    parser.add_argument("--promtool", required=True)
    parser.add_argument("--chart", required=True)
    parser.add_argument("--repository", required=True, help="where the Rust sources are")
    parser.add_argument("--golden", required=True, help="operator/tests/golden")
    parser.add_argument("--monitoring-crds", required=True, help="the Prometheus Operator CRD YAML directory")
    parser.add_argument("--rule-tests", help="promtool rule unit tests (rule_files is replaced by the rendered rules)")
    parser.add_argument("--self-test", action="store_true")
    options = parser.parse_args()

    sources = rust_sources(pathlib.Path(options.repository))
    metrics = exported_metrics(sources)
    cross_check_with_code_tests(metrics, sources)
    literals = string_literals(sources)
    check_values(options.helm, options.chart)
    with tempfile.TemporaryDirectory() as directory:
        counts = run_checks(options, metrics, literals, pathlib.Path(directory))
    if options.self_test:
        self_test(options, counts["context"])
    if failures:
        for failure in failures:
            print(f"FAIL: {failure}", file=sys.stderr)
        print(f"check-monitoring: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"check-monitoring: {len(metrics)} exported metrics read from the code; {counts['alerts']} alerts and "
          f"{counts['queries']} dashboard queries use only those; promtool parsed both; "
          f"{counts['crds']} monitoring objects valid against the Prometheus Operator CRDs"
          + ("; self-test: 5 bad rules and a dashboard without a documented panel refused"
             if options.self_test else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
