"""The launch spec schema: strict parsing with field-named errors, and a lossless round trip."""

from __future__ import annotations

import pytest

from runner.profile.parse import SpecErrors, spec_from_dict, spec_to_dict
from runner.profile.spec import LaunchSpec, NodeSpec, RendezvousSpec, TelemetrySpec


def errors_of(table: dict) -> list[tuple[str, str]]:
    with pytest.raises(SpecErrors) as caught:
        spec_from_dict(table)
    return [(e.field, e.message) for e in caught.value.errors]


def test_minimal_spec_gets_defaults():
    spec = spec_from_dict({"script": "train.py"})
    assert spec.script == "train.py"
    assert spec.nproc_per_node == "auto" and spec.gpus == "all" and spec.backend == "auto"
    assert spec.nodes == (NodeSpec(),)
    assert spec.rendezvous.mode == "standalone"


def test_missing_script_names_the_field():
    assert errors_of({"args": []}) == [("script", 'missing: the training script to run (or "module" for python -m style)')]


def test_unknown_keys_are_errors_at_every_level():
    fields = [f for f, _ in errors_of({"script": "a.py", "nprocs": 2, "rendezvous": {"prot": 1},
                                       "nodes": [{"host": "a", "cpus": 2}]})]
    assert fields == ["nprocs", "nodes[0].cpus", "rendezvous.prot"]


def test_port_out_of_range_names_the_field_and_range():
    [(field, message)] = errors_of({"script": "a.py", "rendezvous": {"mode": "static", "master_port": 70000}})
    assert field == "rendezvous.master_port"
    assert "70000 is out of range; must be between 1 and 65535" in message


def test_endpoint_port_is_checked():
    [(field, message)] = errors_of({"script": "a.py", "rendezvous": {"mode": "c10d", "endpoint": "h:0"}})
    assert field == "rendezvous.endpoint" and "out of range" in message


@pytest.mark.parametrize("gpus, fragment", [
    ([], "empty list"), ([0, 0], "listed twice"), ("some", 'expected "all", "cpu"'), ([-1], ">= 0"),
])
def test_bad_gpu_selections(gpus, fragment):
    [(field, message)] = errors_of({"script": "a.py", "gpus": gpus})
    assert field == "gpus" and fragment in message


def test_wrong_types_say_what_was_expected():
    errors = dict(errors_of({"script": "a.py", "args": "--epochs 3", "legacy_local_rank": "yes",
                             "nproc_per_node": "two", "backend": "nvlink"}))
    assert "one string" in errors["args"]
    assert "true or false" in errors["legacy_local_rank"]
    assert 'or "auto"' in errors["nproc_per_node"]
    assert "not one of auto, nccl, gloo, mpi" in errors["backend"]


def test_standalone_with_several_nodes_is_refused():
    [(field, message)] = errors_of({"script": "a.py", "rendezvous": {"mode": "standalone"},
                                    "nodes": [{"host": "a"}, {"host": "b"}]})
    assert field == "rendezvous.mode" and "one node only" in message


def test_newer_schema_version_is_refused_with_advice():
    [(field, message)] = errors_of({"script": "a.py", "version": 99})
    assert field == "version" and "upgrade rankwatch" in message


def test_loss_pattern_needs_a_group():
    [(field, message)] = errors_of({"script": "a.py", "telemetry": {"loss_pattern": "loss"}})
    assert field == "telemetry.loss_pattern" and "capturing group" in message


def test_round_trip_keeps_every_field():
    spec = LaunchSpec(
        script="train.py", args=("--epochs", "3"), interpreter="/opt/py/bin/python", workdir="/w",
        env=(("NCCL_DEBUG", "INFO"),), nproc_per_node=4, gpus=(0, 2), backend="nccl",
        nodes=(NodeSpec(host="a", processes=4), NodeSpec(host="b", processes=2, user="me", port=2222,
                                                          python="/usr/bin/python3", workdir="/remote")),
        rendezvous=RendezvousSpec(mode="c10d", endpoint="a:29400", job_id="job1"),
        max_restarts=2, omp_num_threads=8, legacy_local_rank=True,
        telemetry=TelemetrySpec(instrument=False, parse_stdout=True, loss_pattern=r"l=(\d+)", sample_interval=0.5,
                                stall_timeout=30.0, hash_every=100),
        description="everything set")
    assert spec_from_dict(spec_to_dict(spec)) == spec


def test_argument_templates_and_launch_mode_are_checked_when_parsed():
    errors = dict(errors_of({"script": "a.py", "args": ["--rank", "{rank}", "--x", "{rnak}", "--y", "a}b{"]}))
    assert errors["args[3]"].startswith("unknown placeholder {rnak} in '{rnak}'; the placeholders are {rank}")
    assert "args[5]" not in errors  # no placeholder look: passed unchanged
    errors = dict(errors_of({"script": "a.py", "args": ["{init_method:udp}", "{{rank}"]}))
    assert "init_method has the spellings {init_method:tcp}, {init_method:file}" in errors["args[0]"]
    assert "a lone '}'" in errors["args[1]"]
    errors = [message for field, message in errors_of({
        "script": "a.py", "launch_mode": "self-spawn", "args": ["{rank}"],
        "nodes": [{"host": "localhost"}, {"host": "b"}], "rendezvous": {"mode": "c10d"}}) if field == "launch_mode"]
    assert "several nodes need launch_mode" in errors[0] and "{rank} have no value" in errors[1]
    errors = dict(errors_of({"script": "a.py", "args": ["--im", "{init_method:file}"],
                             "nodes": [{"host": "localhost"}, {"host": "b"}], "rendezvous": {"mode": "c10d"}}))
    assert errors["args[1]"].startswith("{init_method:file} is a file on this machine")
    assert dict(errors_of({"script": "a.py", "launch_mode": "mpirun"}))["launch_mode"] == "'mpirun' is not one of auto, torchrun, self-spawn"
