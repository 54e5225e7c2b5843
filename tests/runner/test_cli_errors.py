"""Bad input to the CLI: one line naming what is wrong (and what was probably meant), exit code 2,
nothing launched; filters that match nothing and runs that are not live say so."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

from rankwatch.protocol import LogLine
from runner.cli.main import build_parser, main
from runner.store.store import RecordBatch, RunNotFound, RunStore
from tests.jobs import rankwatch

GOOD = 'script = "{script}"\n'


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('never runs in these tests')\n")
    return path


CASES = {
    "missing script": ('args = ["--x"]\n', "script: missing"),
    "script file absent": ('script = "{missing}"\n', "script: {missing} does not exist"),
    "bad GPU index": (GOOD + "gpus = [7]\n", "gpus: GPU 7 does not exist; this machine has no NVIDIA GPU"),
    "port out of range": (GOOD + '[rendezvous]\nmode = "static"\nmaster_port = 99999\n',
                          "rendezvous.master_port: 99999 is out of range; must be between 1 and 65535"),
    "unknown key": (GOOD + "nproc = 4\n", "nproc: unknown key; allowed here:"),
    "malformed TOML": (GOOD + "args = [\n", "toml: "),
    "nccl without GPUs": (GOOD + 'backend = "nccl"\n', "backend: nccl needs NVIDIA GPUs"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_profile_gives_one_line_naming_the_field_and_exit_2(case, script, tmp_path):
    body, expected = CASES[case]
    missing = tmp_path / "nope.py"
    profile = tmp_path / "job.toml"
    profile.write_text(body.format(script=script, missing=missing))
    result = rankwatch("run", str(profile), timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"rankwatch: {profile}: ")
    assert expected.format(missing=missing) in lines[0]
    with pytest.raises(RunNotFound), RunStore(readonly=True) as store:  # nothing launched, nothing recorded
        store.resolve_run_id("last")


def test_a_profile_that_cannot_be_read_is_one_line_naming_the_file_and_exit_2(tmp_path):
    """A symbolic link loop once gave a traceback; bytes that are not UTF-8 an error without the file."""
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'script = "caf\xe9.py"\n')
    for profile, expected in ((loop, "cannot read (a symbolic link that leads back to itself)"),
                              (latin, "not UTF-8 text (byte 0xe9 at offset 13)")):
        result = rankwatch("run", str(profile), timeout=60)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(f"rankwatch: {profile}: ") and expected in line


def test_unknown_profile_name_lists_the_saved_ones():
    result = rankwatch("run", "no-such-profile")
    assert result.returncode == 2
    assert "no profile named 'no-such-profile'" in result.stderr


def test_flag_errors_name_the_flag(script):
    result = rankwatch("run", "--gpus", "one,two", str(script))
    assert result.returncode == 2 and "gpus: expected indices" in result.stderr


@pytest.mark.parametrize("hosts", [",,", "a,,b", "a,"])
def test_an_empty_entry_in_hosts_is_an_error_not_a_localhost_node(script, hosts):
    result = rankwatch("run", "--hosts", hosts, str(script))
    assert result.returncode == 2, result.stderr
    assert f"nodes: --hosts {hosts!r}: an empty entry" in result.stderr


def test_run_without_target_says_what_to_give():
    result = rankwatch("run")
    assert result.returncode == 2 and "give a profile name, a .toml file, a script, or --example" in result.stderr


def test_runs_show_unknown_run():
    assert rankwatch("runs", "show", "last").returncode == 1


# ---- parsing: abbreviations, typos, hidden commands, help texts (in-process, no job) -----------

def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``rankwatch ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse errors and --help
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_abbreviation_of_a_flag_is_refused_naming_the_flag_it_probably_meant(capsys, script):
    """Seen: `--nproc-per-nod 2` was silently taken for --nproc-per-node (argparse's allow_abbrev)."""
    for abbreviation in ("--nproc", "--nproc-per-nod"):
        code, out, err = run_cli(capsys, "command", abbreviation, "3", str(script))
        assert (code, out) == (2, ""), err
        assert err.startswith(f"rankwatch command: unknown flag {abbreviation}; did you mean '--nproc-per-node'?")


@pytest.mark.parametrize(("argv", "expected"), [
    (["rnu"], "'rnu' is not a command; did you mean 'run'?"),
    (["stpo", "3"], "did you mean 'stop'?"),
    (["runs", "shwo", "last"], "'shwo' is not a runs action; did you mean 'show'?"),
])
def test_a_mistyped_command_says_what_it_probably_meant(capsys, argv, expected):
    code, _out, err = run_cli(capsys, *argv)
    assert code == 2
    assert expected in err
    assert "agent" not in err and "node-info" not in err  # internal commands are not offered


def test_a_mistyped_flag_names_the_flag_it_probably_meant(capsys, script):
    code, _out, err = run_cli(capsys, "run", "--nprocs", "2", str(script))
    assert code == 2
    # named by the command's parser (it knows the command's flags), not the top level's
    assert err.startswith("rankwatch run: unknown flag --nprocs; did you mean '--nproc-per-node'?")


def test_internal_commands_are_hidden_from_help_but_still_run(capsys):
    _code, out, _err = run_cli(capsys, "--help")
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    assert {"run", "attach", "stop", "runs"} <= listed
    assert not {"agent", "node-info"} & listed
    code, out, _err = run_cli(capsys, "node-info", "--json")
    assert code == 0 and '"hostname"' in out


def _commands(parser: argparse.ArgumentParser, prefix: str = ""):
    """Every (command path, parser) below ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _commands(sub, f"{prefix}{name} ")


def test_every_option_and_argument_of_every_command_is_described():
    undocumented = []
    for path, parser in _commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if action.help is None:
                undocumented.append(f"{path}: {'/'.join(action.option_strings) or action.dest}")
    assert undocumented == []


# ---- runs logs / list: filters that match nothing say so ----------------------------------------

@pytest.fixture
def two_rank_run():
    """A finished 2-rank run with a few lines, written to a real store (no job needed)."""
    with RunStore() as store:
        run_id = store.create_run(run_key="k" * 24, profile="two", spec_toml="", command="torchrun ...",
                                  host="h", workdir="/", runner_pid=1, socket=None, world_size=2, status="succeeded")
        store.update_run(run_id, started=time.time() - 5, ended=time.time(), exit_code=0)
        for rank in (0, 1):
            store.upsert_rank(run_id, rank, state="exited", exit_code=0, host="h")
        store.write_batch(run_id, RecordBatch(logs=[LogLine(0, 1.0, "stdout", "hello from 0", "h"),
                                                    LogLine(1, 1.0, "stdout", "hello from 1", "h"),
                                                    LogLine(None, 1.0, "stderr", "W torchrun warning", "h")]))
    return run_id


def test_logs_of_a_rank_the_run_did_not_have_is_an_error_naming_its_ranks(capsys, two_rank_run):
    code, out, err = run_cli(capsys, "runs", "logs", "last", "--rank", "5")
    assert code == 2 and out == ""
    assert f"run {two_rank_run} has ranks 0-1; there is no rank 5" in err


def test_logs_filters(capsys, two_rank_run):
    assert run_cli(capsys, "runs", "logs", "last", "--rank", "1")[1] == "[rank 1] hello from 1\n"
    assert run_cli(capsys, "runs", "logs", "last", "--launcher")[1] == "[torchrun] W torchrun warning\n"
    code, out, err = run_cli(capsys, "runs", "logs", "last", "--grep", "nowhere")
    assert (code, out) == (1, "") and "no line of run" in err and "'nowhere'" in err
    code, _out, err = run_cli(capsys, "runs", "logs", "last", "--tail", "0")
    assert code == 2 and "--tail: must be 1 or more" in err


def test_runs_list_says_when_nothing_is_live(capsys, two_rank_run):
    code, out, err = run_cli(capsys, "runs", "list", "--live")
    assert code == 0 and out == "" and "no live runs" in err


# ---- rankwatch stop, for runs that are not live ---------------------------------------------------

def test_stop_of_an_unknown_run_exits_1(capsys, two_rank_run):
    code, _out, err = run_cli(capsys, "stop", "99")
    assert code == 1 and "no run 99" in err


def test_stop_of_a_finished_run_says_there_is_nothing_to_stop(capsys, two_rank_run):
    code, _out, err = run_cli(capsys, "stop", str(two_rank_run))
    assert code == 3
    assert f"run {two_rank_run} is not running (succeeded, exit code 0); nothing to stop" in err


def test_stop_of_a_lost_run_says_so(capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with RunStore() as store:
        run_id = store.create_run(run_key="d" * 24, profile="lost", spec_toml="", command="", host="h",
                                  workdir="/", runner_pid=dead.pid, socket=None, world_size=1, status="running")
    code, _out, err = run_cli(capsys, "stop", str(run_id))
    assert code == 3 and "lost: its runner died without recording an end" in err


def test_stacks_of_a_finished_run_without_a_capture_says_it_ended_and_what_it_left(capsys, two_rank_run):
    """Seen: `rankwatch stacks 64` on a finished run said to run `rankwatch stacks 64`."""
    code, out, err = run_cli(capsys, "stacks", str(two_rank_run))
    assert code == 1 and out == ""
    assert f"run {two_rank_run} has ended (succeeded) and no stacks were captured while it ran" in err
    assert f"`rankwatch runs show {two_rank_run}`" in err and f"`rankwatch stacks {two_rank_run}`" not in err
