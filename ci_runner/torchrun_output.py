"""How torchrun's ranks' output reaches the log: both streams teed (``--tee 3``), each line
prefixed with its global rank, ``[3]<std>:text``."""

from __future__ import annotations

from typing import Final

# torchrun fills in ${rank} (the global rank) with string.Template; "<std>" stays as written.
TORCHRUN_PREFIX_TEMPLATE: Final = "[${rank}]<std>:"
# torch 2.13's torchrun takes the template from this variable of its environment only (run.py's
# config_from_args); it has no command-line option for it.
PREFIX_TEMPLATE_VARIABLE: Final = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
# --tee's value for both stdout and stderr (torch.distributed.elastic's Std.ALL).
TEE_BOTH: Final = "3"
