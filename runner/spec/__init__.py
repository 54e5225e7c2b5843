"""Launch specs: the schema (model), parsing and validation, resolution, profiles."""

from runner.spec.model import LaunchSpec, NodeSpec, RendezvousSpec, TelemetrySpec
from runner.spec.parse import SpecError, SpecErrors, spec_from_dict, spec_to_dict

__all__ = [
    "LaunchSpec", "NodeSpec", "RendezvousSpec", "TelemetrySpec",
    "SpecError", "SpecErrors", "spec_from_dict", "spec_to_dict",
]
