"""How torchrun's ranks' output reaches the log: both streams teed (``--tee 3``), each line
prefixed with its global rank (``--log-line-prefix-template``), ``[3]<std>:text``."""

from __future__ import annotations

from typing import Final

# torchrun fills in ${rank} (the global rank) with string.Template; "<std>" stays as written.
TORCHRUN_PREFIX_TEMPLATE: Final = "[${rank}]<std>:"
# --tee's value for both stdout and stderr (torch.distributed.elastic's Std.ALL).
TEE_BOTH: Final = "3"
