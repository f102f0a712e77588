"""After a run: metrics parsed from the log, outputs listed in storage, the report rendered, and
``publish``, which puts them together and hands the comment to GitLab."""
