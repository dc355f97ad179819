"""`helm install`, `helm upgrade` and `helm test` replayed in Helm's order over the rendered
chart (tests/deploy/helm_order.py): every pod starts with the Secrets, ConfigMaps and service
account it names already there, or owned by the user. Covered: the chart's defaults with the
docs' PostgreSQL store, every ci/*-values.yaml, every values block the docs show, the example
app chart (sidecar mode), each as a first install and as an upgrade from the chart at
PREVIOUS_CHART; and helm_order itself on small hand-written manifests."""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import tarfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml

from tests.deploy import helm_order
from tests.deploy.chart_support import CHART, EXAMPLE, KUBE_VERSIONS, REPO, Manifest, render
from tests.deploy.helm_order import Finding, Phase, Ref, Why

# The chart whose pre-install migrate hook needs the Secrets the release creates afterwards:
# upgrades start from it, and the order check must catch it.
PREVIOUS_CHART = "cf3e65f"
CHART_DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
VALUES_SCHEMA = json.loads((CHART / "values.schema.json").read_text())
# The example app chart's key for webhook-sidecar's values (its dependency's alias).
ALIAS = next(d.get("alias") or d["name"] for d in
             yaml.safe_load((EXAMPLE / "Chart.yaml").read_text())["dependencies"]
             if d["name"] == "webhook-sidecar")
EXAMPLE_VALUES: dict[str, Any] = yaml.safe_load((EXAMPLE / "values.yaml").read_text())
DOCS = [REPO / "README.md", CHART / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Put on the line before a YAML block, it marks the block as chart values whatever its keys.
MARKER = "<!-- chart-values -->"


# --- who owns what -----------------------------------------------------------------------

# The values (webhook-sidecar's values.yaml) that name a Secret the user creates.
SECRET_NAME_VALUES = ("store.existingSecret.name", "adminToken.existingSecret.name",
                      "forwardSigning.existingSecret.name", "tracing.headersSecret.name")


def dig(values: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        values = values.get(key) or {} if isinstance(values, dict) else {}
    return values


def user_owned(values: dict[str, Any]) -> set[Ref]:
    """The objects webhook-sidecar's ``values`` name that the user creates, not the chart:
    existing Secrets, provider secrets, pull secrets, the service account, and whatever
    ``extraEnv`` and ``extraVolumes`` refer to."""
    owned = {Ref("Secret", name) for path in SECRET_NAME_VALUES if (name := dig(values, path))}
    for provider in (values.get("providers") or {}).values():
        for secret in provider.get("secrets") or []:
            if isinstance(secret, dict) and "secretKeyRef" in secret:
                owned.add(Ref("Secret", secret["secretKeyRef"]["name"]))
    if values.get("serviceAccountName"):
        owned.add(Ref("ServiceAccount", values["serviceAccountName"]))
    extra = {"containers": [{"env": values.get("extraEnv") or []}],
             "imagePullSecrets": values.get("imagePullSecrets") or [],
             "volumes": values.get("extraVolumes") or []}
    return owned | {r.ref for r in helm_order.pod_refs(extra)}


# --- the values to check -----------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    id: str
    values: dict[str, Any]
    example: bool = False       # rendered through the example app chart (sidecar mode)
    kube_version: str | None = None

    def owned(self) -> set[Ref]:
        if not self.example:
            return user_owned(self.values)
        merged = merge(EXAMPLE_VALUES, self.values)  # what Helm gives the dependency
        return user_owned(merged[ALIAS])


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of user values over a chart's: maps merge, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def yaml_blocks(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, text, marked) of each ```yaml block, list-item indentation removed."""
    text = path.read_text(encoding="utf-8")
    for match in re.finditer(r"^(?P<indent>[ \t]*)```ya?ml[^\n]*\n(?P<body>.*?)^(?P=indent)```",
                             text, re.M | re.S):
        line = text.count("\n", 0, match.start()) + 1
        marked = text[:match.start()].rstrip().endswith(MARKER)
        yield line, textwrap.dedent(match["body"]), marked


def is_chart_values(block: Any) -> bool:
    """Values for this chart (or for an app chart depending on it, under ALIAS): a mapping of
    values.yaml keys that picks a mode. Config-file snippets share `providers` and `store`
    but never have a top-level `mode`."""
    if isinstance(block, dict) and set(block) == {ALIAS}:
        block = block[ALIAS]
    return (isinstance(block, dict) and "mode" in block
            and set(block) <= set(CHART_DEFAULTS) | {"global"})


def doc_values(pages: list[Path] = DOCS) -> list[Case]:
    """The values blocks of ``pages``, each named <page>:<line>."""
    cases = []
    for path in pages:
        for line, text, marked in yaml_blocks(path):
            try:
                block = yaml.safe_load(text)
            except yaml.YAMLError:  # a template or a fragment, not values
                if marked:
                    raise
                continue
            if marked or is_chart_values(block):
                example = set(block) == {ALIAS}
                page = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
                cases.append(Case(f"{page}:{line}", block, example=example))
    return cases


def docs_postgres_values() -> dict[str, Any]:
    """The chart's defaults (sidecar mode) with the store and providers of the first doc
    block that uses PostgreSQL (alone, sidecar mode renders only the config, the generated
    Secrets and the migrate hook)."""
    for case in doc_values():
        values = case.values[ALIAS] if case.example else case.values
        if dig(values, "store.existingSecret.name"):
            return {"store": values["store"], "providers": values["providers"]}
    raise AssertionError("no doc shows values with a PostgreSQL store")


CASES = [
    Case("defaults-postgres", docs_postgres_values()),
    *[Case(f"ci/{p.name}", yaml.safe_load(p.read_text()))
      for p in sorted((CHART / "ci").glob("*-values.yaml"))],
    *doc_values(),
    Case("example", {}, example=True),
    Case("example-native", {ALIAS: {"sidecar": {"native": True}}}, example=True,
         kube_version=KUBE_VERSIONS[0]),
]


# --- rendering (cached per chart and values) ---------------------------------------------

@dataclass(frozen=True)
class Charts:
    chart: Path
    example: Path

    def values_for(self, case: Case) -> dict[str, Any]:
        """The case's values without the keys this chart's schema does not know (values that
        are newer than an old chart): what a release of this chart was installed with."""
        schema = json.loads((self.chart / "values.schema.json").read_text())
        if case.example:
            return {**case.values, ALIAS: known_to(schema, case.values.get(ALIAS) or {})}
        values: dict[str, Any] = known_to(schema, case.values)
        return values


def known_to(schema: dict[str, Any], values: Any, root: dict[str, Any] | None = None) -> Any:
    """``values`` without the keys a closed object of ``schema`` (additionalProperties: false)
    does not list, at any depth reached through ``properties``, ``additionalProperties`` and
    local ``$ref``s."""
    root = schema if root is None else root
    while "$ref" in schema:  # "#/definitions/provider" and the like
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    if not isinstance(values, dict) or not (properties or isinstance(extra, dict)):
        return values
    kept = {}
    for key, value in values.items():
        if key in properties:
            kept[key] = known_to(properties[key], value, root)
        elif isinstance(extra, dict):
            kept[key] = known_to(extra, value, root)
        elif extra is not False:
            kept[key] = value
    return kept


@pytest.fixture(scope="session")
def current(example_chart: Path) -> Charts:
    return Charts(CHART, example_chart)


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Charts:
    """The chart and the example app chart as committed at PREVIOUS_CHART."""
    root = tmp_path_factory.mktemp("previous-chart")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_CHART, "helm"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    example = root / "helm" / "examples" / "app-with-sidecar"
    helm.dependency_build(example)
    return Charts(root / "helm" / "webhook-sidecar", example)


@cache
def _rendered(chart: Path, values: str, kube_version: str | None) -> tuple[Manifest, ...]:
    return tuple(render(chart, json.loads(values), tests=True, name="webhooks",
                        namespace="shop", kube_version=kube_version))


def rendered(charts: Charts, case: Case) -> list[Manifest]:
    chart = charts.example if case.example else charts.chart
    values = json.dumps(charts.values_for(case), sort_keys=True)
    return copy.deepcopy(list(_rendered(chart, values, case.kube_version)))


def report(findings: list[Finding]) -> str:
    return "\n".join(map(str, findings))


# --- the chart ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_helm_install_starts_every_pod_with_what_it_needs(case: Case, current: Charts) -> None:
    findings = helm_order.install(rendered(current, case), user_owned=case.owned())
    assert not findings, report(findings)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_helm_upgrade_from_the_previous_chart_starts_every_pod_with_what_it_needs(
        case: Case, current: Charts, previous: Charts) -> None:
    findings = helm_order.upgrade(rendered(previous, case), rendered(current, case),
                                  user_owned=case.owned())
    assert not findings, report(findings)


# The chart's defaults and the first deploy's values, both with a PostgreSQL store.
POSTGRES_CASES = [c for c in CASES
                  if c.id == "defaults-postgres" or c.id.startswith("docs/first-deploy.md:")]


@pytest.mark.parametrize("case", POSTGRES_CASES, ids=[c.id for c in POSTGRES_CASES])
def test_the_previous_chart_starts_the_migrate_hook_before_the_generated_secrets(
        case: Case, previous: Charts) -> None:
    """The first-install deadlock of the chart at PREVIOUS_CHART: its pre-install migrate Job
    waits for the admin-token and forward-signing Secrets the release creates afterwards."""
    findings = helm_order.install(rendered(previous, case), user_owned=case.owned())
    migrate = Ref("Job", "webhooks-webhook-sidecar-migrate")
    blocked = {(f.ref, f.why, f.when) for f in findings
               if f.phase is Phase.PRE_INSTALL and f.owner == migrate}
    for generated in ("webhooks-webhook-sidecar-admin-token",
                      "webhooks-webhook-sidecar-forward-signing"):
        assert (Ref("Secret", generated), Why.CREATED_LATER, Phase.RELEASE) in blocked, \
            report(findings)


def test_the_previous_chart_fails_the_first_install_without_the_provider_secret(
        previous: Charts) -> None:
    """docs/first-deploy.md's "come back to this Secret" branch: the provider Secret does not
    exist yet, and the migrate hook is the first pod to need it."""
    case = Case("defaults-postgres", docs_postgres_values())
    provider_secrets = {Ref("Secret", s["secretKeyRef"]["name"])
                        for p in case.values["providers"].values() for s in p["secrets"]}
    assert provider_secrets
    findings = helm_order.install(rendered(previous, case),
                                  user_owned=case.owned() - provider_secrets)
    migrate = Ref("Job", "webhooks-webhook-sidecar-migrate")
    for provider_secret in provider_secrets:
        assert Finding(Phase.PRE_INSTALL, migrate, provider_secret,
                       Why.NEVER_CREATED) in findings, report(findings)


def test_the_docs_show_chart_values_that_the_schema_accepts() -> None:
    found = doc_values()
    for page in ("docs/first-deploy.md", "docs/kubernetes.md"):
        assert any(c.id.startswith(page + ":") for c in found), page
    for case in found:
        values = case.values[ALIAS] if case.example else case.values
        jsonschema.validate(merge(CHART_DEFAULTS, values), VALUES_SCHEMA)


def test_values_blocks_are_told_from_other_yaml(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(f"""\
        ```yaml
        providers: {{stripe: {{path: /webhooks/stripe, preset: stripe, secrets: ["${{S}}"]}}}}
        ```
        1. Values:

           ```yaml
           {ALIAS}:
             mode: sidecar
           ```
        {MARKER}
        ```yaml
        metrics: {{podMonitor: {{enabled: true}}}}
        ```
        ```yaml
        {{{{- $sidecar := .Subcharts.{ALIAS} }}}}
        ```
        """))
    found = doc_values([page])
    assert [(c.id, c.example) for c in found] == [("page.md:6", True), ("page.md:11", False)]
    assert found[1].values == {"metrics": {"podMonitor": {"enabled": True}}}


def test_the_previous_chart_gets_only_the_values_its_schema_knows() -> None:
    schema = {"additionalProperties": False, "properties": {
        "migrate": {"additionalProperties": False, "properties": {"enabled": {}}},
        "providers": {"type": "object"}}}
    values = {"migrate": {"enabled": True, "added": 1}, "added": 2,
              "providers": {"stripe": {"path": "/s"}}}
    assert known_to(schema, values) == {"migrate": {"enabled": True},
                                        "providers": {"stripe": {"path": "/s"}}}


def test_config_file_snippets_are_not_taken_for_chart_values() -> None:
    config_blocks = [yaml.safe_load(text) for path in (REPO / "docs").glob("*.md")
                     for _, text, _ in yaml_blocks(path)
                     if text.lstrip().startswith(("providers:", "upstream:", "listen:"))]
    assert config_blocks
    assert not [b for b in config_blocks if is_chart_values(b)]


def test_user_owned_reads_every_value_that_names_an_object() -> None:
    """A value added to values.yaml that names a Secret or service account (a string at
    `…Secret…[.name]` / `serviceAccount…`, or a list of pull secrets) must be read here."""
    def paths(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path, value
            if isinstance(value, dict):
                yield from paths(value, path + ".")

    naming = [(path, value) for path, value in paths(CHART_DEFAULTS)
              if re.search(r"(?i)(secret|serviceaccount)[^.]*(\.name)?$", path)
              and isinstance(value, str | list)]
    assert len(naming) >= 6, naming
    for path, value in naming:
        values = copy.deepcopy(CHART_DEFAULTS)
        *parents, last = path.split(".")
        node = values
        for key in parents:
            node = node[key]
        node[last] = "probe" if isinstance(value, str) else [{"name": "probe"}]
        assert any(ref.name == "probe" for ref in user_owned(values)), path
    values = {"providers": {"a": {"secrets": ["${A}", {"secretKeyRef": {"name": "p1", "key": "k"}},
                                              {"secretKeyRef": {"name": "p2", "key": "k"},
                                               "as": "env"}]}},
              "extraEnv": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c1",
                                                                           "key": "k"}}}],
              "extraVolumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "pvc"}}]}
    assert user_owned(values) == {Ref("Secret", "p1"), Ref("Secret", "p2"),
                                  Ref("ConfigMap", "c1"), Ref("PersistentVolumeClaim", "pvc")}


# --- helm_order on hand-written manifests ------------------------------------------------

def hook(events: str, weight: int | None = None, delete: str | None = None) -> dict[str, str]:
    annotations = {"helm.sh/hook": events}
    if weight is not None:
        annotations["helm.sh/hook-weight"] = str(weight)
    if delete is not None:
        annotations["helm.sh/hook-delete-policy"] = delete
    return annotations


def secret(name: str, annotations: dict[str, str] | None = None) -> Manifest:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "annotations": annotations or {}}}


def job(name: str, needs: str, annotations: dict[str, str] | None = None, *,
        optional: bool = False) -> Manifest:
    ref = {"name": needs, "key": "k", **({"optional": True} if optional else {})}
    container = {"name": "c", "image": "i", "env": [{"name": "E",
                                                     "valueFrom": {"secretKeyRef": ref}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"template": {"spec": {"containers": [container]}}}}


def deployment(name: str, spec: Manifest) -> Manifest:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"template": {"spec": spec}}}


def test_a_hook_needing_a_release_secret_waits_for_it_forever() -> None:
    findings = helm_order.install([job("migrate", "token", hook("pre-install")),
                                   secret("token")])
    assert findings == [Finding(Phase.PRE_INSTALL, Ref("Job", "migrate"), Ref("Secret", "token"),
                                Why.CREATED_LATER, Phase.RELEASE)]
    assert str(findings[0]) == ("pre-install hooks: Job/migrate's pod needs Secret/token: "
                                "created later, in release resources")


def test_an_optional_reference_does_not_block() -> None:
    manifests = [job("migrate", "token", hook("pre-install"), optional=True)]
    assert helm_order.install(manifests) == []


def test_a_user_owned_secret_is_there_from_the_start() -> None:
    manifests = [job("migrate", "db", hook("pre-install"))]
    assert helm_order.install(manifests, user_owned={Ref("Secret", "db")}) == []
    assert [f.why for f in helm_order.install(manifests)] == [Why.NEVER_CREATED]


@pytest.mark.parametrize(("secret_weight", "job_weight", "blocked"),
                         [(-1, 0, False), (1, 0, True), (0, 0, True), (0, 1, False)])
def test_hooks_run_by_weight_then_name(secret_weight: int, job_weight: int,
                                       blocked: bool) -> None:
    """At equal weight the name decides: Job/a-migrate runs before Secret/b-token."""
    manifests = [job("a-migrate", "b-token", hook("pre-install", job_weight)),
                 secret("b-token", hook("pre-install", secret_weight))]
    findings = helm_order.install(manifests)
    assert bool(findings) is blocked, report(findings)
    assert all(f.when is Phase.PRE_INSTALL for f in findings)


def test_release_resources_are_created_in_kind_order() -> None:
    """A Deployment written before the Secret it needs still finds it: Secrets come first."""
    spec = {"containers": [{"name": "c", "image": "i",
                            "envFrom": [{"secretRef": {"name": "token"}}]}],
            "serviceAccountName": "runner"}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner"}}
    assert helm_order.install([deployment("app", spec), account, secret("token")]) == []
    post = secret("token", hook("post-install"))
    findings = helm_order.install([deployment("app", spec), account, post])
    assert findings == [Finding(Phase.RELEASE, Ref("Deployment", "app"), Ref("Secret", "token"),
                                Why.CREATED_LATER, Phase.POST_INSTALL)]


def test_test_hooks_see_everything_but_succeeded_hooks() -> None:
    spec = {"containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "a", "secret": {"secretName": "token"}},
                        {"name": "b", "projected": {"sources": [{"configMap": {"name": "cfg"}}]}},
                        {"name": "c", "configMap": {"name": "hook-config"}}]}
    test_pod = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "t", "annotations": hook("test")}, "spec": spec}
    hook_config = {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "hook-config",
                                "annotations": hook("pre-install", delete="hook-succeeded")}}
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "cfg", "annotations": hook("post-install")}}
    findings = helm_order.install([test_pod, hook_config, config, secret("token")])
    assert findings == [Finding(Phase.TEST, Ref("Pod", "t"), Ref("ConfigMap", "hook-config"),
                                Why.DELETED, Phase.PRE_INSTALL)]


def test_an_upgrade_starts_with_the_previous_release_and_its_kept_secrets() -> None:
    migrate = job("migrate", "token", hook("pre-install,pre-upgrade"))
    kept = secret("token", {"helm.sh/resource-policy": "keep"})
    assert helm_order.upgrade([migrate, kept], [migrate, secret("token")]) == []
    # Dropped from the new chart: kept, it outlives the upgrade; otherwise it is deleted.
    check = job("check", "token", hook("test"))
    assert helm_order.upgrade([migrate, kept], [migrate, check]) == []
    findings = helm_order.upgrade([migrate, secret("token")], [migrate, check])
    assert findings == [Finding(Phase.TEST, Ref("Job", "check"), Ref("Secret", "token"),
                                Why.DELETED, Phase.RELEASE)]


def test_every_pod_reference_is_read() -> None:
    spec = {"initContainers": [{"env": [{"valueFrom": {"configMapKeyRef": {"name": "i"}}}]}],
            "containers": [{"envFrom": [{"configMapRef": {"name": "e"}},
                                        {"secretRef": {"name": "s", "optional": True}}]}],
            "ephemeralContainers": [{"env": [{"valueFrom": {"secretKeyRef": {"name": "x"}}}]}],
            "volumes": [{"persistentVolumeClaim": {"claimName": "data"}},
                        {"projected": {"sources": [{"secret": {"name": "p"}},
                                                   {"serviceAccountToken": {"path": "t"}}]}}],
            "imagePullSecrets": [{"name": "pull"}], "serviceAccountName": "runner"}
    assert {(r.ref, r.optional) for r in helm_order.pod_refs(spec)} == {
        (Ref("ConfigMap", "i"), False), (Ref("ConfigMap", "e"), False),
        (Ref("Secret", "s"), True), (Ref("Secret", "x"), False),
        (Ref("PersistentVolumeClaim", "data"), False), (Ref("Secret", "p"), False),
        (Ref("Secret", "pull"), False), (Ref("ServiceAccount", "runner"), False)}
    cron = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}}
    assert helm_order.pod_spec(cron) is spec
    assert helm_order.pod_spec({"kind": "Service", "spec": {}}) is None


def test_a_hook_with_an_unknown_event_is_never_created() -> None:
    """Helm skips it (a typo in helm.sh/hook does not fail the render)."""
    manifests = [job("migrate", "token", hook("pre-install")),
                 secret("token", hook("pre-instal", weight=-1))]
    assert [f.why for f in helm_order.install(manifests)] == [Why.NEVER_CREATED]
