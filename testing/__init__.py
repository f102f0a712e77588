"""The test infrastructure: the fakes, the emulated cluster and the helpers that the tests, the
benchmarks and ``make demo-cluster`` share. Nothing here imports from ``tests/``.

- :mod:`testing.fake_kube`: an in-process Kubernetes API and control plane for unit tests;
- :mod:`testing.emulated_cluster`: nodes whose pods are real processes;
- :mod:`testing.control_plane`: the real control plane's binaries, built from Go modules;
- :mod:`testing.fake_gitlab`: GitLab's REST API as ci-runner uses it;
- :mod:`testing.mermaid`: the real Mermaid in headless Chromium;
- :mod:`testing.paths`, :mod:`testing.git`, :mod:`testing.golden`: files, git, golden files.
"""
