"""The launch form's Slurm section as plain Python: what it shows, and the ``[slurm]`` table it means.

``SlurmForm`` is one value of ``FormState`` (``gui.models.launch_form``): the section's
fields as typed. ``to_table`` turns it into the profile's ``[slurm]`` table, so the
spec parser (``runner.profile.parse``) judges it and every error is the CLI's own,
naming ``slurm.<field>``; ``from_spec`` shows a loaded profile's table.

Text fields stay text until the parser sees them: a time limit of ``"1h"`` reaches
the parser as typed and comes back as ``slurm.time_limit: '1h' is not a Slurm time
limit ...``. Counts are spin boxes, where 0 reads "default".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gui.gateway.launch_rules import LaunchRules
from gui.gateway.launch_spec import SlurmSpec, TomlTable

ROUTES = ("auto", "direct", "login")
ROUTE_LABELS = {
    "auto": "Automatic (direct from a login node, through the login host over ssh)",
    "direct": "Direct: compute nodes connect to this machine",
    "login": "Through the login host (compute nodes cannot reach this machine)",
}
SLURM_FIELD_PREFIXES = ("slurm",)


@dataclass(frozen=True)
class SlurmForm:
    """The Slurm section as the widgets hold it."""

    enabled: bool = False
    nodes: int = 1
    gpus_per_node: int = 0
    """0: CPU mode."""
    cpus_per_node: int = 0
    """0: one per process (the default)."""
    partition: str = ""
    time_limit: str = ""
    account: str = ""
    qos: str = ""
    job_name: str = ""
    sbatch_options_text: str = ""
    """One option per line, as they appear after ``#SBATCH``."""
    login: str = ""
    """``[user@]host``; empty: this machine is a login node."""
    login_port: int = 0
    telemetry_route: str = "auto"

    @classmethod
    def from_spec(cls, slurm: SlurmSpec | None) -> SlurmForm:
        if slurm is None:
            return cls()
        login = slurm.login_host or ""
        if login and slurm.login_user:
            login = f"{slurm.login_user}@{login}"
        return cls(enabled=True, nodes=slurm.nodes, gpus_per_node=slurm.gpus_per_node,
                   cpus_per_node=slurm.cpus_per_node or 0, partition=slurm.partition or "",
                   time_limit=slurm.time_limit or "", account=slurm.account or "", qos=slurm.qos or "",
                   job_name=slurm.job_name or "", sbatch_options_text="\n".join(slurm.sbatch_options),
                   login=login, login_port=slurm.login_port or 0, telemetry_route=slurm.telemetry_route)

    def with_changes(self, **changes: Any) -> SlurmForm:
        """Raises TypeError for a name that is not a field."""
        return replace(self, **changes)

    def to_table(self) -> TomlTable | None:
        """The ``[slurm]`` table; ``None`` when the section is off (the job runs here or over ssh)."""
        if not self.enabled:
            return None
        user, _, host = self.login.strip().rpartition("@")
        return LaunchRules.table({
            "nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "cpus_per_node": self.cpus_per_node or None,
            "partition": _text(self.partition), "time_limit": _text(self.time_limit), "account": _text(self.account),
            "qos": _text(self.qos), "job_name": _text(self.job_name), "login_host": _text(host),
            "login_user": _text(user), "login_port": self.login_port or None, "telemetry_route": self.telemetry_route,
            "sbatch_options": [line.strip() for line in self.sbatch_options_text.splitlines() if line.strip()] or None,
        })

    def summary(self) -> str:
        """One line for the section's title: "2 nodes x 4 GPUs, gpu, 2:00:00 (login.cluster)"."""
        if not self.enabled:
            return "off: the job runs on this machine (or the nodes listed)"
        devices = f"{self.gpus_per_node} GPU{'s' if self.gpus_per_node != 1 else ''}" if self.gpus_per_node \
            else "CPU"
        parts = [f"{self.nodes} node{'s' if self.nodes != 1 else ''} x {devices}"]
        parts += [text for text in (self.partition.strip(), self.time_limit.strip()) if text]
        where = self.login.strip() or "this machine"
        return ", ".join(parts) + f" (submitted from {where})"


def _text(value: str) -> str | None:
    return value.strip() or None
