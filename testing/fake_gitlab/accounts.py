"""The identities the tests give the fake GitLab."""

from __future__ import annotations

# The fake GitLab's bot: its token must never show up in an error message.
GITLAB_TOKEN = "glpat-CANARY-9f2c71d4e8"
GITLAB_BOT = "project_42_bot"
GITLAB_PROJECT = "group/proj"
# The commit the pipeline runs on, known to the fake GitLab's project.
GITLAB_SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
