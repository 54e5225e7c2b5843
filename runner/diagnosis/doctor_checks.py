"""One doctor check, the type both ``rankwatch doctor`` and the GUI's Doctor panel use.

``runner.diagnosis.doctor`` judges the machine into :class:`DoctorCheck` s and prints
them (or writes them as JSON, ``to_json``); the GUI reads the JSON back with
``from_json`` (through ``gui.gateway.runner_rules``). This module holds only the
type, so the GUI can import it without the doctor's NVML and probe machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from runner.runstate.messages import JsonObject


class CheckStatus(str, Enum):
    """A check's verdict, best to worst: ``fail`` makes the machine not ready, ``warn`` does not."""

    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class DoctorCheck:
    """``driver``: ok, "NVIDIA driver 550.54, ...": one verdict of the doctor."""

    key: str
    status: CheckStatus
    message: str

    def to_json(self) -> dict[str, str]:
        return {"key": self.key, "status": self.status.value, "message": self.message}

    @classmethod
    def from_json(cls, data: JsonObject) -> DoctorCheck:
        """Lenient: a missing key is ``?``, a status this version does not know is ``info``."""
        try:
            status = CheckStatus(str(data.get("status") or CheckStatus.INFO.value))
        except ValueError:
            status = CheckStatus.INFO
        return cls(str(data.get("key") or "?"), status, str(data.get("message") or ""))
