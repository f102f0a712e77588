"""GitLab's REST API as ci-runner uses it: the client and its errors, the merge-request (or
commit) comment, and the target branch's saved metrics."""
