"""Several nodes in the GUI: per-node status, ranks grouped by node, host-tagged logs, the launch form.

``data/two_nodes_lost.json`` was recorded from a real two-node job (node 0 this
machine, node 1 ``127.0.0.1`` over a throwaway sshd; ``data/capture.py``) whose node
1 agent was killed: node 1 is *lost*. It is replayed through the real hub
(``replay_run.py``), and loaded from the store as History does; live runs are the real
runner with fake workers (``live_run.py``). The launch form's nodes table is
compared with what ``rankwatch command`` prints for the same profile, and its
errors with the CLI's.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w
from live_run import LiveRun
from PySide6.QtCore import Qt
from replay_run import ReplayRun, load_fixture, store_fixture

from gui.gateway.run_state import NodeInfo
from gui.models.launch_form import LaunchFormModel, pick_free_port
from gui.models.nodes import compact_ranks, since_text
from gui.widgets.command_preview import CommandPreviewPanel
from gui.widgets.nodes_status import node_tint
from gui.widgets.nodes_table import PORT_COLUMN, NodesTable

pytestmark = pytest.mark.gui

REPO = Path(__file__).resolve().parents[2]




def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def test_a_lost_node_is_shown_lost_with_its_time_and_its_rank_too(qtbot, panel):
    fixture = load_fixture("two_nodes_lost")
    runner = ReplayRun(fixture).start()
    try:
        panel.attach(runner.run_id)
        nodes_tab = panel.tabs.indexOf(panel.nodes_status)
        qtbot.waitUntil(lambda: panel.tabs.isTabVisible(nodes_tab), timeout=15_000)  # two nodes: shown
        status = panel.nodes_status
        panel.tabs.setCurrentWidget(status)
        qtbot.waitUntil(lambda: status.table.rowCount() == 2, timeout=15_000)
        assert status.cell_text(1, "Host") == "127.0.0.1" and status.cell_text(1, "State") == "running"
        assert status.cell_text(1, "Ranks") == "1" and status.cell_text(0, "Ranks") == "0"
        assert status.row_brush(1).color() == node_tint("running")

        runner.send_events("agents_listening", "agent_connected", "rank_started", "node_lost")
        ending = time.time()
        runner.end_as_recorded()  # the hub records each node's state change as it gets it
        ended = time.time()
        recorded = {node["node_rank"]: node for node in fixture["nodes"]}
        qtbot.waitUntil(lambda: status.cell_text(1, "State") == "lost", timeout=15_000)
        assert status.cell_text(1, "Since") in {f"lost at {clock(ending)}", f"lost at {clock(ended)}"}
        assert status.cell_text(1, "Detail") == recorded[1]["detail"]  # "... was lost at HH:MM:SS: ..."
        assert status.row_brush(1).color() == node_tint("lost") != node_tint("failed")
        assert status.cell_text(0, "State") == "failed"
        qtbot.waitUntil(lambda: panel.rank_table.cell_text(1, "State") == "lost", timeout=15_000)
        assert panel.rank_table.cell_text(1, "Node") == "1" and panel.rank_table.cell_text(1, "Host") == "127.0.0.1"
        # The banner names the rank on the lost node, and the node itself.
        qtbot.waitUntil(lambda: panel.failure_banner.isVisible() and panel.model.finished, timeout=15_000)
        assert panel.failure_banner.text().startswith("rank 1 on 127.0.0.1 failed first")
        assert recorded[1]["detail"] in panel.failure_banner.text()
        panel.diagnosis_panel.refresh()
        findings = panel.diagnosis_panel.table_texts(panel.diagnosis_panel.findings_table)
        assert findings == [[clock(runner.events("node_lost")[0]["t"]), "node lost", "",
                             runner.events("node_lost")[0]["message"]]]
    finally:
        runner.close()


def test_a_node_stopped_on_request_reads_stopped_at_its_time_in_the_stopped_colour():
    """A Ctrl-C or `rankwatch stop` ends a node as stopped, not failed."""
    node = NodeInfo(node_rank=0, host="localhost", state="stopped", changed=1_000_000.0)
    assert since_text(node) == f"stopped at {clock(1_000_000.0)}"
    assert node_tint("stopped") not in (None, node_tint("failed"), node_tint("exited"))


def test_log_lines_are_tagged_with_their_host_and_can_be_filtered_by_node(qtbot, panel):
    fixture = load_fixture("two_nodes_lost")
    run_id = store_fixture(fixture)
    panel.attach(run_id)  # a finished run, from the store (History)
    qtbot.waitUntil(lambda: panel.model.logs.total == len(fixture["logs"]), timeout=15_000)
    view = panel.log_view
    panel.tabs.setCurrentWidget(view)
    view.refresh()
    lines = view.shown_text().splitlines()
    remote = [line for line in lines if line.startswith("[127.0.0.1 r1] ")]
    head = [line for line in lines if line.startswith("[localhost r0] ")]
    assert remote and head
    assert all("rank 1/2 step" in line for line in remote) and all("rank 0/2 step" in line for line in head)
    assert any(line.startswith("[localhost launcher] ") for line in lines)  # torchrun's own lines
    assert view.node_choice.isVisible()
    view.show_node("127.0.0.1")
    assert view.shown_text().splitlines() == remote
    view.show_node("")
    assert view.shown_line_count() == len(lines)
    # Double-clicking a node in the Nodes tab shows its lines.
    status = panel.nodes_status
    status.refresh()
    assert status.cell_text(1, "State") == "lost"
    status.table.cellDoubleClicked.emit(1, 0)
    assert panel.tabs.currentWidget() is view and view.node_choice.currentData() == "127.0.0.1"


def test_ranks_are_grouped_by_node_in_the_rank_table(qtbot, panel):
    # Ranks dealt round-robin over two nodes: 0, 2, 4 on node-a, 1, 3, 5 on node-b.
    runner = LiveRun(ranks=6, slow_rank=None, hosts=("node-a", "node-b")).start()
    try:
        panel.attach(runner.run_id)
        table = panel.rank_table
        qtbot.waitUntil(lambda: table.table_model.rowCount() == 6, timeout=15_000)
        table.refresh()
        assert not table.view.isColumnHidden(0)  # the Node column, with several nodes
        assert table.visible_ranks() == [0, 2, 4, 1, 3, 5]
        assert [table.cell_text(rank, "Host") for rank in table.visible_ranks()] == ["node-a"] * 3 + ["node-b"] * 3
        assert table.separators.enabled  # a line between node-a's ranks and node-b's
        assert compact_ranks([0, 1, 2, 3, 8, 10, 11]) == "0-3, 8, 10-11"
        status = panel.nodes_status
        panel.tabs.setCurrentWidget(status)
        qtbot.waitUntil(lambda: status.table.rowCount() == 2, timeout=15_000)
        assert status.cell_text(1, "Ranks") == "1, 3, 5" and status.cell_text(0, "Ranks") == "0, 2, 4"
        assert status.cell_text(0, "Since").startswith("running since ")
    finally:
        runner.close()


def test_one_node_hides_the_node_column_and_tab(qtbot, panel):
    runner = LiveRun(ranks=2).start()
    try:
        panel.attach(runner.run_id)
        qtbot.waitUntil(lambda: panel.rank_table.table_model.rowCount() == 2, timeout=15_000)
        panel.rank_table.refresh()
        assert panel.rank_table.view.isColumnHidden(0)
        assert not panel.tabs.isTabVisible(panel.tabs.indexOf(panel.nodes_status))
        assert since_text(NodeInfo(state="exited", changed=0.0)) == f"exited at {clock(0.0)}"
    finally:
        runner.close()


# ---- the launch form's nodes table --------------------------------------------------------------

def rankwatch_command(profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", "command", str(profile)], capture_output=True, text=True,
                          timeout=60, cwd=str(REPO))


def test_two_nodes_with_user_port_python_and_workdir_give_the_runners_commands(qtbot, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    form = LaunchFormModel(base_dir=tmp_path)
    port = pick_free_port()
    form.update(entry="train.py", interpreter=sys.executable, gpus="cpu", rendezvous_mode="c10d",
                endpoint=f"localhost:{port}", job_id="job7")
    table = NodesTable(form)
    qtbot.addWidget(table)
    preview = CommandPreviewPanel(form)
    qtbot.addWidget(preview)
    table.set_cell(0, 1, "2")
    qtbot.mouseClick(table.add_button, Qt.MouseButton.LeftButton)
    for column, text in enumerate(("node2", "3", "me", "2222", "/opt/env/bin/python", "/data/job")):
        table.set_cell(1, column, text)

    node = form.state.nodes[1]
    assert (node.host, node.processes, node.user, node.port, node.python, node.workdir) == (
        "node2", "3", "me", "2222", "/opt/env/bin/python", "/data/job")
    evaluation = form.evaluation
    assert evaluation.errors == ()
    spec_node = evaluation.spec.nodes[1]
    assert (spec_node.user, spec_node.port, spec_node.python, spec_node.workdir) == (
        "me", 2222, "/opt/env/bin/python", "/data/job")
    assert [c.label for c in evaluation.commands] == ["node 0 · localhost", "node 1 · node2 (ssh me@node2 -p 2222)"]

    profile = tmp_path / "job.toml"
    profile.write_text(tomli_w.dumps(form.state.to_table()))
    result = rankwatch_command(profile)
    assert result.returncode == 0, result.stderr
    printed = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert [c.text for c in evaluation.commands] == printed
    assert printed[1].startswith("cd /data/job && ") and " /opt/env/bin/python -m torch.distributed.run " in printed[1]
    assert "--nproc-per-node=3" in printed[1] and "--nproc-per-node=2" in printed[0]
    preview.node_box.setCurrentIndex(1)
    assert preview.command_text(1) == printed[1]


def test_a_bad_node_field_gets_the_clis_message_on_its_cell(qtbot, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    form = LaunchFormModel(base_dir=tmp_path)
    form.update(entry="train.py", gpus="cpu", rendezvous_mode="c10d", endpoint="localhost:29411", job_id="j")
    table = NodesTable(form)
    qtbot.addWidget(table)
    qtbot.mouseClick(table.add_button, Qt.MouseButton.LeftButton)
    table.set_cell(1, 0, "node2")
    table.set_cell(1, PORT_COLUMN, "ssh")

    [(field, message)] = [(f, m) for f, m in form.evaluation.errors if f.startswith("nodes")]
    assert field == "nodes[1].port"
    profile = tmp_path / "job.toml"
    profile.write_text(tomli_w.dumps(form.state.to_table()))
    result = rankwatch_command(profile)
    assert result.returncode == 2
    assert f"{field}: {message}" in result.stderr  # the very message `rankwatch command` prints
    assert table.cell_error(1, PORT_COLUMN) == f"nodes[1].port: {message}"
    assert table.cell_error(1, 0) == ""
    table.set_cell(1, PORT_COLUMN, "")  # empty: the default again
    assert not [f for f, _m in form.evaluation.errors if f.startswith("nodes")]
    assert table.cell_error(1, PORT_COLUMN) == ""
