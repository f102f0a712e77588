"""The real control plane above the emulated and scripted clusters' nodes: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, MPI Operator v0.8.2 and Kueue v0.17.0, the binaries that
``scripts/setup-control-plane.sh`` builds from the Go modules in ``modules/``."""
