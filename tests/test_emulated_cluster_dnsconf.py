"""resolv.conf as the kubelet composes it (pkg/kubelet/network/dns/dns.go GetPodDNS)."""

from __future__ import annotations

from typing import Any

from testing.emulated_cluster.dnsconf import pod_dns, resolv_conf_text

NODE = "nameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch corp.example.com.\noptions edns0\n"


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


def text(**spec: Any) -> str:
    return resolv_conf_text(pod_dns(pod(**spec), ["10.98.76.1"], "cluster.local", NODE))


def test_cluster_first_uses_the_cluster_dns_and_the_cluster_searches_before_the_nodes() -> None:
    assert text() == (
        "search ml.svc.cluster.local svc.cluster.local cluster.local corp.example.com\n"
        "nameserver 10.98.76.1\n"
        "options ndots:5\n"
    )


def test_cluster_first_on_the_host_network_falls_back_to_default() -> None:
    assert text(hostNetwork=True) == text(dnsPolicy="Default")


def test_default_is_the_nodes_resolv_conf() -> None:
    assert text(dnsPolicy="Default") == (
        "search corp.example.com\nnameserver 10.0.0.2\nnameserver 10.0.0.3\noptions edns0\n"
    )


def test_none_starts_empty_so_nameservers_alone_give_no_search_line() -> None:
    assert text(dnsPolicy="None") == ""
    assert text(dnsPolicy="None", dnsConfig={"nameservers": ["10.98.76.1"]}) == (
        "nameserver 10.98.76.1\n"
    )


def test_dns_config_appends_without_duplicates_and_options_override_by_name() -> None:
    config = {
        "nameservers": ["10.98.76.1", "10.0.0.9"],
        "searches": ["cluster.local", "j.ml.svc.cluster.local"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
    }
    assert text(dnsConfig=config) == (
        "search ml.svc.cluster.local svc.cluster.local cluster.local corp.example.com"
        " j.ml.svc.cluster.local\n"
        "nameserver 10.98.76.1\n"
        "nameserver 10.0.0.9\n"
        "options ndots:2 edns0\n"
    )


def test_more_than_three_nameservers_are_cut_with_a_dns_config_forming_warning() -> None:
    config = pod_dns(
        pod(
            dnsPolicy="None",
            dnsConfig={"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"]},
        ),
        [],
        "cluster.local",
        NODE,
    )
    assert config.servers == ["1.1.1.1", "2.2.2.2", "3.3.3.3"]
    assert config.warnings == [
        "Nameserver limits were exceeded, some nameservers have been omitted, "
        "the applied nameserver line is: 1.1.1.1 2.2.2.2 3.3.3.3"
    ]


def test_without_a_resolver_config_default_is_localhost_and_the_root_domain() -> None:
    config = pod_dns(pod(dnsPolicy="Default"), ["10.98.76.1"], "cluster.local", None)
    assert resolv_conf_text(config) == "search .\nnameserver 127.0.0.1\n"
