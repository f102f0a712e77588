"""What torchrun (PyTorch's ``torch.distributed.run``) writes, as ci-runner reads it: the ranks'
line prefix it is told to use, and the marks of its end-of-run error report.

Checked against torch 2.13.0 running for real (CPU, gloo, two ranks: the fixtures and their
``capture.sh`` in ``tests/data/torchrun/``); each constant names the torch file it comes from.

* With ``--tee 3`` torchrun copies each rank's stdout to its own stdout and the rank's stderr to
  its own stderr, one line at a time, each line after the prefix made from
  :data:`TORCHRUN_PREFIX_TEMPLATE` (``torch/distributed/elastic/multiprocessing/tail_log.py``,
  ``tail_logfile``; the template is substituted per rank in
  ``torch/distributed/elastic/agent/server/local_elastic_agent.py``). Both streams get the same
  prefix, ``[3]<std>:text``, which :mod:`ci_runner.results.rank_prefix` reads like horovodrun's.
* torchrun has no option for the template: it reads :data:`PREFIX_TEMPLATE_VARIABLE` from its
  environment (``torch/distributed/run.py``, ``config_from_args``); ``--log-line-prefix-template``
  is refused as an unrecognized argument (exit code 2).
* torchrun writes the ranks' lines through Python's ``sys.stdout`` without flushing: unless
  ``PYTHONUNBUFFERED=1`` is in torchrun's own environment too, a pipe (a pod's log) gets them in
  blocks of 8 KiB, or at the end (measured: every line of a 4 s run came at once).
* A rank that calls ``init_process_group`` gets an excepthook that starts each line of an uncaught
  exception's traceback with ``[rank<N>]: `` (:data:`EXCEPTHOOK_PREFIX`), inside torchrun's own
  prefix: ``[1]<std>:[rank1]: ValueError: boom``.
* When a rank fails torchrun stops the others with SIGTERM (:data:`CLOSING_SIGNAL`), then raises
  ``ChildFailedError``, whose text is its report: every failed rank, then the one it observed
  first under :data:`ROOT_CAUSE_HEADING`, each as ``name : value`` fields (:data:`REPORT_FIELD`).
"""

from __future__ import annotations

import re
import signal
from typing import Final

from ci_runner.variables import TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE

# The prefix of every line torchrun tees: ``[<global rank>]<std>:`` on stdout and stderr alike.
# ${rank} is the global rank; ${local_rank} and ${role_name} are the template's other names.
TORCHRUN_PREFIX_TEMPLATE: Final = "[${rank}]<std>:"
# torchrun's ``--tee`` (and ``--redirects``) value for both streams (``Std.ALL`` in
# torch/distributed/elastic/multiprocessing/api.py: 1 stdout, 2 stderr, 3 both).
TEE_BOTH: Final = "3"
# Where torchrun reads the template (torch/distributed/run.py).
PREFIX_TEMPLATE_VARIABLE: Final = TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
# What torchrun's environment needs for the ranks' lines to carry their rank.
TORCHRUN_ENVIRONMENT: Final = ((PREFIX_TEMPLATE_VARIABLE, TORCHRUN_PREFIX_TEMPLATE),)
# A line's prefix as the template makes it, its group the global rank (ASCII digits, and few).
LINE_PREFIX: Final = re.compile(
    re.escape(TORCHRUN_PREFIX_TEMPLATE).replace(re.escape("${rank}"), "([0-9]{1,9})")
)

# torch/distributed/distributed_c10d.py, init_process_group: the excepthook's per-line prefix (an
# empty line of the traceback stays empty).
EXCEPTHOOK_PREFIX: Final = re.compile(r"\[rank[0-9]{1,9}\]: ?")

# torch/distributed/elastic/multiprocessing/errors/__init__.py, ChildFailedError.format_msg and
# its failure template: the report's headings, its borders (a line of "=" around it, of "-"
# between its parts) and each failure's fields; a field's value may go on over the next lines,
# indented (the traceback of an error file).
ROOT_CAUSE_HEADING: Final = "Root Cause (first observed failure):"
FAILURES_HEADING: Final = "Failures:"
REPORT_BORDER: Final = re.compile(r"[=-]{10,}\s*")
REPORT_FAILURE_INDEX: Final = re.compile(r"\[[0-9]+\]:\s*")
REPORT_FIELD: Final = re.compile(
    r"  (?P<name>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<value>.*)"
)
REPORT_CONTINUATION_INDENT: Final = "  "  # before each line of a field's further lines
# The fields' values: "1 (local_rank: 1)"; "-9 (pid: 12527)  (SIGKILL)"; "<N/A>" when the rank
# wrote no error file (its entry point is not decorated with @record), whose traceback field is
# then a pointer to torch's documentation, or a signal's "Signal 9 (SIGKILL) received by PID ...".
REPORT_RANK: Final = re.compile(r"(?P<rank>-?[0-9]{1,9})\b")
REPORT_EXITCODE: Final = re.compile(r"(?P<code>-?[0-9]{1,9})\b(?:.*\((?P<signal>SIG[A-Z0-9+]+)\))?")
NOT_AVAILABLE: Final = "<N/A>"

# torch/distributed/elastic/multiprocessing/api.py (PContext.close, _get_default_signal): the
# signal the other ranks get when one failed; a rank ended by it did not fail by itself.
CLOSING_SIGNAL: Final = signal.SIGTERM
# A collective whose peer died (gloo's TCP transport, third_party/gloo/.../tcp/pair.cc, as torch
# 2.13's RuntimeError quotes it): that rank failed because another did.
PEER_GONE: Final = re.compile(r"Connection (?:closed|reset) by peer")
