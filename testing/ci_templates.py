"""templates/project/train.yml, the training job for `include: project` and a copy in a user's
repository, made from the CI/CD component templates/train.yml (tests/test_gitlab_ci.py keeps the
two equal)::

    python -m testing.ci_templates          # writes templates/project/train.yml
    python -m testing.ci_templates --check  # exit 1 if it is not what it would write

GitLab interpolates `$[[ component.* ]]` only in a file included with `include: component`, and
refuses it elsewhere ("unknown interpolation provided: `version` in `component.version`",
spec/services/ci/create_pipeline_service/component_context_spec.rb). The job file is the
component without its component context: no `spec:component`, no `image_repository`, no variable
holding the released image, and an `image` input that is required (GitLab and gitlab-ci-local
refuse a missing one: "`image` input: required value has not been provided"). Everything else,
every other input included, is the component's text, so an input is added to the component only.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from testing.paths import REPO_ROOT

COMPONENT = REPO_ROOT / "templates" / "train.yml"
JOB_FILE = REPO_ROOT / "templates" / "project" / "train.yml"

HEADER = """\
# GENERATED from templates/train.yml by `python -m testing.ci_templates`: edit that file instead.
#
# ci-runner's training job for `include: project` and for a copy in your repository, where the
# CI/CD component's own version does not exist (GitLab knows `$[[ component.version ]]` only under
# `include: component`). It is the component templates/train.yml with the same inputs, except that
# `image` is required: pass the ci-runner image of the version you include, e.g.
#
#   include:
#     - project: your-group/ci-runner
#       ref: 1.2.0
#       file: templates/project/train.yml
#       inputs:
#         image: $CI_REGISTRY/your-group/ci-runner:1.2.0
#
# or, copied into your repository (e.g. as ci/train.yml), `- local: ci/train.yml` with the same
# inputs. Include the component instead where you can (README "GitLab quick start").
"""

JOB_IMAGE = (
    "    image:\n"
    "      # Required: outside `include: component` there is no component version to default to.\n"
    "      # An image reference or CI variables: no spaces, no empty tag.\n"
    "      regex: {regex}\n"
    "      description: The job's image, with ci-runner installed (it only drives the cluster),"
    " e.g. the ci-runner project's $CI_REGISTRY/<group>/ci-runner:<version>.\n"
)


class NotGenerable(Exception):
    """The component no longer has the shape the job file is made from: one line saying what."""


def _replace_once(text: str, old: str, new: str, what: str) -> str:
    if text.count(old) != 1:
        raise NotGenerable(f"templates/train.yml: {what} not found exactly once")
    return text.replace(old, new)


def _input_block(spec: str, name: str) -> str:
    """The lines of input ``name`` in the spec: its key line up to the next input's."""
    match = re.search(rf"^    {name}:\n(?:(?:      .*|)\n)*", spec, re.M)
    if match is None:
        raise NotGenerable(f"templates/train.yml: spec:inputs:{name} not found")
    return match.group(0)


def job_file(component: str) -> str:
    """The job file's text for the component's text ``component``."""
    spec_start = component.find("\nspec:\n")
    if spec_start < 0 or "\n---\n" not in component:
        raise NotGenerable("templates/train.yml: no `spec:` header followed by `---`")
    spec, body = component[spec_start + 1 :].split("\n---\n", 1)
    spec = _replace_once(spec, "  component: [version]\n", "", "spec:component: [version]")
    image = _input_block(spec, "image")
    regex = re.search(r"^      regex: (.*)$", image, re.M)
    if regex is None:
        raise NotGenerable("templates/train.yml: spec:inputs:image has no regex")
    spec = spec.replace(image, JOB_IMAGE.format(regex=regex.group(1)))
    spec = spec.replace(_input_block(spec, "image_repository"), "")
    released = re.findall(r"^    CI_RUNNER_RELEASED_IMAGE: .*\n", body, re.M)
    if len(released) != 1:
        raise NotGenerable("templates/train.yml: the job's CI_RUNNER_RELEASED_IMAGE not found")
    body = body.replace(released[0], "")
    if "$[[component." in body.replace(" ", "") or "CI_RUNNER_RELEASED_IMAGE" in body:
        raise NotGenerable("templates/train.yml: the job uses the component context elsewhere")
    return f"{HEADER}{spec}\n---\n{body}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.ci_templates", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    try:
        text = job_file(COMPONENT.read_text(encoding="utf-8"))
    except NotGenerable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.check:
        if not JOB_FILE.is_file() or JOB_FILE.read_text(encoding="utf-8") != text:
            print(
                "error: templates/project/train.yml is not templates/train.yml's job file; fix: "
                "python -m testing.ci_templates",
                file=sys.stderr,
            )
            return 1
        return 0
    JOB_FILE.parent.mkdir(exist_ok=True)
    JOB_FILE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
