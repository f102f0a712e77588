"""How torchrun writes the ranks' output: every line tagged with its global rank, as the log
parsers read it.

torchrun (``torch.distributed.run``) tees each local rank's stdout and stderr (``--tee``) to its
own and prefixes every line with ``--log-line-prefix-template``, whose ``${rank}`` is the global
rank; ``<std>`` stands for either stream.
"""

from __future__ import annotations

from typing import Final

# torchrun's --log-line-prefix-template: "[3]<std>:text" for global rank 3 (string.Template).
TORCHRUN_PREFIX_TEMPLATE: Final = "[${rank}]<std>:"
# torchrun's --tee: 3 is both streams (torch.distributed.elastic.multiprocessing.Std.ALL).
TEE_BOTH: Final = "3"
