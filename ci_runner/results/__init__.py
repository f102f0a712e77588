"""After a run: metrics parsed from the log, outputs listed in storage, the report rendered, and
the stage that puts them together and hands the comment to GitLab."""
