"""What each setup container (the init containers fetch-code and install-requirements) gets in
its environment: the one allow-list, which the manifest, the README and the schema reference follow.

The setup containers run before any rank, and fetch-code holds the git credential: they get no
train.yaml ``env`` and no ``secrets``, except pip's settings below in install-requirements, the
container that runs pip. No ``GIT_*`` variable reaches either: fetch-code runs git with a clean
environment of its own (fetch-code.sh), and reads the credential from a file only it mounts.
"""

from __future__ import annotations

from typing import Final

from ci_runner import variables

FETCH_CODE: Final = "fetch-code"
INSTALL_REQUIREMENTS: Final = "install-requirements"
# ci-runner's own variables, by container, in the order the manifest lists them.
SETUP_ENV: Final = {
    FETCH_CODE: (
        variables.CI_RUNNER_REPO_URL,
        variables.CI_RUNNER_SHA,
        variables.CI_RUNNER_GIT_CREDENTIALS,
    ),
    INSTALL_REQUIREMENTS: (
        variables.CI_RUNNER_SHA,
        variables.CI_RUNNER_REQUIREMENTS,
        "PIP_CACHE_DIR",
        variables.CI_RUNNER_VENV_CACHE,  # with a pip cache claim only
    ),
}
# pip's settings that train.yaml's ``env`` (or ``secrets``, for an index URL with a password) may
# give install-requirements: where packages come from and which are chosen. Not those that move
# pip's files or read more configuration (PIP_TARGET, PIP_PREFIX, PIP_ROOT, PIP_USER, PIP_SRC,
# PIP_LOG, PIP_CONFIG_FILE, PIP_REQUIREMENT, PIP_PYTHON, PIP_KEYRING_PROVIDER...), nor
# PIP_CACHE_DIR, which is ci-runner's. The virtualenv cache key (install-requirements.sh) hashes
# every PIP_* variable the container sees: these and the image's own.
PIP_SETTINGS: Final = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_NO_INDEX",
    "PIP_FIND_LINKS",
    "PIP_TRUSTED_HOST",
    "PIP_CERT",
    "PIP_CLIENT_CERT",
    "PIP_PROXY",
    "PIP_TIMEOUT",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_RETRIES",
    "PIP_PRE",
    "PIP_ONLY_BINARY",
    "PIP_NO_BINARY",
    "PIP_PREFER_BINARY",
    "PIP_NO_BUILD_ISOLATION",
    "PIP_NO_COMPILE",
    "PIP_PROGRESS_BAR",
)
