"""An emulated Kubernetes cluster on this machine: the real control plane
(:mod:`testing.control_plane`), CoreDNS (:mod:`.coredns`) and real nodes.

Each node is kubelet v1.35.4 with its own containerd, runc and the CNI bridge and host-local
plugins (:mod:`.realcluster`, :mod:`.realnode`, :mod:`.containerd`, :mod:`.kubeletconfig`), on a
bridge of our own (:mod:`testing.host.network`), registered with its ``system:node``
certificate. The images are built here from Debian's packages and the project's virtualenv
(:mod:`.nodeimages`, :mod:`.sitelayer`), imported once into a seed containerd root that each node
copies by hard links (:mod:`.seedroot`, :mod:`.imagestore`).

Everything it creates carries the names in :mod:`testing.host.marks`, so :mod:`.cleanup` finds
what a killed run left. Start it with ``python -m testing.emulated_cluster --kubeconfig PATH
[--s3]`` (as root).
"""
