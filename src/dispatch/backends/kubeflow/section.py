"""The spec's ``kubeflow:`` section: its strict decoding and every check of its values, before
anything is recorded. Pure: no client, no clock.

Every problem of a section is reported at once (``KubeflowSpecProblems``, or the one
``KubeflowSpecError``), each naming its key path (``kubeflow.volumes[1].mount_path``), as the
spec's own errors are (core/spec.py). The checks are Kubernetes' own rules (label keys and
values, DNS names, resource quantities, toleration operators and effects), so a section that
passes here is not refused by the API server for its syntax; each rule takes whole values only
(``fullmatch``: "^...$" with ``match`` takes a value ending in "\\n").

What each key becomes in the TrainJob is ``manifest``'s; where the pod-level keys land (Trainer
v2.3.0's ``runtimePatches``) is said there.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from dispatch.core.suggest import did_you_mean
from dispatch.errors import BadInput

RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")

# Kubernetes label value: at most 63 characters, alphanumeric at both ends, [-_.] inside.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_VALUE_MAX = 63
# A qualified label key: optional DNS-subdomain prefix + '/' + name of at most 63 characters.
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_SUBDOMAIN_MAX = 253
# The CRD's pattern for a resource quantity (resourcesPerNode.requests / limits values).
QUANTITY = re.compile(
    r"(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?"
)
# An image reference (registry/name:tag@digest): no whitespace or control character.
_IMAGE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]+")
# A whole number of devices, as Kubernetes counts an extended resource (no unit, no fraction).
_COUNT = re.compile(r"[0-9]+")
GPU_RESOURCE = "nvidia.com/gpu"
# Kubernetes' closed sets (core/v1 Toleration). Lt and Gt exist only behind the alpha gate
# TaintTolerationComparisonOperators (v1.35+): an API server without it refuses them.
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The CRD's maxItems of the patch lists these become.
MOST_VOLUMES = 128
MOST_TOLERATIONS = 128
MOST_PULL_SECRETS = 64


class KubeflowSpecError(BadInput, ValueError):
    """The spec's ``kubeflow:`` section (or the token) cannot make a TrainJob; names the key."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        self.problems = [(where, message)]
        super().__init__(f"kubeflow.{where}: {message}" if where else f"kubeflow: {message}")


class KubeflowSpecProblems(KubeflowSpecError):
    """A section with several problems, every one reported at once: ``problems`` lists each
    as (key path, what); ``where`` and ``message`` are the first's."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(*problems[0])
        self.problems = list(problems)
        lines = [f"kubeflow.{w}: {m}" if w else f"kubeflow: {m}" for w, m in problems]
        self.args = (f"{len(problems)} problems:\n  " + "\n  ".join(lines),)


class RuntimeRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    kind: str = "ClusterTrainingRuntime"
    apiGroup: str = "trainer.kubeflow.org"  # noqa: N815 - the TrainJob's own spelling


class Resources(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    requests: dict[str, str | int] = {}
    limits: dict[str, str | int] = {}


class Volume(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One volume mounted into the trainer's container: a directory of the node
    (``host_path``) or a PersistentVolumeClaim of the namespace (``pvc``), one of the two."""

    mount_path: str
    host_path: str | None = None
    pvc: str | None = None
    read_only: bool = False


class Toleration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True,
                 omit_defaults=True):
    """A pod toleration, spelled as Kubernetes spells it (so it can be copied from a taint's
    docs)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    tolerationSeconds: int | None = None  # noqa: N815 - Kubernetes' own spelling


class KubeflowSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    runtime: RuntimeRef | str
    namespace: str | None = None
    image: str | None = None
    numProcPerNode: int | None = None  # noqa: N815
    resourcesPerNode: Resources | None = None  # noqa: N815
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    # What a pod on a real cluster needs (issues 46, 47): the pod template's fields, carried
    # by the TrainJob's runtimePatches (manifest.py).
    node_selector: dict[str, str] = {}
    volumes: list[Volume] = []
    priority_class: str | None = None
    tolerations: list[Toleration] = []
    service_account: str | None = None
    image_pull_secrets: list[str] = []
    # The kubeconfig context the job is meant for: a submit through another one is refused
    # before anything is recorded (origin.check_context), not sent to the wrong cluster.
    context: str | None = None
    # A directory that is the same path in the pods and on the supervisor's machine (a
    # volume's mount_path, or under one, not read-only): each pod's DISPATCH_PROGRESS_FILE
    # and TORCHELASTIC_ERROR_FILE go there, and dispatch reads them (shared_files.py).
    shared_dir: str | None = None

    @property
    def runtime_ref(self) -> RuntimeRef:
        return RuntimeRef(name=self.runtime) if isinstance(self.runtime, str) else self.runtime


def _where(err: msgspec.ValidationError, base: str = "") -> tuple[str, str]:
    """msgspec says 'Object missing required field `runtime` - at `$.x`'; make 'x.runtime'
    (below ``base``)."""
    text = str(err)
    where, message = "", text
    m = re.search(r" - at `\$\.?(.*)`$", text)
    if m:
        where, message = m.group(1), text[: m.start()]
    field = re.search(r"(?:missing required|unknown) field `([^`]*)`", message)
    if field:
        where = f"{where}.{field.group(1)}" if where else field.group(1)
    if base:
        where = f"{base}{where}" if where.startswith("[") else _join(base, where)
    return where, message


def _join(base: str, where: str) -> str:
    return f"{base}.{where}" if base and where else base or where


Problems = list[tuple[str, str]]


def label_key_problem(key: str) -> str:
    """Why ``key`` is no Kubernetes label (or annotation, or node-selector) key; "" if it is."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return f"label key {key!r}: prefix must be a DNS subdomain"
    if len(name) > 63 or not LABEL_NAME.fullmatch(name):
        return f"label key {key!r}: name must be 1-63 characters, alphanumeric at both ends"
    return ""


def label_value_problem(value: str) -> str:
    """Why ``value`` is no Kubernetes label value; "" if it is."""
    if len(value) > LABEL_VALUE_MAX:
        return f"{value!r} is {len(value)} characters; a label value is at most 63"
    if not LABEL_VALUE.fullmatch(value):
        return (f"{value!r} is not a label value: letters, digits, '-', '_', '.', "
                "alphanumeric at both ends")
    return ""


def check_label_value(where: str, value: str) -> None:
    if why := label_value_problem(value):
        raise KubeflowSpecError(where, why)


def name_problem(name: str, what: str) -> str:
    """Why ``name`` cannot name a Kubernetes object (a DNS subdomain, as a ServiceAccount,
    Secret, PersistentVolumeClaim or PriorityClass is named); "" if it can."""
    if len(name) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.fullmatch(name):
        return (f"{name!r} is not {what} (1-253 characters: lowercase letters, digits, '-' "
                "and '.', alphanumeric at both ends)")
    return ""


MOST_CONTEXT_CHARS = 1024


def context_problem(name: str) -> str:
    """Why ``name`` cannot be a kubeconfig context's name; "" if it can. kubectl takes any
    text (an EKS context is an ARN, a GKE one gke_project_zone_name): refused here are only
    the empty, the over-long and what holds a control character or surrounding spaces."""
    if not name or len(name) > MOST_CONTEXT_CHARS or not name.isprintable() \
            or name != name.strip():
        return (f"{name[:80]!r} is not a context's name (1-{MOST_CONTEXT_CHARS} printable "
                "characters, no surrounding spaces; `kubectl config get-contexts` lists them)")
    return ""


# Stand-ins for a list item that did not decode, so the others are still checked (their own
# problems are taken out: the item's decode error is the one reported).
_STAND_IN: dict[str, Any] = {
    "volumes": lambda i: Volume(mount_path=f"/\x00{i}", pvc=""),
    "tolerations": lambda i: Toleration(operator="Exists"),
    "image_pull_secrets": lambda i: "",
}


def _decode(data: dict[str, Any]) -> tuple[dict[str, Any], Problems, set[str]]:
    """Each key decoded on its own (so no bad key hides another); list items one by one.
    Also the places (``volumes[1]``) of the items that did not decode."""
    problems: Problems = []
    undecoded: set[str] = set()
    fields = {f.name: f for f in msgspec.structs.fields(KubeflowSection)}
    decoded: dict[str, Any] = {}
    for key in data:
        if key not in fields:
            problems.append((str(key), f"unknown key{did_you_mean(str(key), list(fields))} "
                                       f"(known keys: {', '.join(fields)})"))
            continue
        value = data[key]
        if key in ("volumes", "tolerations", "image_pull_secrets") and isinstance(value, list):
            item = {"volumes": Volume, "tolerations": Toleration, "image_pull_secrets": str}[key]
            items: list[Any] = []
            for i, raw in enumerate(value):
                try:
                    items.append(msgspec.convert(raw, item, strict=True))
                except msgspec.ValidationError as err:
                    problems.append(_where(err, f"{key}[{i}]"))
                    items.append(_STAND_IN[key](i))
                    undecoded.add(f"{key}[{i}]")
            decoded[key] = items
            continue
        if key in ("labels", "annotations", "node_selector") and isinstance(value, dict):
            # msgspec names a bad value's place "[...]": name its key instead
            wrong = [(f"{key}.{k}", f"Expected `str`, got `{type(v).__name__}`")
                     for k, v in value.items() if not isinstance(v, str)]
            if wrong:
                problems += wrong
                continue
        try:
            decoded[key] = msgspec.convert(value, fields[key].type, strict=True)
        except msgspec.ValidationError as err:
            problems.append(_where(err, key))
    if "runtime" not in data:
        problems.insert(0, ("runtime", "Object missing required field `runtime`"))
    return decoded, problems, undecoded


def _resource_problems(res: Resources) -> Problems:
    found: Problems = []
    for part in ("requests", "limits"):
        for name, qty in getattr(res, part).items():
            where = f"resourcesPerNode.{part}.{name}"
            if isinstance(qty, bool) or not QUANTITY.fullmatch(str(qty)):
                found.append((where, f"{qty!r} is not a quantity (e.g. 8, 64Gi)"))
            elif name == GPU_RESOURCE and (not _COUNT.fullmatch(str(qty)) or int(qty) < 1):
                found.append((where, f"{qty!r}: GPUs per node are a whole number, at least 1"))
    gpu_request, gpu_limit = res.requests.get(GPU_RESOURCE), res.limits.get(GPU_RESOURCE)
    if gpu_request is not None and gpu_limit is None:
        # Kubernetes refuses an extended resource requested without its limit.
        found.append((f"resourcesPerNode.limits.{GPU_RESOURCE}",
                      "GPUs cannot be overcommitted: set the limit (the request may be left "
                      "out; it is the limit)"))
    elif gpu_request is not None and str(gpu_request) != str(gpu_limit):
        found.append((f"resourcesPerNode.requests.{GPU_RESOURCE}",
                      f"is {gpu_request!r} but the limit is {gpu_limit!r}: GPUs cannot be "
                      "overcommitted, so a request equals its limit"))
    return found


def _path_problem(path: str) -> str:
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path"
    if "\x00" in path or "\n" in path:
        return "holds a NUL byte or a newline"
    if any(part == ".." for part in path.split("/")):
        return f"{path!r} holds '..'"
    return ""


def shared_dir_problem(section: KubeflowSection) -> str:
    """Why ``shared_dir`` cannot be where the pods' progress and error files go; "" if it
    can: an absolute path at or under the mount_path of a volume the pods may write."""
    path = section.shared_dir or ""
    if why := _path_problem(path):
        return why
    if "$" in path:  # Kubernetes would expand $(NAME) in the env value it becomes
        return f"{path!r} holds '$'"
    shared = path.rstrip("/") or "/"
    for vol in section.volumes:
        mount = vol.mount_path.rstrip("/") or "/"
        if shared == mount or shared.startswith(mount.rstrip("/") + "/"):
            if vol.read_only:
                return (f"{path} is on a read-only volume (mount_path {vol.mount_path}): the "
                        "pods write their progress and error files there")
            return ""
    mounts = ", ".join(v.mount_path for v in section.volumes) or "none"
    return (f"{path} is under no volume's mount_path (volumes mounted: {mounts}): it must be "
            "a shared volume the pods write and this machine sees at the same path")


def _volume_problems(volumes: list[Volume]) -> Problems:
    found: Problems = []
    if len(volumes) > MOST_VOLUMES:
        found.append(("volumes", f"{len(volumes)} volumes; at most {MOST_VOLUMES}"))
    seen: dict[str, int] = {}
    for i, vol in enumerate(volumes):
        where = f"volumes[{i}]"
        if (vol.host_path is None) == (vol.pvc is None):
            found.append((where, "needs exactly one of host_path (a directory of the node) "
                                 "and pvc (a PersistentVolumeClaim's name)"))
        if vol.host_path is not None and (why := _path_problem(vol.host_path)):
            found.append((f"{where}.host_path", why))
        if vol.pvc is not None and (why := name_problem(vol.pvc, "a PersistentVolumeClaim's "
                                                                 "name")):
            found.append((f"{where}.pvc", why))
        mount = vol.mount_path.rstrip("/") or "/"
        if why := _path_problem(vol.mount_path):
            found.append((f"{where}.mount_path", why))
        elif ":" in vol.mount_path:
            found.append((f"{where}.mount_path", "must not contain ':'"))
        elif mount in seen:
            found.append((f"{where}.mount_path",
                          f"{mount} is mounted by volumes[{seen[mount]}] already"))
        seen.setdefault(mount, i)
    return found


def _toleration_problems(tolerations: list[Toleration]) -> Problems:
    """Kubernetes' ValidateTolerations (core/v1), each rule with its key path."""
    found: Problems = []
    if len(tolerations) > MOST_TOLERATIONS:
        found.append(("tolerations", f"{len(tolerations)} tolerations; at most "
                                     f"{MOST_TOLERATIONS}"))
    for i, tol in enumerate(tolerations):
        where = f"tolerations[{i}]"
        if tol.key and (why := label_key_problem(tol.key)):
            found.append((f"{where}.key", why))
        if tol.operator not in TOLERATION_OPERATORS:
            found.append((f"{where}.operator", f"{tol.operator!r}: must be one of "
                                               f"{', '.join(TOLERATION_OPERATORS)}"))
        elif tol.operator == "Exists" and tol.value:
            found.append((f"{where}.value", "must be empty when operator is Exists"))
        elif not tol.key and tol.operator != "Exists":
            found.append((f"{where}.operator", "must be Exists when key is empty (a toleration "
                                               "of every taint)"))
        if tol.operator == "Equal" and tol.value and (why := label_value_problem(tol.value)):
            found.append((f"{where}.value", why))
        if tol.effect and tol.effect not in TAINT_EFFECTS:
            found.append((f"{where}.effect", f"{tol.effect!r}: must be one of "
                                             f"{', '.join(TAINT_EFFECTS)} (or left out: all)"))
        if tol.tolerationSeconds is not None and tol.effect != "NoExecute":
            found.append((f"{where}.tolerationSeconds", "only a NoExecute toleration has a "
                                                        "time (set effect: NoExecute)"))
    return found


def _section_problems(section: KubeflowSection) -> Problems:
    """Every check beyond the types, as (key path, what)."""
    found: Problems = []
    ref = section.runtime_ref
    if why := name_problem(ref.name, "a runtime's name"):
        found.append(("runtime", why))
    if ref.kind not in RUNTIME_KINDS:
        found.append(("runtime.kind", f"must be one of {', '.join(RUNTIME_KINDS)}"))
    if section.namespace is not None and (
        len(section.namespace) > 63 or not DNS1123_LABEL.fullmatch(section.namespace)
    ):
        found.append(("namespace", f"{section.namespace!r} is not a namespace name"))
    if section.image is not None and not (0 < len(section.image) <= 500
                                          and _IMAGE.fullmatch(section.image)):
        found.append(("image", "must be 1-500 characters, with no whitespace or control "
                               "character"))
    if section.numProcPerNode is not None and section.numProcPerNode < 1:
        found.append(("numProcPerNode", "must be >= 1"))
    if section.resourcesPerNode is not None:
        found += _resource_problems(section.resourcesPerNode)
    for key, value in section.labels.items():
        if why := label_key_problem(key) or label_value_problem(value):
            found.append((f"labels.{key}", why))
        elif key.startswith("dispatch.io/"):
            found.append((f"labels.{key}", "dispatch.io/ labels are dispatch's own"))
    for key in section.annotations:
        if why := label_key_problem(key):
            found.append((f"annotations.{key}", why))
    for key, value in section.node_selector.items():
        if why := label_key_problem(key) or label_value_problem(value):
            found.append((f"node_selector.{key}", why))
    found += _volume_problems(section.volumes)
    if section.priority_class is not None:
        found.append(("priority_class", name_problem(section.priority_class,
                                                     "a PriorityClass's name")
                      or "Trainer v2.3.0's TrainJob cannot set a pod's priorityClassName (its "
                         "runtimePatches carry none): use a runtime whose pod template sets "
                         "it (docs/kubeflow.md, \"Pods on real nodes\")"))
    found += _toleration_problems(section.tolerations)
    if section.shared_dir is not None and (why := shared_dir_problem(section)):
        found.append(("shared_dir", why))
    if section.context is not None and (why := context_problem(section.context)):
        found.append(("context", why))
    if section.service_account is not None and (
            why := name_problem(section.service_account, "a ServiceAccount's name")):
        found.append(("service_account", why))
    if len(section.image_pull_secrets) > MOST_PULL_SECRETS:
        found.append(("image_pull_secrets", f"{len(section.image_pull_secrets)} secrets; at "
                                            f"most {MOST_PULL_SECRETS}"))
    seen: set[str] = set()
    for i, secret in enumerate(section.image_pull_secrets):
        if why := name_problem(secret, "a Secret's name"):
            found.append((f"image_pull_secrets[{i}]", why))
        elif secret in seen:
            found.append((f"image_pull_secrets[{i}]", f"names {secret} twice"))
        seen.add(secret)
    return found


def parse_section(data: Any) -> KubeflowSection:
    """Decode and check the spec's ``kubeflow:`` section; every problem at once, each naming
    its key path."""
    if not isinstance(data, dict) or not data:
        raise KubeflowSpecError("", "the kubeflow backend needs a kubeflow: section with runtime")
    decoded, problems, undecoded = _decode(data)
    if "runtime" not in decoded:
        decoded["runtime"] = "placeholder"  # its problem is reported; the rest still checked
    section = msgspec.convert(decoded, KubeflowSection, strict=True)
    problems += [p for p in _section_problems(section)
                 if p[0].split(".")[0].split("[")[0] in decoded
                 and p[0].split(".")[0] not in undecoded]
    if len(problems) == 1:
        raise KubeflowSpecError(*problems[0])
    if problems:
        raise KubeflowSpecProblems(problems)
    return section
