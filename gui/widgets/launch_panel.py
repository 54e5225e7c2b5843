"""The launch panel: profiles on the left, the launch form on the right, the command below.

Every field writes to ``LaunchFormModel`` as it is edited; the model answers with an
``Evaluation`` (the spec, the CLI's own error messages, each node's torchrun
command), which this panel shows: errors under the fields they concern, the first
one again next to the disabled Launch button, and the command preview.

Nothing here blocks: interpreter and GPU facts come from ``RunnerProbe`` (a
``QProcess``), interpreter discovery only looks at a few folders, and the rendezvous
(DNS, ``ssh -G``) is planned on a background thread once its fields are quiet
(``gui.models.rendezvous_planner``).

The spec's settings with a form label (``runner.profile.schema``: telemetry's stall
timeout, hash-every ...) get their rows from ``SettingsSection``, one group per section.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.gateway.launch_rules import LaunchRules
from gui.gateway.probe import RunnerProbe
from gui.gateway.probe_output import InterpreterInfo
from gui.gateway.runner_rules import GpuReport
from gui.models.launch_form import (
    ENTRY_MODULE,
    ENTRY_SCRIPT,
    Evaluation,
    FormState,
    LaunchFormModel,
    PlanResult,
    pick_free_port,
)
from gui.models.profiles import ProfileListModel
from gui.models.rendezvous_planner import RendezvousPlanner
from gui.settings import AppSettings
from gui.widgets.command_preview import CommandPreviewPanel
from gui.widgets.env_table import EnvTable
from gui.widgets.gpu_picker import GpuPicker
from gui.widgets.nodes_table import NodesTable
from gui.widgets.profile_list import ProfileList
from gui.widgets.settings_section import SettingsSection, form_sections
from gui.widgets.slurm_section import SlurmSection

LAUNCH_MODE_TIPS = {
    LaunchRules.AUTO: "self-spawn when the script calls torch.multiprocessing.spawn, else torchrun",
    LaunchRules.TORCHRUN: "torchrun starts one process per rank (RANK, WORLD_SIZE... in the environment)",
    LaunchRules.SELF_SPAWN: "the script is started once and starts its own ranks (mp.spawn); one process: DataParallel",
}

GPU_REFRESH_MS = 5000
CHOICE_MIN_CHARS = 20
"""Characters a drop-down of the form asks room for; a longer choice is elided in the box."""
INTERPRETER_SCAN_DELAY_MS = 400
RENDEZVOUS_LABELS = {
    "standalone": "Standalone (one node, torchrun picks a free port)",
    "c10d": "c10d endpoint (elastic, multi-node)",
    "static": "Static master address and port",
}
BACKEND_TIPS = {
    "auto": "nccl with GPUs, gloo on CPU",
    "nccl": "NVIDIA GPUs (one GPU per rank)",
    "gloo": "CPU, or GPUs without NCCL",
    "mpi": "only in torch builds with MPI",
}
ERROR_STYLE = "color: #d64545;"
WARNING_STYLE = "color: #c27c0e;"
READY_STYLE = "color: #2f9e5b;"


def _error_label() -> QLabel:
    label = QLabel()
    label.setObjectName("fieldError")
    label.setStyleSheet(ERROR_STYLE)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setVisible(False)
    return label


def _auto_spin(maximum: int, tip: str) -> QSpinBox:
    """A spin box whose lowest value reads "auto" (stored as 0)."""
    spin = QSpinBox()
    spin.setRange(0, maximum)
    spin.setSpecialValueText("auto")
    spin.setToolTip(tip)
    spin.setMinimumWidth(80)
    return spin


class _PlanDelivery(QObject):
    """Hands a background plan to the GUI thread (a queued signal: emitted on the planner's thread)."""

    plan_delivered = Signal(object, object)


class LaunchPanel(QWidget):
    """Signals:
        launch_requested(LaunchSpec, str | None profile_name, Path base_dir): Launch was pressed
            with a valid form; the name is what the run is recorded under (``NAME (edited)``
            for a form with unsaved changes, see ``LaunchFormModel.run_profile_label``).
    """

    launch_requested = Signal(object, object, object)

    def __init__(self, form: LaunchFormModel, profiles: ProfileListModel, probe: RunnerProbe,
                 settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._form = form
        self._profiles = profiles
        self._probe = probe
        self._settings = settings
        self._interpreter_errors: dict[str, str] = {}
        self._field_errors: dict[tuple[str, ...], QLabel] = {}
        self._populating = False
        self._plan_delivery = _PlanDelivery(self)
        self._plan_delivery.plan_delivered.connect(self._on_plan_delivered, Qt.ConnectionType.QueuedConnection)
        self._planner = RendezvousPlanner(self._plan_delivery.plan_delivered.emit)
        form.plan_in_background(self._planner.submit)

        self.profile_list = ProfileList(profiles, form)
        form_area = self._build_form()
        self.preview = CommandPreviewPanel(form)
        self.status = QLabel()
        self.status.setObjectName("launchStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.launch_button = QPushButton("Launch")
        self.launch_button.setObjectName("launchButton")
        self.launch_button.setToolTip("Start the job and watch it (Ctrl+R)")
        self.launch_button.setDefault(True)
        self.launch_button.setMinimumWidth(110)
        self.launch_button.clicked.connect(self._on_launch_clicked)

        status_row = QHBoxLayout()
        status_row.setContentsMargins(0, 0, 0, 0)
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.launch_button, 0, Qt.AlignmentFlag.AlignRight)
        bottom = QWidget()
        bottom_layout = QVBoxLayout(bottom)
        bottom_layout.setContentsMargins(8, 4, 8, 8)
        bottom_layout.setSpacing(6)
        bottom_layout.addWidget(self.preview)
        bottom_layout.addLayout(status_row)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.setSpacing(0)
        right_layout.addWidget(form_area, 1)
        line = QFrame()
        line.setFrameShape(QFrame.Shape.HLine)
        line.setFrameShadow(QFrame.Shadow.Sunken)
        right_layout.addWidget(line)
        right_layout.addWidget(bottom)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(8, 8, 4, 8)
        left_layout.addWidget(self.profile_list)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("launchSplitter")
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([220, 1000])
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.splitter)

        self._interpreter_scan = QTimer(self)
        self._interpreter_scan.setSingleShot(True)
        self._interpreter_scan.setInterval(INTERPRETER_SCAN_DELAY_MS)
        self._interpreter_scan.timeout.connect(self._update_interpreter_choices)
        self._gpu_refresh = QTimer(self)
        self._gpu_refresh.setInterval(GPU_REFRESH_MS)
        self._gpu_refresh.timeout.connect(self._on_gpu_refresh_due)

        form.state_replaced.connect(self._on_state_replaced)
        form.evaluated.connect(self._on_evaluated)
        form.machine_changed.connect(self._on_machine_changed)
        form.interpreter_probed.connect(self._on_interpreter_probed)
        probe.gpus_probed.connect(form.set_gpu_report)
        probe.interpreter_probed.connect(form.set_interpreter_info)
        probe.probe_failed.connect(self._on_probe_failed)
        self.gpu_picker.refresh_requested.connect(probe.probe_gpus)

        self._on_state_replaced(form.state)
        self._on_evaluated(form.evaluation)
        probe.probe_gpus()

    # Building.

    def _build_form(self) -> QScrollArea:
        content = QWidget()
        content.setObjectName("formContent")
        grid = QGridLayout(content)
        grid.setContentsMargins(8, 8, 8, 8)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(8)
        left = QVBoxLayout()
        left.setSpacing(8)
        left.addWidget(self._build_script_group())
        left.addWidget(self._build_interpreter_group())
        left.addWidget(self._build_gpu_group())
        self.settings_sections = {title: SettingsSection(self._form, title, items)
                                  for title, items in form_sections(self._form).items()}
        for section in self.settings_sections.values():
            left.addWidget(section)
        left.addStretch(1)
        right = QVBoxLayout()
        right.setSpacing(8)
        right.addWidget(self._build_processes_group())
        right.addWidget(self._build_distributed_group())
        right.addWidget(self._build_env_group())
        self.slurm_section = SlurmSection(self._form)  # Slurm allocates the nodes when it is on
        self.slurm_section.toggled.connect(lambda on: self.nodes_table.setEnabled(not on))
        right.addWidget(self.slurm_section)
        right.addStretch(1)
        grid.addLayout(left, 0, 0)
        grid.addLayout(right, 0, 1)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)
        self._let_choices_shrink(content)
        area = QScrollArea()
        area.setWidgetResizable(True)
        area.setFrameShape(QFrame.Shape.NoFrame)
        area.setWidget(content)
        return area

    @staticmethod
    def _let_choices_shrink(content: QWidget) -> None:
        """A drop-down as wide as its longest choice ("Automatic (direct from a login node, through
        the login host ...)") made the form wider than a 1280-pixel screen, with a horizontal
        scrollbar: every drop-down of the form asks only for ``CHOICE_MIN_CHARS`` and shows a
        longer choice elided (whole in its list)."""
        for combo in content.findChildren(QComboBox):
            if combo.sizeAdjustPolicy() != QComboBox.SizeAdjustPolicy.AdjustToContentsOnFirstShow:
                continue  # sized on purpose where it was built
            longest = max((len(combo.itemText(index)) for index in range(combo.count())), default=0)
            if longest > CHOICE_MIN_CHARS:  # short choices ("Script", "gloo") keep their natural width
                combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
                combo.setMinimumContentsLength(CHOICE_MIN_CHARS)
                combo.view().setTextElideMode(Qt.TextElideMode.ElideNone)

    @staticmethod
    def _form_layout(group: QGroupBox) -> QFormLayout:
        form = QFormLayout(group)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        form.setContentsMargins(10, 8, 10, 8)
        form.setHorizontalSpacing(8)
        form.setVerticalSpacing(5)
        return form

    def _add_error_row(self, form: QFormLayout, *fields: str) -> QLabel:
        label = _error_label()
        form.addRow("", label)
        form.setRowVisible(label, False)
        self._field_errors[fields] = label
        label.setProperty("form_layout", form)
        return label

    @staticmethod
    def _row(*widgets: QWidget, stretch_first: bool = True) -> QWidget:
        holder = QWidget()
        layout = QHBoxLayout(holder)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        for position, widget in enumerate(widgets):
            layout.addWidget(widget, 1 if position == 0 and stretch_first else 0)
        if not stretch_first:
            layout.addStretch(1)
        return holder

    def _build_script_group(self) -> QGroupBox:
        group = QGroupBox("Training script")
        form = self._form_layout(group)
        self.entry_kind = QComboBox()
        self.entry_kind.addItem("Script", ENTRY_SCRIPT)
        self.entry_kind.addItem("Module", ENTRY_MODULE)
        self.entry_kind.setToolTip("A script file, or a module run as `python -m MODULE`")
        self.entry_kind.currentIndexChanged.connect(self._on_entry_kind_changed)
        self.entry = QComboBox()
        self.entry.setEditable(True)
        self.entry.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.entry.setToolTip("The training script (relative paths start from the working directory); "
                              "the list holds recently launched scripts")
        self._entry_line().setPlaceholderText("path/to/train.py")
        self.entry.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.entry.setMinimumContentsLength(20)
        self.entry.editTextChanged.connect(self._on_entry_edited)
        self.browse_script_button = QToolButton()
        self.browse_script_button.setText("Browse…")
        self.browse_script_button.clicked.connect(self._on_browse_script_clicked)
        form.addRow("Entry", self._row(self.entry, self.entry_kind, self.browse_script_button))
        self._add_error_row(form, "script", "module")

        self.args = QLineEdit()
        self.args.setPlaceholderText("--epochs 10 --lr 0.1")
        self.args.setToolTip("Arguments for the script, quoted as in a shell. Per-rank placeholders: {rank}, "
                             "{local_rank}, {world_size}, {node_rank}, {master_addr}, {master_port}, "
                             "{init_method} (tcp://), {init_method:file}; {{ and }} are literal braces")
        self.args.textEdited.connect(self._on_args_edited)
        form.addRow("Arguments", self.args)
        self._add_error_row(form, "args")

        self.workdir = QLineEdit()
        self.workdir.setToolTip("Where the job runs (its current directory); empty: the profile's folder")
        self.workdir.textEdited.connect(self._on_workdir_edited)
        self.browse_workdir_button = QToolButton()
        self.browse_workdir_button.setText("Browse…")
        self.browse_workdir_button.clicked.connect(self._on_browse_workdir_clicked)
        form.addRow("Working dir", self._row(self.workdir, self.browse_workdir_button))
        self._add_error_row(form, "workdir")
        return group

    def _build_interpreter_group(self) -> QGroupBox:
        group = QGroupBox("Interpreter")
        form = self._form_layout(group)
        self.interpreter = QComboBox()
        self.interpreter.setToolTip("The Python (with torch) that runs torchrun and the workers")
        self.interpreter.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.interpreter.setMinimumContentsLength(20)
        self.interpreter.activated.connect(self._on_interpreter_picked)
        self.browse_interpreter_button = QToolButton()
        self.browse_interpreter_button.setText("Browse…")
        self.browse_interpreter_button.clicked.connect(self._on_browse_interpreter_clicked)
        self.recheck_button = QToolButton()
        self.recheck_button.setText("Re-check")
        self.recheck_button.setToolTip("Probe the interpreter again (torch version, CUDA, backends)")
        self.recheck_button.clicked.connect(self._on_recheck_clicked)
        self.interpreter_status = QLabel("Checking…")
        self.interpreter_status.setObjectName("hint")
        self.interpreter_status.setWordWrap(True)
        self.interpreter_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        field = QWidget()
        column = QVBoxLayout(field)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(3)
        column.addWidget(self._row(self.interpreter, self.browse_interpreter_button, self.recheck_button))
        column.addWidget(self.interpreter_status)
        form.addRow("Python", field)
        self._add_error_row(form, "interpreter")
        return group

    def _build_gpu_group(self) -> QGroupBox:
        group = QGroupBox("GPUs")
        layout = QVBoxLayout(group)
        layout.setContentsMargins(10, 8, 10, 8)
        self.gpu_picker = GpuPicker(self._form)
        layout.addWidget(self.gpu_picker)
        label = _error_label()
        layout.addWidget(label)
        self._field_errors[("gpus",)] = label
        return group

    def _build_processes_group(self) -> QGroupBox:
        group = QGroupBox("Processes and nodes")
        form = self._form_layout(group)
        self.nproc = _auto_spin(1024, "Worker processes on each node; auto: one per picked GPU, "
                                      "or one per CPU core in CPU mode")
        self.nproc.valueChanged.connect(self._on_nproc_changed)
        self.nproc_hint = QLabel()
        self.nproc_hint.setObjectName("hint")
        form.addRow("Per node", self._row(self.nproc, self.nproc_hint, stretch_first=False))
        self._add_error_row(form, "nproc_per_node")
        self.nproc_warning = QLabel()
        self.nproc_warning.setObjectName("fieldWarning")
        self.nproc_warning.setStyleSheet(WARNING_STYLE)
        self.nproc_warning.setWordWrap(True)
        form.addRow("", self.nproc_warning)
        form.setRowVisible(self.nproc_warning, False)
        self._processes_form = form
        self.nodes_table = NodesTable(self._form)
        form.addRow("Nodes", self.nodes_table)
        self._add_error_row(form, "nodes")
        return group

    def _build_distributed_group(self) -> QGroupBox:
        group = QGroupBox("Distributed")
        form = self._form_layout(group)
        self.backend = QComboBox()
        for name in LaunchRules.BACKENDS:
            self.backend.addItem(name, name)
            self.backend.setItemData(self.backend.count() - 1, BACKEND_TIPS[name], Qt.ItemDataRole.ToolTipRole)
        self.backend.setToolTip("Process group backend (exported to the script as RANKWATCH_BACKEND)")
        self.backend.setMinimumWidth(120)
        self.backend.currentIndexChanged.connect(self._on_backend_changed)
        self.backend_hint = QLabel()
        self.backend_hint.setObjectName("hint")
        form.addRow("Backend", self._row(self.backend, self.backend_hint, stretch_first=False))
        self._add_error_row(form, "backend")

        self.rendezvous = QComboBox()
        for mode in LaunchRules.RENDEZVOUS_MODES:
            self.rendezvous.addItem(RENDEZVOUS_LABELS[mode], mode)
        self.rendezvous.setToolTip("How the ranks find each other")
        self.rendezvous.currentIndexChanged.connect(self._on_rendezvous_changed)
        form.addRow("Rendezvous", self.rendezvous)

        self.endpoint = QLineEdit()
        self.endpoint.setPlaceholderText("host:port, e.g. node0:29400")
        self.endpoint.setToolTip("The rendezvous endpoint every node can reach")
        self.endpoint.textEdited.connect(self._on_endpoint_edited)
        self.job_id = QLineEdit()
        self.job_id.setPlaceholderText("optional, the same on every node")
        self.job_id.textEdited.connect(self._on_job_id_edited)
        self.master_addr = QLineEdit()
        self.master_addr.setPlaceholderText("localhost")
        self.master_addr.setToolTip("Address of node 0, reachable by every node")
        self.master_addr.textEdited.connect(self._on_master_addr_edited)
        self.master_port = QSpinBox()
        self.master_port.setRange(0, 65535)
        self.master_port.setSpecialValueText("auto (free port)")
        self.master_port.setToolTip("TCP port of the master on node 0; auto: the runner picks a free one at launch")
        self.master_port.setMinimumWidth(130)
        self.master_port.valueChanged.connect(self._on_master_port_changed)
        self.free_port_button = QToolButton()
        self.free_port_button.setText("Free port")
        self.free_port_button.setToolTip("Pick a TCP port that is free on this machine now")
        self.free_port_button.clicked.connect(self._on_free_port_clicked)
        form.addRow("Endpoint", self.endpoint)
        form.addRow("Job id", self.job_id)
        form.addRow("Master addr", self.master_addr)
        master_port_row = self._row(self.master_port, self.free_port_button, stretch_first=False)
        form.addRow("Master port", master_port_row)
        self._distributed_form = form
        self._rendezvous_rows: dict[str, list[QWidget]] = {
            "c10d": [self.endpoint, self.job_id],
            "static": [self.master_addr, master_port_row],
        }
        self._add_error_row(form, "rendezvous")

        self.max_restarts = QSpinBox()
        self.max_restarts.setRange(0, 1000)
        self.max_restarts.setToolTip("How often torchrun restarts all workers after a failure")
        self.max_restarts.setMinimumWidth(80)
        self.max_restarts.valueChanged.connect(self._on_max_restarts_changed)
        form.addRow("Max restarts", self._row(self.max_restarts, stretch_first=False))
        self._add_error_row(form, "max_restarts")

        self.omp_threads = _auto_spin(1024, "OMP_NUM_THREADS for each worker; auto: cores / processes")
        self.omp_threads.valueChanged.connect(self._on_omp_threads_changed)
        self.omp_hint = QLabel()
        self.omp_hint.setObjectName("hint")
        form.addRow("OMP threads", self._row(self.omp_threads, self.omp_hint, stretch_first=False))
        self._add_error_row(form, "omp_num_threads")

        self.legacy_local_rank = QCheckBox("Pass --local_rank to the script")
        self.legacy_local_rank.setToolTip("For scripts written for torch.distributed.launch, which read "
                                          "--local_rank from their arguments instead of LOCAL_RANK")
        self.legacy_local_rank.toggled.connect(self._on_legacy_local_rank_toggled)
        form.addRow("Legacy", self.legacy_local_rank)
        self._add_error_row(form, "legacy_local_rank")

        self.launch_mode = QComboBox()
        for name, tip in LAUNCH_MODE_TIPS.items():
            self.launch_mode.addItem(name, name)
            self.launch_mode.setItemData(self.launch_mode.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.launch_mode.setToolTip("How the script is started: by torchrun, one process per rank, or once, "
                                    "to start its own ranks (torch.multiprocessing.spawn, DataParallel)")
        self.launch_mode.currentIndexChanged.connect(self._on_launch_mode_changed)
        self.launch_mode_hint = QLabel()
        self.launch_mode_hint.setObjectName("hint")
        self.launch_mode_hint.setWordWrap(True)
        form.addRow("Launch mode", self._row(self.launch_mode, self.launch_mode_hint, stretch_first=False))
        self._add_error_row(form, "launch_mode")
        return group

    def _build_env_group(self) -> QGroupBox:
        group = QGroupBox("Environment variables")
        layout = QVBoxLayout(group)
        layout.setContentsMargins(10, 8, 10, 8)
        self.env_table = EnvTable(self._form)
        layout.addWidget(self.env_table)
        label = _error_label()
        layout.addWidget(label)
        self._field_errors[("env",)] = label
        return group

    # Public: the window's menu and shortcuts use these.

    def trigger_launch(self) -> bool:
        """Launch if the form allows it (Ctrl+R); ``False`` when it does not."""
        if not self.launch_button.isEnabled():
            return False
        self._on_launch_clicked()
        return True

    def shutdown(self) -> None:
        self._gpu_refresh.stop()
        self._interpreter_scan.stop()
        self._form.plan_in_background(None)
        self._planner.stop()

    # Model -> widgets.

    def _on_state_replaced(self, state: FormState) -> None:
        self._populating = True
        try:
            self.entry_kind.setCurrentIndex(self.entry_kind.findData(state.entry_kind))
            self._update_recent_scripts()
            self.entry.setEditText(state.entry)
            self.args.setText(state.args_text)
            self.workdir.setText(state.workdir)
            self.nproc.setValue(0 if state.nproc_per_node == LaunchRules.AUTO else int(state.nproc_per_node))
            index = self.backend.findData(state.backend)
            self.backend.setCurrentIndex(max(index, 0))
            self.rendezvous.setCurrentIndex(max(self.rendezvous.findData(state.rendezvous_mode), 0))
            self.endpoint.setText(state.endpoint)
            self.job_id.setText(state.job_id)
            self.master_addr.setText(state.master_addr)
            self.master_port.setValue(state.master_port or 0)
            self.max_restarts.setValue(state.max_restarts)
            self.omp_threads.setValue(0 if state.omp_num_threads == LaunchRules.AUTO else int(state.omp_num_threads))
            self.legacy_local_rank.setChecked(state.legacy_local_rank)
            self.launch_mode.setCurrentIndex(max(self.launch_mode.findData(state.launch_mode), 0))
        finally:
            self._populating = False
        self._update_entry_widgets()
        self._update_rendezvous_rows()
        self._update_interpreter_choices()

    def _on_evaluated(self, evaluation: Evaluation) -> None:
        self.workdir.setPlaceholderText(str(self._form.base_dir))
        for fields, label in self._field_errors.items():
            messages = evaluation.errors_for(*fields)
            label.setText("\n".join(messages))
            form = label.property("form_layout")
            if isinstance(form, QFormLayout):
                form.setRowVisible(label, bool(messages))
            else:
                label.setVisible(bool(messages))
        warnings = evaluation.warnings_for("nproc_per_node")
        self.nproc_warning.setText("\n".join(warnings))
        self._processes_form.setRowVisible(self.nproc_warning, bool(warnings))
        launch = evaluation.launch
        if launch is not None:
            per_node = launch.head.processes
            mode = f"{len(launch.gpus)} GPU{'s' if len(launch.gpus) != 1 else ''}" if launch.gpus else "CPU mode"
            self.nproc_hint.setText(f"= {per_node} ({mode})" if self._form.state.nproc_per_node == LaunchRules.AUTO
                                    else mode)
            self.omp_hint.setText(f"= {launch.omp_num_threads} per process"
                                  if self._form.state.omp_num_threads == LaunchRules.AUTO else "")
            self.backend_hint.setText(f"= {launch.backend}" if self._form.state.backend == LaunchRules.AUTO else "")
            choice = launch.launch_mode
            self.launch_mode_hint.setText(f"= {choice.mode}: {choice.reason}" if choice.chosen_by == "auto" else "")
        else:
            self.nproc_hint.setText("")
            self.omp_hint.setText("")
            self.backend_hint.setText("")
            self.launch_mode_hint.setText("")
        self._update_interpreter_status()
        self._update_launch_status(evaluation)

    def _update_launch_status(self, evaluation: Evaluation) -> None:
        blocker = evaluation.launch_blocker
        self.launch_button.setEnabled(blocker is None)
        if blocker is None and evaluation.launch is not None:
            launch = evaluation.launch
            where = "CPU" if launch.cpu_mode else f"GPUs {','.join(str(i) for i in launch.gpus)}"
            nodes = len(launch.nodes)
            processes = (f"{launch.world_size} processes on {nodes} node{'s' if nodes != 1 else ''}"
                         if not launch.self_spawn else "the script, which starts its own ranks (self-spawn)")
            self.status.setText(f"Ready: {processes} · {where} · {launch.backend}")
            self.status.setStyleSheet(READY_STYLE)
            self.status.setToolTip("")
        else:
            self.status.setText(f"Cannot launch: {blocker}" if evaluation.errors else str(blocker))
            self.status.setStyleSheet(ERROR_STYLE if evaluation.errors else "")
            self.status.setToolTip("\n".join(f"{field}: {message}" for field, message in evaluation.errors))

    def _on_plan_delivered(self, key: Hashable, result: PlanResult) -> None:
        self._form.plan_ready(key, result)

    def _on_machine_changed(self, report: GpuReport | None) -> None:
        if report is not None and report.available and self.isVisible():
            self._gpu_refresh.start()
        else:
            self._gpu_refresh.stop()

    def _on_gpu_refresh_due(self) -> None:
        if self.isVisible():
            self._probe.probe_gpus()

    def _on_interpreter_probed(self, info: InterpreterInfo) -> None:
        self._interpreter_errors.pop(info.python, None)
        self._update_backend_items()
        self._update_interpreter_status()

    def _on_probe_failed(self, kind: str, target: str, message: str) -> None:
        if kind == RunnerProbe.GPUS or self._form.gpu_report is None:
            self._form.set_gpu_report(GpuReport(available=False, reason=f"GPU probe failed: {message}"))
        if kind == RunnerProbe.INTERPRETER:
            self._interpreter_errors[target] = message
            self._update_interpreter_status()

    # Interpreter.

    def _update_recent_scripts(self) -> None:
        text = self.entry.currentText()
        self.entry.blockSignals(True)
        self.entry.clear()
        self.entry.addItems(self._settings.recent_scripts())
        self.entry.setEditText(text)
        self.entry.blockSignals(False)

    def _update_interpreter_choices(self) -> None:
        """Offer this Python, venvs near the script and workdir, conda envs, and the current pick."""
        state = self._form.state
        near = [str(self._form.resolved_workdir())]
        if state.entry_kind == ENTRY_SCRIPT and state.entry.strip():
            script = Path(os.path.expanduser(state.entry.strip()))
            near.append(str(script if script.is_absolute() else self._form.resolved_workdir() / script))
        found = LaunchRules.interpreters_near(near)
        choices = [(found[0].label, "")] + [(item.label, item.path) for item in found[1:]]
        current = state.interpreter.strip()
        if current and all(path != current for _label, path in choices):
            choices.append((f"Other: {current}", current))
        self.interpreter.blockSignals(True)
        self.interpreter.clear()
        for label, path in choices:
            self.interpreter.addItem(label, path)
            self.interpreter.setItemData(self.interpreter.count() - 1, path or found[0].path,
                                         Qt.ItemDataRole.ToolTipRole)
        self.interpreter.setCurrentIndex(max(self.interpreter.findData(current), 0))
        self.interpreter.blockSignals(False)
        self._update_interpreter_status()

    def _update_interpreter_status(self) -> None:
        python = self._form.head_python()
        info = self._form.interpreter_info(python)
        if info is not None:
            self.interpreter_status.setText(info.summary())
        elif python in self._interpreter_errors:
            self.interpreter_status.setText(f"Probe failed: {self._interpreter_errors[python]}")
        elif not self._form.evaluation.errors_for("interpreter"):
            self.interpreter_status.setText(f"Checking {python} (torch, CUDA, backends)…")
            self._probe.probe_interpreter(python)
        else:
            self.interpreter_status.setText("")
        self.interpreter_status.setToolTip(python)
        self._update_backend_items()

    def _update_backend_items(self) -> None:
        info = self._form.interpreter_info(self._form.head_python())
        model = self.backend.model()
        assert isinstance(model, QStandardItemModel), "a QComboBox's own model"
        for row in range(self.backend.count()):
            name = self.backend.itemData(row)
            tip = BACKEND_TIPS.get(name, "")
            enabled = True
            if info is not None and name in InterpreterInfo.BACKEND_NAMES:
                backend = info.backend(name)
                if backend is not None and not backend.available:
                    enabled = False
                    tip = f"Not available in this interpreter: {backend.reason or 'no reason given'}"
            item = model.item(row)
            # Keep the current choice selectable so a loaded profile still shows it (with its error).
            item.setEnabled(enabled or row == self.backend.currentIndex())
            self.backend.setItemData(row, tip, Qt.ItemDataRole.ToolTipRole)
            self.backend.setItemText(row, name if enabled else f"{name} (unavailable)")

    # Widgets -> model.

    def _on_entry_kind_changed(self, _index: int) -> None:
        self._update_entry_widgets()
        if not self._populating:
            self._form.update(entry_kind=self.entry_kind.currentData())

    def _update_entry_widgets(self) -> None:
        is_script = self.entry_kind.currentData() == ENTRY_SCRIPT
        self.browse_script_button.setEnabled(is_script)
        self._entry_line().setPlaceholderText("path/to/train.py" if is_script else "package.train")

    def _entry_line(self) -> QLineEdit:
        """The entry's line edit (the entry is editable, so Qt gave it one)."""
        line = self.entry.lineEdit()
        assert line is not None, "the entry combo box is editable"
        return line

    def _on_entry_edited(self, text: str) -> None:
        if not self._populating:
            self._form.update(entry=text)
            self._interpreter_scan.start()

    def _on_args_edited(self, text: str) -> None:
        self._form.update(args_text=text)

    def _on_workdir_edited(self, text: str) -> None:
        self._form.update(workdir=text)
        self._interpreter_scan.start()

    def _on_nproc_changed(self, value: int) -> None:
        if not self._populating:
            self._form.update(nproc_per_node=value or LaunchRules.AUTO)

    def _on_backend_changed(self, _index: int) -> None:
        if not self._populating:
            self._form.update(backend=self.backend.currentData())
            self._update_backend_items()

    def _on_rendezvous_changed(self, _index: int) -> None:
        self._update_rendezvous_rows()
        if not self._populating:
            self._form.update(rendezvous_mode=self.rendezvous.currentData())

    def _update_rendezvous_rows(self) -> None:
        mode = self.rendezvous.currentData()
        for row_mode, widgets in self._rendezvous_rows.items():
            for widget in widgets:
                self._distributed_form.setRowVisible(widget, row_mode == mode)

    def _on_endpoint_edited(self, text: str) -> None:
        self._form.update(endpoint=text)

    def _on_job_id_edited(self, text: str) -> None:
        self._form.update(job_id=text)

    def _on_master_addr_edited(self, text: str) -> None:
        self._form.update(master_addr=text)

    def _on_master_port_changed(self, value: int) -> None:
        if not self._populating:
            self._form.update(master_port=value or None)

    def _on_free_port_clicked(self) -> None:
        self.master_port.setValue(pick_free_port())

    def _on_max_restarts_changed(self, value: int) -> None:
        if not self._populating:
            self._form.update(max_restarts=value)

    def _on_omp_threads_changed(self, value: int) -> None:
        if not self._populating:
            self._form.update(omp_num_threads=value or LaunchRules.AUTO)

    def _on_launch_mode_changed(self, _index: int) -> None:
        if not self._populating:
            self._form.update(launch_mode=self.launch_mode.currentData())

    def _on_legacy_local_rank_toggled(self, checked: bool) -> None:
        if not self._populating:
            self._form.update(legacy_local_rank=checked)

    def _on_interpreter_picked(self, index: int) -> None:
        self._form.update(interpreter=self.interpreter.itemData(index) or "")

    def _on_browse_script_clicked(self) -> None:
        start = self.entry.currentText().strip() or str(self._form.resolved_workdir())
        path, _filter = QFileDialog.getOpenFileName(self, "Training script", start,
                                                    "Python scripts (*.py);;All files (*)")
        if path:
            self.entry.setEditText(path)  # editTextChanged updates the model

    def _on_browse_workdir_clicked(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Working directory", str(self._form.resolved_workdir()))
        if path:
            self.workdir.setText(path)
            self._on_workdir_edited(path)

    def _on_browse_interpreter_clicked(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(self, "Python interpreter", str(Path.home()))
        if path:
            self._form.update(interpreter=path)
            self._update_interpreter_choices()

    def _on_recheck_clicked(self) -> None:
        python = self._form.head_python()
        self._interpreter_errors.pop(python, None)
        self._form.forget_interpreter_info(python)
        self._update_interpreter_status()
        self._probe.probe_gpus()

    def _on_launch_clicked(self) -> None:
        if not self._form.evaluation.can_launch:
            return
        spec = self._form.spec_for_launch()
        if spec.script:
            self._settings.add_recent_script(spec.script)
            self._update_recent_scripts()
        self.launch_requested.emit(spec, self._form.run_profile_label, self._form.base_dir)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._on_machine_changed(self._form.gpu_report)
