"""How a script is started: under torchrun (one process per rank), or directly, to start its own ranks.

Scripts written for ``torch.multiprocessing.spawn`` (the official DDP tutorial's
``mp.spawn(demo_basic, nprocs=N)``) start their ranks themselves; under torchrun they
would be started N times over and their children hang on torchrun's agent store. In the
``self-spawn`` mode the runner starts the script once with the interpreter (no torchrun)
and recognises the processes it spawns as ranks (``rankwatch._spawn``). A single-process
script (``DataParallel`` over several GPUs) is the one-process case of that mode.

``auto`` reads the script's text: a call of ``mp.spawn`` / ``torch.multiprocessing.spawn`` /
``start_processes`` means ``self-spawn``, anything else ``torchrun``. A module (``-m``) or
an unreadable script is not guessed at: ``torchrun``. The choice and its reason are said
in the run's first event (``EventKind.LAUNCH_MODE``) and in the command preview.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rankwatch import _templates as templates
from runner.profile.spec import AUTO, SELF_SPAWN, TORCHRUN, LaunchSpec

MAX_SCRIPT_BYTES = 2 * 1024 * 1024
"""Longer scripts are not read for ``auto`` (they are torchrun's)."""
SPAWN_CALL = re.compile(
    r"^[^#\n]*?\b(?P<call>(?:(?:mp|multiprocessing|torch\.multiprocessing)\.(?:spawn|start_processes)"
    r"|start_processes))\s*\(",
    re.MULTILINE)
"""A call of torch's spawn outside a comment: ``mp.spawn(``, ``torch.multiprocessing.spawn(``,
``start_processes(``. Python's own ``multiprocessing.Process`` is not one: such scripts
start helpers, not ranks."""
TORCH_MULTIPROCESSING = re.compile(r"^\s*(?:import torch\.multiprocessing|from torch(?:\.multiprocessing)? import)",
                                   re.MULTILINE)


@dataclass(frozen=True)
class LaunchModeChoice:
    mode: str
    """``torchrun`` or ``self-spawn``."""
    reason: str
    """Why, in a few words a person reads in the preview and the run's events."""
    chosen_by: str
    """``profile`` (the user chose it) or ``auto``."""

    def describe(self) -> str:
        return f"launch mode: {self.mode} ({self.reason})"


def choose_launch_mode(spec: LaunchSpec, script: str | None) -> LaunchModeChoice:
    """The mode ``spec`` runs in; ``script`` is the script's absolute path on this machine."""
    if spec.launch_mode != AUTO:
        return LaunchModeChoice(spec.launch_mode, "chosen in the profile", "profile")
    if spec.module or script is None:
        return LaunchModeChoice(TORCHRUN, "a module is not read to guess", "auto")
    if spec.slurm is not None or spec.is_multi_node:
        return LaunchModeChoice(TORCHRUN, "several nodes need torchrun", "auto")
    if templates.uses_templates(spec.args):
        return LaunchModeChoice(TORCHRUN, "the arguments hold per-rank placeholders", "auto")
    found = spawn_call(script)
    if found is None:
        return LaunchModeChoice(TORCHRUN, "the script does not call torch.multiprocessing.spawn", "auto")
    return LaunchModeChoice(SELF_SPAWN, f"the script starts its own ranks: {found}", "auto")


def spawn_call(script: str) -> str | None:
    """``"line N: mp.spawn(...)"`` for the script's first call of torch's spawn, or ``None``."""
    try:
        path = Path(script)
        if path.stat().st_size > MAX_SCRIPT_BYTES:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = SPAWN_CALL.search(text)
    if found is None:
        return None
    if found.group("call") == "start_processes" and TORCH_MULTIPROCESSING.search(text) is None:
        return None  # someone else's start_processes
    line = text.count("\n", 0, found.start("call")) + 1
    return f"{found.group('call')}(...) on line {line}"
