"""One schema for launch settings: a field declared once drives the TOML file and the CLI.

``SpecPlus`` is a test-only spec with one more setting at the top level and one more in
``[telemetry]``, declared with the same ``setting(...)`` metadata as the real fields and
nothing else: no edit to the parser, the writer or the flags. The form half of this check
is ``tests/gui/test_launch_settings.py``.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

import pytest

from runner.cli.spec_flags import add_spec_flags, profile_from_args
from runner.profile.files import read_spec_file, write_spec_file
from runner.profile.parse import SpecErrors, spec_from_dict, spec_to_dict
from runner.profile.schema import INTEGER, NUMBER, SETTINGS_TABLE, all_settings, setting
from runner.profile.spec import LaunchSpec, TelemetrySpec


@dataclass(frozen=True)
class TelemetryPlus(TelemetrySpec):
    flush_every: float = setting(
        2.0, NUMBER, low=0.5, high=30.0, unit="seconds", flag="--flush-every", metavar="SECONDS",
        help="seconds between flushes of the test-only buffer", label="Flush every", section="Telemetry")


@dataclass(frozen=True)
class SpecPlus(LaunchSpec):
    telemetry: TelemetryPlus = field(default_factory=TelemetryPlus, metadata=SETTINGS_TABLE)  # type: ignore[assignment]
    warmup_steps: int = setting(
        0, INTEGER, low=0, high=1000, flag="--warmup-steps", metavar="N",
        help="steps left out of the statistics at the start", label="Warm-up steps", section="Training")


def parser_for(schema: type[LaunchSpec]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rankwatch run")
    add_spec_flags(parser, schema)
    return parser


def test_a_new_setting_is_read_written_and_round_trips_through_a_profile_file(tmp_path):
    table = {"script": "train.py", "warmup_steps": 5, "telemetry": {"flush_every": 4, "stall_timeout": 10}}
    spec = spec_from_dict(table, SpecPlus)
    assert isinstance(spec, SpecPlus)
    assert spec.warmup_steps == 5
    assert spec.telemetry == TelemetryPlus(flush_every=4.0, stall_timeout=10.0)

    written = spec_to_dict(spec)
    assert written["warmup_steps"] == 5 and written["telemetry"]["flush_every"] == 4.0
    assert spec_from_dict(written, SpecPlus) == spec
    path = write_spec_file(tmp_path / "plus.toml", spec)
    assert "warmup_steps = 5" in path.read_text() and "flush_every = 4.0" in path.read_text()
    assert read_spec_file(path, SpecPlus) == spec


def test_a_new_setting_is_validated_with_an_error_naming_it_and_what_is_allowed():
    with pytest.raises(SpecErrors) as caught:
        spec_from_dict({"script": "train.py", "warmup_steps": -1, "telemetry": {"flush_every": "often"}}, SpecPlus)
    errors = {error.field: error.message for error in caught.value.errors}
    assert errors == {
        "warmup_steps": "-1 is out of range; must be between 0 and 1000",
        "telemetry.flush_every": "expected a number of seconds between 0.5 and 30, got 'often'",
    }
    with pytest.raises(SpecErrors, match="unknown key"):  # the real spec knows nothing of it
        spec_from_dict({"script": "train.py", "warmup_steps": 5})


def test_a_new_setting_gets_its_flag_with_its_help_and_the_flag_overrides_a_profile(tmp_path):
    parser = parser_for(SpecPlus)
    help_text = " ".join(parser.format_help().split())
    assert "--warmup-steps N steps left out of the statistics at the start" in help_text
    assert "--flush-every SECONDS seconds between flushes of the test-only buffer" in help_text

    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    args = parser.parse_args(["--warmup-steps", "7", "--flush-every", "1.5", "--stall-timeout", "10", str(script)])
    spec = profile_from_args(args).spec
    assert isinstance(spec, SpecPlus)
    assert (spec.warmup_steps, spec.telemetry.flush_every, spec.telemetry.stall_timeout) == (7, 1.5, 10.0)

    profile = write_spec_file(tmp_path / "plus.toml", SpecPlus(script=str(script), warmup_steps=3))
    overridden = profile_from_args(parser.parse_args(["--flush-every", "3", str(profile)])).spec
    assert isinstance(overridden, SpecPlus)
    assert (overridden.warmup_steps, overridden.telemetry.flush_every) == (3, 3.0)
    with pytest.raises(SpecErrors, match=re.escape("telemetry.flush_every: 99.0 is out of range")):
        profile_from_args(parser.parse_args(["--flush-every", "99", str(script)]))


def test_every_flag_of_the_real_spec_still_exists_with_its_help():
    help_text = " ".join(parser_for(LaunchSpec).format_help().split())
    for flags_and_help in (
        "--nproc-per-node N|auto, --nproc_per_node N|auto processes per node",
        "--backend {auto,nccl,gloo,mpi} exported as RANKWATCH_BACKEND",
        "--max-restarts N restart the workers up to N times after a failure",
        "--omp-num-threads N|auto OMP_NUM_THREADS for each worker",
        "--legacy-local-rank pass --local_rank=N to the script",
        "--launch-mode {auto,torchrun,self-spawn} torchrun: one process per rank",
        "--no-instrument no zero-code instrumentation",
        "--parse-stdout also read metrics from printed lines",
        "--stall-timeout SECONDS flag a rank stalled after this long without progress",
        "--hash-every N every N steps check that parameters are identical on all ranks",
        "--gpus LIST|all|cpu", "--rdzv-endpoint HOST:PORT", "--master-port PORT", "--module MODULE",
    ):
        assert flags_and_help in help_text


def test_each_telemetry_setting_is_on_the_form_and_has_a_flag_except_the_loss_pattern():
    telemetry = [item for item in all_settings(LaunchSpec) if item.table == "telemetry"]
    assert [item.name for item in telemetry] == [
        "instrument", "parse_stdout", "loss_pattern", "sample_interval", "stall_timeout", "hash_every",
        "full_detail_hours"]
    assert all(item.setting.label and item.setting.section == "Telemetry" for item in telemetry)
    assert [item.setting.flag for item in telemetry if item.setting.flag] == [
        "--no-instrument", "--parse-stdout", "--sample-interval", "--stall-timeout", "--hash-every",
        "--full-detail-hours"]
