"""Helm's install and upgrade order replayed over a rendered chart: does every pod find what it
needs at the moment it starts?

Takes the manifests as rendered (chart_support.render with ``tests=True``: files sorted by path,
documents in file order, as Helm reads them) and the objects the user creates themselves.
Returns a ``Finding`` for each reference a pod makes to an object that does not exist when the
pod starts: a hook pod waiting for a release Secret keeps ``helm install`` from ever finishing.

The order, as Helm 3 and 4 run it (github.com/helm/helm):
- install: pre-install hooks, release resources, post-install hooks, then ``helm test`` hooks;
  upgrade: the previous release's objects exist, then pre-upgrade hooks, release resources
  (objects only the previous release had are deleted afterwards, unless
  ``helm.sh/resource-policy: keep``), post-upgrade hooks, test hooks.
- Hooks of one event run one by one, sorted by weight, then name, then kind (InstallOrder), then
  file order (pkg/action/hooks.go ``hookByWeight`` over the kind-sorted list of
  pkg/release/v1/util/manifest_sorter.go). Helm waits for a hook Job or Pod to finish before the
  next hook, so its pod starts when it is created. Without a delete policy a hook gets
  ``before-hook-creation``; ``hook-succeeded`` hooks are deleted once every hook of the event
  has succeeded. A hook naming an unknown event is skipped (never created).
- Release resources are created kind by kind in ``INSTALL_ORDER`` (objects of one kind at once).

A pod (a Pod, or the template of a Deployment, StatefulSet, DaemonSet, ReplicaSet,
ReplicationController, Job or CronJob) refers to: env ``secretKeyRef``/``configMapKeyRef``,
``envFrom``, ``secret``/``configMap``/``projected``/``persistentVolumeClaim`` volumes, in
containers, initContainers and ephemeralContainers; ``imagePullSecrets``; its
``serviceAccountName``. A reference marked ``optional: true`` never blocks.

Left out: namespaces (every object is taken to be in the release namespace), other volume types'
secret references (csi, cephfs, …), objects a controller makes (StatefulSet claims), CRDs and
API availability, and failures (every hook is taken to succeed).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from typing import Any

Manifest = dict[str, Any]

# Helm's InstallOrder, pkg/release/v1/util/kind_sorter.go (Helm 4; Helm 3's
# pkg/releaseutil/kind_sorter.go lacks PriorityClass and the two webhook configurations).
# Kinds not listed come after these, alphabetically.
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
)
HOOK = "helm.sh/hook"
HOOK_WEIGHT = "helm.sh/hook-weight"
HOOK_DELETE_POLICY = "helm.sh/hook-delete-policy"
RESOURCE_POLICY = "helm.sh/resource-policy"
# pkg/release/v1/util/manifest_sorter.go `events` ("test-success" is Helm 2's name for test).
HOOK_EVENTS = {"pre-install", "post-install", "pre-delete", "post-delete", "pre-upgrade",
               "post-upgrade", "pre-rollback", "post-rollback", "test", "test-success"}


@dataclass(frozen=True, order=True)
class Ref:
    """An object by kind and name (in the release namespace)."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


# What every namespace has without anyone creating it.
CLUSTER_PROVIDED = frozenset({Ref("ServiceAccount", "default"),
                              Ref("ConfigMap", "kube-root-ca.crt")})


class Phase(enum.Enum):
    PREVIOUS_RELEASE = "previous release"
    PRE_INSTALL = "pre-install hooks"
    PRE_UPGRADE = "pre-upgrade hooks"
    RELEASE = "release resources"
    POST_INSTALL = "post-install hooks"
    POST_UPGRADE = "post-upgrade hooks"
    TEST = "test hooks"


class Why(enum.Enum):
    CREATED_LATER = "created later"
    DELETED = "deleted earlier"
    NEVER_CREATED = "never created and not user-owned"


@dataclass(frozen=True)
class Finding:
    """At ``phase``, the pod of ``owner`` refers to ``ref``, which does not exist then:
    ``why``, and ``when`` it is created (CREATED_LATER) or was deleted (DELETED)."""

    phase: Phase
    owner: Ref
    ref: Ref
    why: Why
    when: Phase | None = None

    def __str__(self) -> str:
        why = self.why.value
        if self.why is Why.CREATED_LATER:
            why += f", in {self.when.value if self.when else '?'}"
        elif self.why is Why.DELETED:
            why += f", at the end of {self.when.value if self.when else '?'}"
        return f"{self.phase.value}: {self.owner}'s pod needs {self.ref}: {why}"


@dataclass(frozen=True)
class PodRef:
    """One reference a pod makes; ``optional`` ones never block the pod."""

    ref: Ref
    optional: bool = False


def ref_of(manifest: Manifest) -> Ref:
    return Ref(manifest["kind"], manifest["metadata"]["name"])


def pod_spec(manifest: Manifest) -> Manifest | None:
    """The pod spec a workload starts pods from; None for objects that start no pod."""
    kind, spec = manifest["kind"], manifest.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet",
                "ReplicationController", "Job"}:
        pod: Manifest = spec.get("template", {}).get("spec") or {}
        return pod
    if kind == "CronJob":
        job: Manifest = spec.get("jobTemplate", {}).get("spec") or {}
        cron_pod: Manifest = job.get("template", {}).get("spec") or {}
        return cron_pod
    return None


def pod_refs(spec: Manifest) -> list[PodRef]:
    """Every object a pod spec refers to by name, in the order the spec lists them."""
    refs: list[PodRef] = []

    def add(kind: str, source: Manifest | None, key: str = "name") -> None:
        if source is not None:
            refs.append(PodRef(Ref(kind, source.get(key) or ""), bool(source.get("optional"))))

    for group in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(group) or []:
            for var in container.get("env") or []:
                value_from = var.get("valueFrom") or {}
                add("Secret", value_from.get("secretKeyRef"))
                add("ConfigMap", value_from.get("configMapKeyRef"))
            for source in container.get("envFrom") or []:
                add("Secret", source.get("secretRef"))
                add("ConfigMap", source.get("configMapRef"))
    for volume in spec.get("volumes") or []:
        add("Secret", volume.get("secret"), "secretName")
        add("ConfigMap", volume.get("configMap"))
        add("PersistentVolumeClaim", volume.get("persistentVolumeClaim"), "claimName")
        for source in (volume.get("projected") or {}).get("sources") or []:
            add("Secret", source.get("secret"))
            add("ConfigMap", source.get("configMap"))
    for pull in spec.get("imagePullSecrets") or []:
        add("Secret", pull)
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:
        refs.append(PodRef(Ref("ServiceAccount", account)))
    return refs


def install(manifests: Iterable[Manifest], *, user_owned: Iterable[Ref] = ()) -> list[Finding]:
    """The findings of ``helm install`` followed by ``helm test``."""
    manifests = list(manifests)
    steps = [*_hook_steps(manifests, "pre-install", Phase.PRE_INSTALL),
             *_release_steps(manifests, Phase.RELEASE),
             *_hook_steps(manifests, "post-install", Phase.POST_INSTALL),
             *_hook_steps(manifests, "test", Phase.TEST)]
    return _replay(steps, set(), frozenset(user_owned))


def upgrade(previous: Iterable[Manifest], manifests: Iterable[Manifest], *,
            user_owned: Iterable[Ref] = ()) -> list[Finding]:
    """The findings of ``helm upgrade`` from a release installed from ``previous`` (every
    step of that install done), followed by ``helm test``."""
    previous, manifests = list(previous), list(manifests)
    before = [*_hook_steps(previous, "pre-install", Phase.PREVIOUS_RELEASE),
              *_release_steps(previous, Phase.PREVIOUS_RELEASE),
              *_hook_steps(previous, "post-install", Phase.PREVIOUS_RELEASE)]
    existing: set[Ref] = set()
    _replay(before, existing, frozenset())
    old = {ref_of(m): m for m in _release(previous)}
    new = {ref_of(m) for m in _release(manifests)}
    dropped = {ref for ref, m in old.items() if ref not in new and not _kept(m)}
    steps = [*_hook_steps(manifests, "pre-upgrade", Phase.PRE_UPGRADE),
             *_release_steps(manifests, Phase.RELEASE),
             _Step(Phase.RELEASE, (), deleted=frozenset(dropped)),
             *_hook_steps(manifests, "post-upgrade", Phase.POST_UPGRADE),
             *_hook_steps(manifests, "test", Phase.TEST)]
    return _replay(steps, existing, frozenset(user_owned))


@dataclass(frozen=True)
class _Step:
    """Objects created together (after ``recreated`` are deleted), then ``deleted``."""

    phase: Phase
    created: tuple[Manifest, ...]
    recreated: frozenset[Ref] = frozenset()
    deleted: frozenset[Ref] = frozenset()


def _replay(steps: list[_Step], existing: set[Ref], user_owned: frozenset[Ref]) -> list[Finding]:
    """Runs ``steps`` over ``existing`` (updated in place), checking each pod as it starts."""
    findings: list[Finding] = []
    deleted_in: dict[Ref, Phase] = {}
    for index, step in enumerate(steps):
        existing -= step.recreated
        for manifest in step.created:
            spec = pod_spec(manifest)
            if spec is None:
                continue
            for pod_ref in pod_refs(spec):
                ref = pod_ref.ref
                if (pod_ref.optional or ref in existing or ref in user_owned
                        or ref in CLUSTER_PROVIDED):
                    continue
                later = next((s.phase for s in steps[index:]
                              if any(ref_of(m) == ref for m in s.created)), None)
                if later is not None:
                    findings.append(Finding(step.phase, ref_of(manifest), ref,
                                            Why.CREATED_LATER, later))
                elif ref in deleted_in:
                    findings.append(Finding(step.phase, ref_of(manifest), ref, Why.DELETED,
                                            deleted_in[ref]))
                else:
                    findings.append(Finding(step.phase, ref_of(manifest), ref,
                                            Why.NEVER_CREATED))
        existing |= {ref_of(m) for m in step.created}
        existing -= step.deleted
        deleted_in |= dict.fromkeys(step.deleted, step.phase)
    return findings


def _annotations(manifest: Manifest) -> dict[str, str]:
    annotations: dict[str, str] = (manifest.get("metadata") or {}).get("annotations") or {}
    return annotations


def _listed(manifest: Manifest, annotation: str) -> list[str]:
    value = _annotations(manifest).get(annotation, "")
    return [part.strip().lower() for part in value.split(",") if part.strip()]


def _hook_events(manifest: Manifest) -> set[str] | None:
    """The hook's events (``test-success`` read as ``test``); None for a release resource."""
    if HOOK not in _annotations(manifest):
        return None
    return {"test" if e == "test-success" else e for e in _listed(manifest, HOOK)}


def _kind_rank(kind: str) -> tuple[int, str]:
    if kind in INSTALL_ORDER:
        return INSTALL_ORDER.index(kind), ""
    return len(INSTALL_ORDER), kind


def _weight(manifest: Manifest) -> int:
    try:
        return int(_annotations(manifest).get(HOOK_WEIGHT, "0"))
    except ValueError:  # Helm reads a weight it cannot parse as 0
        return 0


def _release(manifests: Iterable[Manifest]) -> list[Manifest]:
    """The release resources in Helm's install order (stable within a kind)."""
    plain = [m for m in manifests if _hook_events(m) is None]
    return sorted(plain, key=lambda m: _kind_rank(m["kind"]))


def _release_steps(manifests: Iterable[Manifest], phase: Phase) -> Iterator[_Step]:
    for _, group in groupby(_release(manifests), key=lambda m: m["kind"]):
        yield _Step(phase, tuple(group))


def _hook_steps(manifests: Iterable[Manifest], event: str, phase: Phase) -> Iterator[_Step]:
    """One step per hook of ``event`` in Helm's order, then the hook-succeeded deletions."""
    hooks = []
    for manifest in manifests:
        events = _hook_events(manifest)
        if events is None or not events <= HOOK_EVENTS or event not in events:
            continue  # Helm skips a hook with an unknown event altogether
        hooks.append(manifest)
    hooks.sort(key=lambda m: (_weight(m), m["metadata"]["name"], _kind_rank(m["kind"])))
    for hook in hooks:
        policies = _listed(hook, HOOK_DELETE_POLICY) or ["before-hook-creation"]
        recreated = {ref_of(hook)} if "before-hook-creation" in policies else set()
        yield _Step(phase, (hook,), recreated=frozenset(recreated))
    succeeded = {ref_of(h) for h in hooks if "hook-succeeded" in _listed(h, HOOK_DELETE_POLICY)}
    if succeeded:
        yield _Step(phase, (), deleted=frozenset(succeeded))


def _kept(manifest: Manifest) -> bool:
    return _annotations(manifest).get(RESOURCE_POLICY, "").strip() == "keep"
