"""An in-process fake of kube-apiserver (no controllers), for the unit tests of ci-runner's
Kubernetes client that must run fast and without root (``make unit``): connecting, HTTP handling
and retries, watches, 401/403/409/422 answers. What a cluster does is tested on the real control
plane (:mod:`testing.control_plane`): the scripted cluster (:mod:`testing.scripted_cluster`) and
the emulated cluster (:mod:`testing.emulated_cluster`)."""
