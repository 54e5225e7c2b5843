"""The launch profile: what the user asked for (``LaunchSpec``, its schema in ``spec``),
parsing and validation, profile files (TOML), and resolution against this machine."""

from runner.profile.parse import SpecError, SpecErrors, spec_from_dict, spec_to_dict
from runner.profile.spec import LaunchSpec, NodeSpec, RendezvousSpec, TelemetrySpec

__all__ = [
    "LaunchSpec",
    "NodeSpec",
    "RendezvousSpec",
    "SpecError",
    "SpecErrors",
    "TelemetrySpec",
    "spec_from_dict",
    "spec_to_dict",
]
