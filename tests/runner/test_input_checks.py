"""Input that no process could take is refused where it is parsed: a field-named error, exit
code 2, nothing launched (issue 10: a NUL byte gave a traceback and a run stuck at
"starting", ``/bin/true`` passed as a Python, ``--master-port 0`` was silently dropped)."""

from __future__ import annotations

import re
import stat
import sys

import pytest

from runner.profile.check import ask_interpreter, check_launch
from runner.profile.parse import SpecErrors, spec_from_dict
from runner.profile.resolve import MachineFacts, resolve
from runner.sampling.gpu_report import GpuReport
from runner.store.store import RunNotFound, RunStore
from tests.jobs import rankwatch

NUL = "\x00"


def errors_of(table: dict) -> dict[str, str]:
    with pytest.raises(SpecErrors) as caught:
        spec_from_dict(table)
    return {error.field: error.message for error in caught.value.errors}


@pytest.mark.parametrize(("table", "field"), [
    ({"script": "a.py", "env": {"HF_TOKEN": f"abc{NUL}def"}}, "env.HF_TOKEN"),
    ({"script": "a.py", "args": ["--ok", f"x{NUL}y"]}, "args[1]"),
    ({"script": f"a{NUL}.py"}, "script"),
    ({"module": f"pkg{NUL}"}, "module"),
    ({"script": "a.py", "interpreter": f"/usr/bin/python{NUL}"}, "interpreter"),
    ({"script": "a.py", "workdir": f"/tmp{NUL}"}, "workdir"),
    ({"script": "a.py", "description": f"a{NUL}"}, "description"),
    ({"script": "a.py", "nodes": [{"host": "localhost"}, {"host": "b", "python": f"py{NUL}"}],
      "rendezvous": {"mode": "c10d", "endpoint": "b:29400"}}, "nodes[1].python"),
    ({"script": "a.py", "telemetry": {"loss_pattern": f"loss=(\\d+){NUL}"}}, "telemetry.loss_pattern"),
])
def test_a_nul_byte_in_any_text_is_refused_naming_the_field(table, field):
    errors = errors_of(table)
    assert field in errors, errors
    assert "NUL byte" in errors[field]


@pytest.mark.parametrize(("table", "field", "says"), [
    ({"script": "a.py", "env": {"KEY\n": "1"}}, "env.'KEY\\n'", "not a valid environment variable name"),
    ({"script": "a.py", "env": {"A B": "1"}}, "env.A B", "not a valid environment variable name"),
    ({"script": "a.py", "nodes": [{"host": "node2\n"}]}, "nodes[0].host", "is not a host name or address"),
    ({"script": "a.py", "nodes": [{"host": "-oProxyCommand"}]}, "nodes[0].host", "is not a host name or address"),
    ({"script": "a.py", "nodes": [{"host": "a", "user": "me\nyou"}]}, "nodes[0].user", "is not a login name"),
    ({"script": "a.py", "rendezvous": {"mode": "static", "master_addr": "head node"}}, "rendezvous.master_addr",
     "is not a host name or address"),
    ({"script": "a.py", "rendezvous": {"mode": "c10d", "endpoint": "head\n:29400"}}, "rendezvous.endpoint",
     'is not "host:port"'),
    ({"module": "my-package.train"}, "module", "is not a module name"),
])
def test_newlines_and_spaces_cannot_slip_into_names(table, field, says):
    errors = errors_of(table)
    assert says in errors.get(field, ""), errors


def test_values_that_are_fine_stay_fine():
    spec = spec_from_dict({"module": "pkg.train_2", "args": ["--note", "line one\nline two"],
                           "env": {"MULTI": "a\nb", "_X1": "1"},
                           "nodes": [{"host": "localhost"}, {"host": "[fe80::1%eth0]", "user": "ana.b"}],
                           "rendezvous": {"mode": "c10d", "endpoint": "[fe80::1%eth0]:29400"}})
    assert spec.args[1] == "line one\nline two" and spec.env_dict["MULTI"] == "a\nb"


def test_master_port_zero_means_a_free_port_in_a_profile():
    assert spec_from_dict({"script": "a.py", "rendezvous": {"mode": "static", "master_port": 0}}).rendezvous.master_port is None
    for bad in (-1, 65536, "29500", True):
        message = errors_of({"script": "a.py", "rendezvous": {"mode": "static", "master_port": bad}})[
            "rendezvous.master_port"]
        assert "or 0 (or leave it out) for a free port" in message


def test_master_port_zero_on_the_command_line_means_a_free_port_too(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    profile = tmp_path / "job.toml"
    profile.write_text(f'script = "{script}"\n[rendezvous]\nmode = "static"\nmaster_port = 29517\n')

    given = rankwatch("command", "--master-port", "0", str(profile))
    plain = rankwatch("command", str(profile))

    assert given.returncode == plain.returncode == 0, given.stderr
    assert "--master-port=29517" in plain.stdout
    port = int(re.search(r"--master-port=(\d+)", given.stdout).group(1))
    assert port not in (0, 29517)  # a free one, as "auto" in the GUI and 0 in a profile
    assert "--master-addr=localhost" in rankwatch("command", "--master-port", "0", str(script)).stdout


# ---- the interpreter must answer as a Python --------------------------------------------------------


def fake_interpreter(tmp_path, body: str):
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_program_that_just_exits_0_is_not_a_python(tmp_path):
    assert "did not answer as one" in ask_interpreter("/bin/true").problem
    liar = fake_interpreter(tmp_path, "echo hello\n")
    assert "did not answer as one" in ask_interpreter(liar).problem


def test_an_old_python_is_named_with_its_version(tmp_path):
    old = fake_interpreter(tmp_path, "echo rankwatch-interpreter 2.7 torch\n")
    assert ask_interpreter(old).problem == f"{old} is Python 2.7; Rankwatch's workers need Python 3.8 or newer"


def test_this_python_answers_with_torch():
    answer = ask_interpreter(sys.executable)
    assert answer.problem is None and answer.has_torch


def test_check_launch_refuses_bin_true(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    spec = spec_from_dict({"script": str(script), "interpreter": "/bin/true", "nproc_per_node": 1, "gpus": "cpu"})
    machine = MachineFacts(cpu_count=2, gpus=GpuReport(available=False, reason="no NVIDIA driver"))
    errors = check_launch(resolve(spec, machine, tmp_path), machine)
    assert [error.field for error in errors] == ["interpreter"]
    assert "/bin/true is not a working Python" in errors[0].message


# ---- on the command line: one line per problem, exit 2, nothing launched ---------------------------


@pytest.mark.parametrize(("body", "expected"), [
    ('args = ["a\\u0000b"]\n', "args[0]: contains a NUL byte"),
    ('[env]\nHF_TOKEN = "x\\u0000y"\n', "env.HF_TOKEN: contains a NUL byte"),
    ('interpreter = "/bin/true"\n', "interpreter: /bin/true is not a working Python"),
    ('[[nodes]]\nhost = "node\\n"\n', "nodes[0].host: 'node\\n' is not a host name"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_is_launched(tmp_path, body, expected):
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    profile = tmp_path / "job.toml"
    profile.write_text(f'script = "{script}"\nnproc_per_node = 1\ngpus = "cpu"\n' + body)

    result = rankwatch("run", "--plain", str(profile), timeout=60)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line for line in result.stderr.strip().splitlines()
                                                  if line.startswith(f"rankwatch: {profile}: ")]
    assert expected in result.stderr and "Traceback" not in result.stderr
    with pytest.raises(RunNotFound), RunStore(readonly=True) as store:
        store.resolve_run_id("last")


def test_the_full_probe_never_raises_and_refuses_what_is_not_python(tmp_path):
    from runner.probe import probe_interpreter

    liar = fake_interpreter(tmp_path, 'echo "RANKWATCH_PROBE {not json"\n')
    for python, says in (("/bin/true", "is not a working Python"), (liar, "is not a working Python"),
                         (f"/usr/bin/python{NUL}", "embedded null byte")):
        answer = probe_interpreter(python, timeout=20)
        assert answer["ok"] is False and says in answer["error"], answer


def test_the_mpi_backend_is_refused_when_the_interpreters_torch_has_no_mpi(tmp_path):
    """Seen: `--backend mpi` was accepted with a pip torch (no MPI), then every rank failed in init."""
    import torch.distributed

    script = tmp_path / "train.py"
    script.write_text("")
    machine = MachineFacts(cpu_count=2, gpus=GpuReport(available=False, reason="no NVIDIA driver"))
    spec = spec_from_dict({"script": str(script), "nproc_per_node": 2, "gpus": "cpu", "backend": "mpi",
                           "interpreter": sys.executable})
    errors = check_launch(resolve(spec, machine, tmp_path), machine)
    if torch.distributed.is_mpi_available():  # a torch built from source with MPI: nothing to refuse
        assert errors == []
        return
    assert [error.field for error in errors] == ["backend"]
    assert errors[0].message.startswith(f"mpi is not available in {sys.executable}: this torch build has no MPI")
    gloo = spec_from_dict({"script": str(script), "nproc_per_node": 2, "gpus": "cpu", "backend": "gloo",
                           "interpreter": sys.executable})
    assert check_launch(resolve(gloo, machine, tmp_path), machine) == []
