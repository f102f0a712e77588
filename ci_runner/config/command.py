"""What train.yaml's ``command`` will not do as its author may expect: pure, one warning line each.

ci-runner starts ``mpirun`` (``horovodrun`` for an elastic job) itself, and every rank then runs
``command`` as a program with its arguments, never through a shell: a command that starts
``horovodrun``/``mpirun`` would start MPI again inside each rank, and shell syntax (``&&``, ``;``,
``|``, redirections, ``$VAR``) reaches the program as plain arguments. Both are valid YAML and
render an MPIJob, so they are warnings, shown by ``validate``, ``render`` and ``train``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Final

LAUNCHERS: Final = frozenset({"horovodrun", "mpirun", "mpiexec", "orterun"})
SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})
# Words a shell would read as operators or redirections: whole arguments, or (``cd x;``) a
# separator glued to the end of one.
_OPERATORS: Final = frozenset(
    {"&&", "||", ";", ";;", "|", "|&", "&", ">", ">>", "<", "<<", "&>", "2>", "2>>", "2>&1", ">&2"}
)
_GLUED: Final = re.compile(r"[^\s;&|]+(;|&&|\|\|)$")
_EXPANSION: Final = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{|\()|`")
_SHOWN: Final = 3  # shell words quoted in the warning


def command_warnings(command: Sequence[str], source: str) -> list[str]:
    """The warnings for ``command`` (train.yaml's argv) of the file ``source``."""
    if not command:
        return []
    warnings = []
    program = posixpath.basename(command[0])
    if program in LAUNCHERS:
        warnings.append(
            f"{source}: command starts with {program}, but ci-runner starts mpirun itself and "
            f"runs command inside each rank, so every rank would start {program} again; fix: "
            "write only what each rank runs, e.g. command: python train.py (workers and "
            "slots_per_worker say how many ranks)"
        )
    if program in SHELLS and "-c" in command[1:]:
        return warnings  # an explicit shell reads its script's syntax itself
    found = [arg for arg in command if _shell_syntax(arg)]
    if found:
        shown = ", ".join(_quoted(arg) for arg in found[:_SHOWN])
        more = f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
        warnings.append(
            f"{source}: command holds shell syntax ({shown}{more}) that no shell reads: each "
            "rank runs command as a program and its arguments, which get these words as they "
            "are; fix: put the steps in a script in the repository and run that (command: sh "
            "train.sh), and read variables in your code (os.environ)"
        )
    return warnings


def _shell_syntax(arg: str) -> bool:
    return arg in _OPERATORS or bool(_GLUED.fullmatch(arg)) or bool(_EXPANSION.search(arg))


def _quoted(arg: str) -> str:
    text = arg if len(arg) <= 40 else arg[:39] + "…"
    return repr(text)
