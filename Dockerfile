# The image of the CI job that runs ci-runner (the component's `image` input). It drives the
# cluster and does not train: Debian's Python, git (every ci-runner command reads the commit with
# it), CA certificates for GitLab and the Kubernetes API, and ci-runner in a virtualenv. It is
# also the pods' setup image by default: fetch-code runs git in it, and copies its uv for
# install-requirements, which installs a commit's requirements with it (pip without it).
#
# Build from a checkout after `make dist` (the wheel in dist/):
#   buildah build --build-arg VERSION=0.1.0 --build-arg SOURCE=https://<gitlab>/<group>/ci-runner .
# `make image-check` builds the same packages into a root filesystem with debootstrap and runs
# ci-runner in it; it reads the package list from the `apt-get install` line below.
FROM debian:bookworm-slim

ARG VERSION
ARG SOURCE
LABEL org.opencontainers.image.title="ci-runner" \
      org.opencontainers.image.description="Horovod training on Kubernetes, driven from GitLab CI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

COPY dist/*.whl /tmp/wheel/
RUN python3 -m venv /opt/ci-runner \
    && /opt/ci-runner/bin/pip install --no-cache-dir --disable-pip-version-check /tmp/wheel/*.whl \
        "uv>=0.9,<1" \
    && rm -rf /tmp/wheel \
    && useradd --create-home --uid 1000 --user-group ci-runner \
    && printf '[safe]\n\tdirectory = *\n' > /etc/gitconfig
ENV PATH=/opt/ci-runner/bin:$PATH

# GitLab Runner runs the job's script as this user in a checkout its helper cloned as root: git
# refuses such a repository ("dubious ownership") unless it is a safe.directory (/etc/gitconfig);
# the docker executor's umask 0000 leaves it writable (ci-runner writes its outputs there).
# Numeric (the ci-runner user made above): with runAsNonRoot (PodSecurity restricted, or the
# Kubernetes executor's security context) the kubelet refuses a user name, "image has non-numeric
# user (ci-runner), cannot verify user is non-root" (pkg/kubelet/kuberuntime/security_context_others.go).
USER 1000:1000
WORKDIR /home/ci-runner
