"""The test infrastructure: the fakes, the emulated cluster and the helpers that the tests, the
benchmarks and ``make demo-cluster`` share. Nothing here imports from ``tests/``.

- :mod:`testing.fake_kube`: an in-process fake kube-apiserver (no controllers) for the client's
  unit tests that run without root;
- :mod:`testing.control_plane`: the real control plane (etcd, kube-apiserver, controllers,
  scheduler, MPI Operator v0.8.2), built from Go modules, and its run;
- :mod:`testing.scripted_cluster`: that control plane on loopback with a scripted kubelet (the
  test plays the nodes' part) and a fault proxy in front of kube-apiserver;
- :mod:`testing.emulated_cluster`: that control plane with real nodes (kubelet, containerd,
  runc, CNI) running images built here;
- :mod:`testing.fake_gitlab`: GitLab's REST API as ci-runner uses it;
- :mod:`testing.mermaid`: the real Mermaid in headless Chromium;
- :mod:`testing.paths`, :mod:`testing.git`, :mod:`testing.golden`: files, git, golden files.
- :mod:`testing.ci_templates`: writes templates/project/train.yml, the job file made from the
  component.
- helpers several test modules share: :mod:`testing.agent_kubeconfig` (the GitLab agent's
  KUBECONFIG), :mod:`testing.mr_pipeline` (an MR pipeline's CI job and its services, the
  scripted cluster among them),
  :mod:`testing.local_training` (the example through real horovodrun),
  :mod:`testing.gitlab_ci_local`, :mod:`testing.metric_specs`, :mod:`testing.comment_shape` (a
  comment's Markdown structure).
"""
