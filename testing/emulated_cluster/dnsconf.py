"""``/etc/resolv.conf`` for a pod, exactly as the kubelet composes it and the CRI runtime writes it.

Rules from kubernetes/kubernetes ``pkg/kubelet/network/dns/dns.go`` (read at commit 04791b4;
the logic is unchanged in current releases apart from the ExpandedDNSConfig limits, GA in 1.28
and used here) and containerd's ``parseDNSOptions`` (search, nameserver, options lines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

DEFAULT_DNS_OPTIONS = ("ndots:5",)  # dns.go:45 defaultDNSOptions
MAX_NAMESERVERS = 3  # validation.MaxDNSNameservers, dns.go:151
MAX_SEARCH_PATHS = 32  # validation.MaxDNSSearchPathsExpanded, dns.go:103-105
MAX_SEARCH_CHARS = 2048  # validation.MaxDNSSearchListCharsExpanded
MAX_SEARCH_LENGTH = 253  # utilvalidation.DNS1123SubdomainMaxLength, dns.go:117


@dataclass
class DnsConfig:
    servers: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # DNSConfigForming event messages


def parse_resolv_conf(text: str) -> DnsConfig:
    """dns.go:230-277 parseResolvConf: nameservers accumulate, the last search and options win,
    a search's trailing dot is dropped."""
    config = DnsConfig()
    for line in text.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        fields = trimmed.split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            config.servers.append(fields[1])
        if fields[0] == "search":
            config.searches = [s.removesuffix(".") for s in fields[1:]]
        if fields[0] == "options":
            config.options = fields[1:]
    return config


def _omit_duplicates(values: list[str]) -> list[str]:
    """dns.go:87-98."""
    return list(dict.fromkeys(values))


def _merge_options(existing: list[str], extra: list[JSON]) -> list[str]:
    """dns.go:324-350 mergeDNSOptions: later names overwrite earlier ones. Upstream rebuilds the
    list from a Go map (random order); insertion order here keeps tests exact."""
    merged: dict[str, str] = {}
    for op in existing:
        name, sep, value = op.partition(":")
        merged[name] = value if sep else ""
    for option in extra:
        merged[str(option.get("name", ""))] = str(option.get("value") or "")
    return [f"{name}:{value}" if value else name for name, value in merged.items()]


def _fit_limits(config: DnsConfig) -> DnsConfig:
    """dns.go:100-164: at most 3 nameservers, 32 searches of at most 253 characters, 2048 in all
    (an event ``DNSConfigForming`` says what was dropped)."""
    if len(config.servers) > MAX_NAMESERVERS:
        config.servers = config.servers[:MAX_NAMESERVERS]
        config.warnings.append(
            "Nameserver limits were exceeded, some nameservers have been omitted, "
            f"the applied nameserver line is: {' '.join(config.servers)}"
        )
    searches, exceeded = config.searches, False
    if len(searches) > MAX_SEARCH_PATHS:
        searches, exceeded = searches[:MAX_SEARCH_PATHS], True
    kept = [s for s in searches if len(s) <= MAX_SEARCH_LENGTH]
    exceeded = exceeded or len(kept) != len(searches)
    while kept and len(" ".join(kept)) > MAX_SEARCH_CHARS:
        kept, exceeded = kept[:-1], True
    if exceeded:
        config.warnings.append(
            "Search Line limits were exceeded, some search paths have been omitted, "
            f"the applied search line is: {' '.join(kept)}"
        )
    config.searches = kept
    return config


def pod_dns(
    pod: JSON, cluster_dns: list[str], cluster_domain: str, node_resolv_conf: str | None
) -> DnsConfig:
    """dns.go:362-424 GetPodDNS. ``node_resolv_conf`` is the text of the kubelet's
    ``--resolv-conf`` file (None when the flag is empty)."""
    spec = pod.get("spec") or {}
    host = parse_resolv_conf(node_resolv_conf) if node_resolv_conf is not None else DnsConfig()
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    # dns.go:301-320 getPodDNSType: ClusterFirst on the host network falls back to Default.
    if policy == "None":
        kind = "none"
    elif policy == "ClusterFirstWithHostNet" or (
        policy == "ClusterFirst" and not spec.get("hostNetwork")
    ):
        kind = "cluster"
    elif policy in ("ClusterFirst", "Default"):
        kind = "host"
    else:
        kind = "cluster"
    config = host
    if kind == "none":
        config = DnsConfig()  # dns.go:374-376
    elif kind == "cluster" and cluster_dns:
        # dns.go:377-389: the cluster DNS is the only nameserver; searches from dns.go:166-176.
        namespace = pod["metadata"].get("namespace") or "default"
        searches = host.searches
        if cluster_domain:
            cluster = [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]
            searches = _omit_duplicates(cluster + host.searches)
        config = DnsConfig(list(cluster_dns), searches, list(DEFAULT_DNS_OPTIONS))
    elif node_resolv_conf is None:
        # dns.go:397-417: no --resolv-conf: localhost and the root domain.
        config = DnsConfig(["127.0.0.1"], ["."], host.options)
    extra = spec.get("dnsConfig")
    if extra:
        # dns.go:354-359 appendDNSConfig, applied at dns.go:420-422.
        config.servers = _omit_duplicates(config.servers + list(extra.get("nameservers") or []))
        config.searches = _omit_duplicates(config.searches + list(extra.get("searches") or []))
        config.options = _merge_options(config.options, list(extra.get("options") or []))
    return _fit_limits(config)


def resolv_conf_text(config: DnsConfig) -> str:
    """The file the runtime writes (containerd parseDNSOptions): search, nameservers, options;
    an empty config gives an empty file."""
    text = ""
    if config.searches:
        text += f"search {' '.join(config.searches)}\n"
    for server in config.servers:
        text += f"nameserver {server}\n"
    if config.options:
        text += f"options {' '.join(config.options)}\n"
    return text
