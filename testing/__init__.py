"""The test infrastructure: the fakes, the emulated cluster and the helpers that the tests, the
benchmarks and ``make demo-cluster`` share. Nothing here imports from ``tests/``.

- :mod:`testing.fake_kube`: an in-process Kubernetes API and control plane for unit tests;
- :mod:`testing.emulated_cluster`: nodes whose pods are real processes;
- :mod:`testing.control_plane`: the real control plane's binaries, built from Go modules;
- :mod:`testing.fake_gitlab`: GitLab's REST API as ci-runner uses it;
- :mod:`testing.mermaid`: the real Mermaid in headless Chromium;
- :mod:`testing.paths`, :mod:`testing.git`, :mod:`testing.golden`: files, git, golden files.
- helpers several test modules share: :mod:`testing.agent_kubeconfig` (the GitLab agent's
  KUBECONFIG), :mod:`testing.mr_pipeline` (an MR pipeline's CI job and its services, the
  scripted cluster among them),
  :mod:`testing.local_training` (the example through real horovodrun),
  :mod:`testing.gitlab_ci_local`, :mod:`testing.metric_specs`, :mod:`testing.comment_shape` (a
  comment's Markdown structure).
"""
