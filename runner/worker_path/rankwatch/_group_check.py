"""Does this rank train inside a process group? Asked once, at its ``CHECK_AT_STEP``-th optimizer step.

torchrun starts ``WORLD_SIZE`` processes and tells each its rank; it is the script
that makes them one job (``init_process_group``, DDP, a framework's strategy). A
script that never does trains ``WORLD_SIZE`` separate models, each on its own, and
nothing fails: Lightning Fabric's ``Fabric()`` with its defaults does exactly this
under torchrun (it picks one device per process and ``SingleDeviceStrategy``). So a
rank of a job with ``WORLD_SIZE`` > 1 that reaches its ``CHECK_AT_STEP``-th optimizer
step without a process group says so in a ``no_process_group`` notice; the runner
compares the ranks' losses and words it (``runner.diagnosis.independent_ranks``):
copies of one training, or ranks that each train alone on purpose.

Facts sent: ``steps`` (optimizer steps made when asked), ``world_size`` and
``local_world_size`` (torchrun's), and when the script imported Lightning Fabric,
``fabric`` (the package: ``lightning_fabric`` or ``lightning.fabric``) with what the
script's ``Fabric`` object says: ``fabric_strategy`` (its class name),
``fabric_world_size``, ``fabric_accelerator`` (``cpu``, ``cuda``, ...),
``fabric_launched`` (the script called ``fabric.launch()``, or Fabric was started by
its CLI), and ``fabric_environment``: the ``LT_*`` variables set, as
``NAME=value`` words (what ``fabric run`` passes).

Cost: a global optimizer step post-hook that counts to ``CHECK_AT_STEP`` and then
returns at once (torch iterates its hooks while calling them, so it cannot remove
itself). Looking for the ``Fabric`` object walks the garbage collector's objects
once, only on a rank that has no process group and imported Fabric.

Standard library only (this runs in the user's interpreter).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import Any

from rankwatch import _torch_hook
from rankwatch.protocol import NO_PROCESS_GROUP

Notify = Callable[..., None]
"""``notify(key, **facts)``: sends a ``notice`` message (``WorkerSession.notice``)."""

CHECK_AT_STEP = 5
"""A script makes its process group before it trains; by this optimizer step it has one."""
FABRIC_PACKAGES = ("lightning_fabric", "lightning.fabric")
FABRIC_ENVIRONMENT = ("LT_CLI_USED", "LT_ACCELERATOR", "LT_DEVICES", "LT_STRATEGY", "LT_NUM_NODES", "LT_PRECISION")
"""What ``fabric run`` sets and ``Fabric()`` reads (``lightning_fabric.cli``, ``connector``)."""
ACCELERATORS = {"CPUAccelerator": "cpu", "CUDAAccelerator": "cuda", "MPSAccelerator": "mps", "XLAAccelerator": "tpu"}


class _ProcessGroupCheck:
    """The optimizer step post-hook: counts steps, asks once, then does nothing."""

    def __init__(self, torch: Any, notify: Notify, world_size: int, local_world_size: int):
        self.torch = torch
        self.notify = notify
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.steps = 0
        self.done = False

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.done:
            return
        self.steps += 1
        if self.steps < CHECK_AT_STEP:
            return
        self.done = True
        try:
            if has_process_group(self.torch):
                return
            self.notify(NO_PROCESS_GROUP, steps=self.steps, world_size=self.world_size,
                        local_world_size=self.local_world_size, **fabric_facts())
        except Exception:
            pass


def install(session: Any) -> None:
    """Ask at the ``CHECK_AT_STEP``-th optimizer step, when ``session`` (a ``WorkerSession``, or
    None: telemetry off) belongs to a job of more than one rank. Never raises."""
    try:
        environment = session.environment if session is not None else None
        if environment is None or environment.world_size < 2:
            return
        notify = session.notice
        world_size, local_world_size = environment.world_size, environment.local_world_size
        _torch_hook.call_when_imported(lambda torch: _hook(torch, notify, world_size, local_world_size))
    except Exception:
        pass


def _hook(torch: Any, notify: Notify, world_size: int, local_world_size: int) -> None:
    try:
        optimizer_module = sys.modules.get("torch.optim.optimizer")
        register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
        if register is not None:
            register(_ProcessGroupCheck(torch, notify, world_size, local_world_size))
    except Exception:
        pass


def has_process_group(torch: Any) -> bool:
    """``torch.distributed`` has a default process group (False on a build without distributed)."""
    distributed = getattr(torch, "distributed", None)
    if distributed is None or not distributed.is_available():
        return False
    return bool(distributed.is_initialized())


def fabric_facts() -> dict[str, object]:
    """What the script's Lightning Fabric says about itself; {} when the script did not import Fabric."""
    package = next((name for name in FABRIC_PACKAGES if name in sys.modules), None)
    if package is None:
        return {}
    facts: dict[str, object] = {"fabric": package}
    environment = [f"{name}={os.environ[name]}" for name in FABRIC_ENVIRONMENT if name in os.environ]
    if environment:
        facts["fabric_environment"] = " ".join(environment)
    fabric = _fabric_object(package)
    if fabric is None:
        return facts
    strategy = getattr(fabric, "_strategy", None)
    accelerator = type(getattr(fabric, "_accelerator", None)).__name__
    world_size = getattr(strategy, "world_size", 1)  # as Fabric.world_size: 1 for a single-device strategy
    launched = getattr(fabric, "_launched", None)
    facts.update(fabric_strategy=type(strategy).__name__ if strategy is not None else None,
                 fabric_world_size=world_size if isinstance(world_size, int) else None,
                 fabric_accelerator=ACCELERATORS.get(accelerator, accelerator),
                 fabric_launched=launched if isinstance(launched, bool) else None)
    return facts


def _fabric_object(package: str) -> Any:
    """The script's ``Fabric`` (the first found: scripts make one), or None."""
    module = sys.modules.get(f"{package}.fabric")
    fabric_class = getattr(module, "Fabric", None)
    if not isinstance(fabric_class, type):
        return None
    for candidate in gc.get_objects():
        if issubclass(type(candidate), fabric_class):  # type() never runs the object's own code
            return candidate
    return None
