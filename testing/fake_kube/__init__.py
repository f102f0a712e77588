"""An in-process Kubernetes API server and control plane, for the unit tests of ci-runner's
Kubernetes client that must run fast and without root: HTTP handling, retries, watches, 403s and
the scenarios the scripted kubelet plays. What a real cluster does is tested on the real control
plane (:mod:`testing.control_plane`) under the emulated cluster."""
