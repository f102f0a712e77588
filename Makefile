# The README's commands. Each does its own set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ci-runner-installed

DEMO_DIR := demo-output
DEMO_DATA := $(DEMO_DIR)/data
# e.g. make demo DEMO_FLAGS=--allow-dirty (to train uncommitted changes)
DEMO_FLAGS ?=

.PHONY: dist image-check demo demo-ddp demo-cluster horovod torch cluster-tools control-plane real-node gitlab-ci-local mermaid screenshots test lint typecheck unit bench env clean

## demo: train the example's train.yaml on this machine with 2 Horovod ranks (no cluster, no GitLab)
demo: env horovod $(DEMO_DATA)/diabetes.csv
	$(VENV)/bin/ci-runner train --local --config examples/simple_ml/train.yaml \
		--data $(DEMO_DATA)/ --outputs $(DEMO_DIR)/model/ --output-dir $(DEMO_DIR) $(DEMO_FLAGS)

## demo-ddp: the same with PyTorch DDP: the example's train-ddp.yaml (distributed: torchrun) on this machine with 2 ranks, torch alone (no Horovod)
demo-ddp: env torch $(DEMO_DATA)/diabetes.csv
	$(VENV)/bin/ci-runner train --local --config examples/simple_ml/train-ddp.yaml \
		--data $(DEMO_DATA)/ --outputs $(DEMO_DIR)/model-ddp/ --output-dir $(DEMO_DIR)/ddp $(DEMO_FLAGS)

$(DEMO_DATA)/diabetes.csv: examples/simple_ml/prepare_data.py | env
	$(PY) examples/simple_ml/prepare_data.py $(DEMO_DATA)/

## demo-cluster: the example through `ci-runner train` on Kubernetes: the emulated cluster on this machine (root), data and model on its S3
demo-cluster: env horovod cluster-tools control-plane real-node
	$(PY) -m testing.emulated_cluster.demo

## horovod: torch 2.13 (PyPI's build, run on the CPU) and Horovod 0.28.1 (PyTorch + Gloo + MPI), built once into a cached wheel
horovod: env
	scripts/setup-horovod.sh $(VENV)

## torch: torch 2.13 (PyPI's build, run on the CPU) and the example's libraries, without Horovod: what distributed: torchrun needs here
torch: env
	scripts/setup-torch.sh $(VENV)

## cluster-tools: iproute2, util-linux and the OpenSSH client for the emulated cluster and its tests (apt-get, as root), and the stock image's pip for its variant image (pip download, once)
cluster-tools: env
	scripts/setup-emulated-cluster.sh
	$(PY) -m testing.emulated_cluster.stockpip

## control-plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and MPI Operator v0.8.2 built from their pinned Go modules, once (cached; needs Go 1.26)
control-plane:
	scripts/setup-control-plane.sh >/dev/null

## real-node: what the emulated cluster's real nodes run: Debian's containerd, runc, CNI plugins and busybox-static, gcc for the pause image, debootstrap for the images (apt-get, as root), and the kubelet with the control plane
real-node: control-plane
	scripts/setup-real-node.sh

## gitlab-ci-local: gitlab-ci-local 4.75.1 on Node.js 22 (both from npm, into the cache) and rsync, for the tests that run the CI files
gitlab-ci-local:
	scripts/setup-gitlab-ci-local.sh

## mermaid: Debian's headless Chromium and Mermaid 10.7 (GitLab's) and 11.x from npm, for the chart tests
mermaid: env
	scripts/setup-mermaid.sh $(VENV)

## screenshots: PNGs of the golden comments as GitLab draws them, light and dark (out/screenshots/)
SCREENSHOTS ?= out/screenshots
screenshots: env mermaid
	$(PY) -m testing.mermaid.screenshots $(SCREENSHOTS)

## test: lint, type-check and run every test (slow end-to-end tests included)
test: env horovod cluster-tools control-plane real-node gitlab-ci-local mermaid lint typecheck image-check
	$(PY) -m pytest -q --durations=25

## lint: ruff (check and format) over the Python, shellcheck (Debian's package, installed when missing) over every shell script
lint: env
	$(VENV)/bin/ruff check ci_runner testing tests bench
	$(VENV)/bin/ruff format --check ci_runner testing tests bench
	scripts/apt-install.sh lint shellcheck
	shellcheck .ci/run $$(git ls-files '*.sh')

typecheck: env
	$(VENV)/bin/mypy

## unit: the fast tests only (no root: neither slow nor on the real control plane)
unit: env
	$(PY) -m pytest -q -m "not slow and not control_plane"

## bench: what ci-runner costs on top of training, each figure next to its target (bench/README.md)
# e.g. make bench BENCH_FLAGS=--quick (small sizes, for development)
BENCH_FLAGS ?=
bench: env horovod cluster-tools control-plane real-node mermaid
	$(PY) -m bench.run $(BENCH_FLAGS)

## dist: the wheel and sdist in dist/ (the release job uploads them; the Dockerfile installs the wheel)
dist: env
	rm -rf dist
	$(PY) -m build --outdir dist .

## image-check: the Dockerfile's image, rebuilt with debootstrap (no container daemon), runs ci-runner (root; installs debootstrap)
image-check: dist
	scripts/apt-install.sh image-check debootstrap
	$(PY) -m testing.image_check --dockerfile Dockerfile

## env: the project's virtualenv with ci-runner and its test tools
env: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
