"""An emulated Kubernetes cluster whose pods are real processes on this machine.

Each emulated node runs a kubelet (:mod:`.kubelet`) that watches the pods bound to it through the
Kubernetes API and runs them the way a node does: a network, UTS and mount namespace per pod on a
bridge of our own (:mod:`.network`), Secret/ConfigMap/emptyDir/PVC volumes laid out as the kubelet
lays them out (:mod:`.volumes`), ``/etc/resolv.conf`` from ``dnsPolicy`` (:mod:`.dnsconf`) against a
real DNS server (:mod:`.dns`, dnsmasq), memory limits in cgroups (:mod:`.cgroups`), CRI-format log
files served at ``/containerLogs`` (:mod:`.crilog`, :mod:`.logserver`). Containers run in an
overlay of this machine made to look like ``horovod/horovod:0.28.1`` (:mod:`.image`).

Everything it creates carries the names in :mod:`.marks`, so :mod:`.cleanup` finds what a killed
run left. Start it with ``python -m testing.emulated_cluster --kubeconfig PATH [--s3]`` (as root).
"""
