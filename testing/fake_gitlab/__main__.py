"""The fake GitLab as a command anyone can start::

    python -m testing.fake_gitlab --state FILE.json [--port N] [--external-url URL]

prints ``ready <base URL>`` once it serves and runs until SIGTERM (or SIGINT). FILE.json seeds it::

    {"users": [{"id": 1, "username": "ci-runner-bot", "token": "...", "scopes": ["api"]}],
     "projects": [{"id": 42, "path": "team/simple_ml"},
                  {"id": 43, "path": "alice/simple_ml", "forked_from": 42,
                   "maintainers": [1]}],
     "merge_requests": [{"project_id": 42, "iid": 7, "source_project_id": 43,
                         "source_branch": "x", "target_branch": "main", "sha": "<40 hex>",
                         "state": "opened"}],
     "pipelines": [{"project_id": 42, "ref": "main", "status": "success",
                    "jobs": {"train": {"ci-runner-out/metrics.json": "<text>"}}}]}

Everything it holds afterwards (notes, discussions) is read back through its REST API.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testing.fake_gitlab.server import FakeGitLab


class StateError(Exception):
    """The state file is not what this command reads."""


def seed(fake: FakeGitLab, state: Mapping[str, Any]) -> None:
    """Fill ``fake`` from the parsed state file (:class:`StateError` on a wrong shape)."""
    try:
        users = {}
        for entry in state.get("users", []):
            user = fake.add_user(str(entry["username"]), user_id=int(entry["id"]))
            users[user.id] = user
            if entry.get("token"):
                fake.add_token(str(entry["token"]), user, entry.get("scopes", ["api"]))
        for entry in state.get("projects", []):
            parent = entry.get("forked_from")
            project = fake.add_project(
                str(entry["path"]),
                project_id=int(entry["id"]),
                default_branch=str(entry.get("default_branch", "main")),
                forked_from=fake.project(int(parent)) if parent is not None else None,
            )
            for user_id in entry.get("maintainers", []):
                fake.add_maintainer(project, users[int(user_id)])
        for entry in state.get("merge_requests", []):
            source = entry.get("source_project_id")
            target = fake.project(int(entry["project_id"]))
            fake.add_merge_request(
                target,
                int(entry["iid"]),
                sha=str(entry["sha"]),
                source_branch=str(entry.get("source_branch", "feature")),
                target_branch=str(entry.get("target_branch", target.default_branch)),
                state=str(entry.get("state", "opened")),
                commits=[str(c) for c in entry.get("commits", [])],
                title=str(entry.get("title", "")),
                source_project=fake.project(int(source))
                if source is not None and int(source) != target.id
                else None,
            )
        for entry in state.get("pipelines", []):
            jobs = {
                str(name): {str(path): str(text).encode() for path, text in files.items()}
                for name, files in entry.get("jobs", {}).items()
            }
            fake.add_pipeline(
                fake.project(int(entry["project_id"])),
                str(entry["ref"]),
                status=str(entry.get("status", "success")),
                sha=entry.get("sha"),
                source=str(entry.get("source", "push")),
                jobs=jobs,
            )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StateError(f"{type(error).__name__}: {error}") from error


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.fake_gitlab", description=__doc__)
    parser.add_argument("--state", required=True, type=Path, help="the JSON file to seed from")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any)")
    parser.add_argument("--external-url", help="GitLab's external_url (default: the address)")
    args = parser.parse_args(argv)
    try:
        state = json.loads(args.state.read_text())
        fake = FakeGitLab(external_url=args.external_url, port=args.port)
        seed(fake, state)
    except (OSError, ValueError, StateError) as error:
        print(f"fake_gitlab: cannot read the state {args.state}: {error}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with fake:
        print(f"ready {fake.url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
