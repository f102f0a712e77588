"""The scripted cluster: the real control plane (kube-apiserver, kube-controller-manager,
kube-scheduler, etcd, MPI Operator v0.8.2) on loopback only, with a scripted kubelet as its node
agent that the test drives. No bridge and no machine lock: several runs (and the emulated
cluster) may run at once on one machine. Needs root (network namespace, cgroup) and the
binaries of ``scripts/setup-control-plane.sh``."""
