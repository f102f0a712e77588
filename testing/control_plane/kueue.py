"""Kueue v0.17.0 (sigs.k8s.io/kueue) in the control plane, from the files
``scripts/setup-control-plane.sh`` copied out of its module next to the binary
(``<bin dir>/kueue-files/``, upstream's paths under it):

- its CRDs (``config/components/crd/bases``; served as v1beta1 and v1beta2, stored as v1beta2),
  the conversion webhook on those upstream's ``crd/kustomization.yaml`` patches, when Kueue runs;
- its ClusterRoles (``config/components/rbac/role.yaml``, and ``metrics_auth_role.yaml`` which
  its visibility server delegates authentication and authorization with) and its Role on
  secrets in kueue-system (``manager_secrets_role.yaml``), named ``kueue-<name>`` as upstream's
  kustomize prefix names them, bound to Kueue's own client certificate user, and
  ``extension-apiserver-authentication-reader`` in kube-system (upstream's
  ``config/components/visibility/role_binding.yaml``);
- its webhook configurations (``config/components/webhook/manifests.yaml``), only the webhooks
  of what exists here (Kueue's kinds, batch Jobs, MPIJobs: :data:`WEBHOOK_RESOURCES`), each
  ``clientConfig.service`` turned into a URL on 127.0.0.1 (kube-apiserver is on this machine's
  network namespace) with the run's CA as ``caBundle``; a ``Fail`` webhook on pods would refuse
  every pod whenever Kueue is down.

Kueue runs with ``internalCertManagement`` off, so it reads certificates from paths hard-wired in
``cmd/kueue/main.go`` (``/etc/kueue/metrics/certs``) and ``pkg/visibility/server.go``
(``/visibility``). Rather than write there, it runs chrooted into a directory of the run's state
(:func:`command`): the binary bind-mounted into it in a mount namespace of its own, which dies
with the process, so nothing of it is left on the machine."""

from __future__ import annotations

import base64
import enum
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from testing.control_plane import pki, rbac
from testing.kube_api import Api, ApiFailure

JSON = dict[str, Any]
VERSION = "v0.17.0"
NAMESPACE = "kueue-system"  # the Configuration's namespace (its default)
USER = "kueue"  # Kueue's client certificate's user (upstream: its ServiceAccount)
ADDRESS = "127.0.0.1"  # its webhook, health and visibility servers: kube-apiserver's netns
FRAMEWORKS = ("batch/job", "kubeflow.org/mpijob")
# (API group, resource) whose webhooks are installed: "*" is every resource of the group.
WEBHOOK_RESOURCES = {("kueue.x-k8s.io", "*"), ("batch", "jobs"), ("kubeflow.org", "mpijobs")}
START_TIMEOUT = 90.0  # 2 busy cores: it lists every watched kind before it serves
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
GROUP = "kueue.x-k8s.io"
API = f"/apis/{GROUP}/v1beta2"


class Mode(enum.Enum):
    """How much of Kueue a control plane has: nothing, its CRDs only (objects stored, nothing
    reconciles them), or the controller with its CRDs and webhooks."""

    OFF = "off"
    CRDS = "crds"
    RUNNING = "running"


class KueueFailed(Exception):
    """Kueue did not come up; the message ends with its log's tail."""


def files(bin_dir: Path) -> Path:
    """Where the setup script copied the module's files (upstream's paths under it)."""
    return bin_dir / "kueue-files"


def _documents(path: Path) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _ca_bundle(ca: Path) -> str:
    return base64.b64encode(ca.read_bytes()).decode()


# -- CRDs ---------------------------------------------------------------------------------------


def conversion_patches(source: Path) -> dict[str, JSON]:
    """CRD name -> the ``spec.conversion`` upstream's kustomization patches into it."""
    crd = source / "config" / "components" / "crd"
    kustomization = yaml.safe_load((crd / "kustomization.yaml").read_text())
    found: dict[str, JSON] = {}
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load((crd / entry["path"]).read_text())
        conversion = (patch.get("spec") or {}).get("conversion")
        if conversion is not None:
            found[patch["metadata"]["name"]] = conversion
    return found


def crds(source: Path, webhook_url: str | None = None, ca: Path | None = None) -> list[JSON]:
    """Kueue's CRDs; with ``webhook_url``, those upstream converts through the webhook call
    ``<webhook_url>/convert`` (without it, none converts: read and write v1beta2 then)."""
    bases = source / "config" / "components" / "crd" / "bases"
    found = [doc for path in sorted(bases.glob("*.yaml")) for doc in _documents(path)]
    if webhook_url is None:
        return found
    assert ca is not None
    patches = conversion_patches(source)
    for crd in found:
        conversion = patches.get(crd["metadata"]["name"])
        if conversion is None:
            continue
        service = conversion["webhook"]["clientConfig"]["service"]
        crd["spec"]["conversion"] = {
            **conversion,
            "webhook": {
                **conversion["webhook"],
                "clientConfig": {
                    "url": webhook_url + service.get("path", "/convert"),
                    "caBundle": _ca_bundle(ca),
                },
            },
        }
    return found


def apply_crds(api: Api, documents: list[JSON], timeout: float = 30.0) -> None:
    """Create the CRDs (too big for client-side apply) and wait until each is Established."""
    for crd in documents:
        rbac.create_once(api, CRDS, crd)
    deadline = time.monotonic() + timeout
    for crd in documents:
        name = crd["metadata"]["name"]
        while True:
            found = api.get(f"{CRDS}/{name}") or {}
            conditions = (found.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise KueueFailed(f"the CRD {name} never became Established")
            time.sleep(0.1)


# -- RBAC ---------------------------------------------------------------------------------------


def _bind_role(api: Api, namespace: str, name: str, role: str, user: str) -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    rbac.create_once(api, f"{RBAC}/namespaces/{namespace}/rolebindings", binding)


def grant(api: Api, source: Path, user: str = USER) -> None:
    """Upstream's ClusterRoles and Role (``kueue-`` prefixed, the Role in :data:`NAMESPACE`)
    bound to ``user``, and the reader of kube-apiserver's client CA its visibility server
    authenticates with."""
    rbac_dir = source / "config" / "components" / "rbac"
    for path in (rbac_dir / "role.yaml", rbac_dir / "metrics_auth_role.yaml"):
        for role in _documents(path):
            role["metadata"] = {"name": "kueue-" + role["metadata"]["name"]}
            rbac.create_once(api, f"{RBAC}/clusterroles", role)
            rbac.bind_cluster_role(api, role["metadata"]["name"], user)
    for role in _documents(rbac_dir / "manager_secrets_role.yaml"):
        name = "kueue-" + role["metadata"]["name"]
        role["metadata"] = {"name": name, "namespace": NAMESPACE}
        rbac.create_once(api, f"{RBAC}/namespaces/{NAMESPACE}/roles", role)
        _bind_role(api, NAMESPACE, name, name, user)
    _bind_role(
        api,
        "kube-system",
        "kueue-visibility-server-auth-reader",
        "extension-apiserver-authentication-reader",
        user,
    )


# -- webhooks -----------------------------------------------------------------------------------


def _installed(webhook: JSON) -> bool:
    """Whether every resource the webhook's rules name is one of :data:`WEBHOOK_RESOURCES`."""
    for rule in webhook.get("rules") or []:
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                base = resource.split("/")[0]
                if (group, "*") not in WEBHOOK_RESOURCES and (group, base) not in WEBHOOK_RESOURCES:
                    return False
    return True


def webhook_configurations(source: Path, webhook_url: str, ca: Path) -> list[JSON]:
    """Upstream's two configurations, named ``kueue-<name>``, with only the webhooks
    :func:`_installed` keeps, each calling ``webhook_url`` + its service path."""
    manifests = source / "config" / "components" / "webhook" / "manifests.yaml"
    configurations = []
    for configuration in _documents(manifests):
        configuration["metadata"] = {"name": "kueue-" + configuration["metadata"]["name"]}
        kept = []
        for webhook in configuration["webhooks"]:
            if not _installed(webhook):
                continue
            service = webhook["clientConfig"]["service"]
            webhook["clientConfig"] = {
                "url": webhook_url + service["path"],
                "caBundle": _ca_bundle(ca),
            }
            kept.append(webhook)
        configuration["webhooks"] = kept
        configurations.append(configuration)
    return configurations


def install_webhooks(api: Api, configurations: list[JSON]) -> None:
    for configuration in configurations:
        plural = configuration["kind"].lower() + "s"
        rbac.create_once(api, f"{ADMISSION}/{plural}", configuration)


# -- the process --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ports:
    """Kueue's servers, each on :data:`ADDRESS`."""

    webhook: int
    health: int
    visibility: int

    @property
    def webhook_url(self) -> str:
        return f"https://{ADDRESS}:{self.webhook}"


def configuration(ports: Ports) -> JSON:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, ``apis/config/v1beta2``): no
    internal certificates, every server on loopback (metrics off), no leader election (one
    Kueue), only Jobs and MPIJobs, and only those that name a queue."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"{ADDRESS}:{ports.health}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": ADDRESS, "port": ports.webhook, "certDir": "/webhook"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "visibilityServer": {"bindAddress": ADDRESS, "bindPort": ports.visibility},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def _place(pair: pki.KeyPair, directory: Path) -> None:
    """The pair as ``tls.crt`` and ``tls.key`` in ``directory`` (what Kueue's servers read)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pair.cert, directory / "tls.crt")
    shutil.copyfile(pair.key, directory / "tls.key")
    (directory / "tls.key").chmod(0o600)


def prepare_root(
    root: Path, api_url: str, ca: Path, client: pki.KeyPair, serving: pki.KeyPair, ports: Ports
) -> None:
    """Kueue's chroot: its configuration, kubeconfig and certificates at the paths it reads."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "kueue").touch()  # the binary is bind-mounted here
    (root / "tmp").mkdir(exist_ok=True)
    pki_dir = root / "pki"
    pki_dir.mkdir(exist_ok=True)
    shutil.copyfile(ca, pki_dir / "ca.crt")
    _place(client, pki_dir / "client")
    for directory in ("webhook", "etc/kueue/metrics/certs", "visibility"):
        _place(serving, root / directory)
    (root / "config.yaml").write_text(yaml.safe_dump(configuration(ports), sort_keys=False))
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": api_url, "certificate-authority": "/pki/ca.crt"}}
        ],
        "users": [
            {
                "name": "kueue",
                "user": {
                    "client-certificate": "/pki/client/tls.crt",
                    "client-key": "/pki/client/tls.key",
                },
            }
        ],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "kueue"}}],
        "current-context": "c",
    }
    (root / "kubeconfig").write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    (root / "kubeconfig").chmod(0o600)


# sh -c's script: $1 the binary, $2 the root, the rest Kueue's flags.
_ENTER = 'b=$1 r=$2; shift 2; mount --bind "$b" "$r/kueue" && exec chroot "$r" /kueue "$@"'


def command(binary: Path, root: Path) -> list[str]:
    """Kueue chrooted into ``root`` (:func:`prepare_root`), in a private mount namespace."""
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", _ENTER, "kueue", str(binary), str(root),
        "--config=/config.yaml", "--kubeconfig=/kubeconfig", "--zap-log-level=info",
    ]  # fmt: skip


def dry_run_flavor(api: Api) -> None:
    """A ResourceFlavor created with ``dryRun``: both of Kueue's webhooks answer it."""
    flavor = {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "kueue-ready-probe"},
    }
    api.create(f"{API}/resourceflavors?dryRun=All", flavor)


def wait_ready(
    api: Api,
    ports: Ports,
    check: Callable[[], None],
    log: Path,
    tail: Callable[[Path], str],
    timeout: float = START_TIMEOUT,
) -> float:
    """Until Kueue's ``/readyz`` answers ok (its webhook server listens) and a dry-run create
    passes its webhooks; the seconds it took. ``check`` raises if its process ended."""
    start = time.monotonic()
    deadline = start + timeout
    last = "no answer yet"
    while True:
        check()
        try:
            ready = requests.get(f"http://{ADDRESS}:{ports.health}/readyz", timeout=2)
            if ready.status_code == 200:
                dry_run_flavor(api)
                return time.monotonic() - start
            last = f"/readyz answered {ready.status_code}"
        except requests.RequestException as err:
            last = f"/readyz: {type(err).__name__}"
        except ApiFailure as err:
            last = f"a dry-run ResourceFlavor: {err}"
        if time.monotonic() > deadline:
            raise KueueFailed(
                f"Kueue {VERSION} not ready after {timeout:.0f}s ({last}):\n{tail(log)}"
            )
        time.sleep(0.2)
