"""The launch form's Slurm section: run on a Slurm cluster instead of this machine.

A checkable group box over ``SlurmForm`` (``gui.models.slurm_form``): nodes, GPUs and
CPUs per node, partition, time limit, account and QoS, the job name, extra
``#SBATCH`` options, where to submit (a login host over ssh, or this machine) and
how the compute nodes report back. Every edit goes to ``LaunchFormModel``; errors
come back from the spec parser under the section (``slurm.*`` fields), and the
command preview then shows the sbatch script.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from gui.models.launch_form import Evaluation, FormState, LaunchFormModel
from gui.models.slurm_form import ROUTE_LABELS, ROUTES, SLURM_FIELD_PREFIXES, SlurmForm

ERROR_STYLE = "color: #d64545;"


def _spin(minimum: int, maximum: int, tip: str, default_text: str | None = None) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(minimum, maximum)
    if default_text:
        spin.setSpecialValueText(default_text)
    spin.setToolTip(tip)
    spin.setMinimumWidth(80)
    return spin


class SlurmSection(QGroupBox):
    def __init__(self, form: LaunchFormModel, parent: QWidget | None = None) -> None:
        super().__init__("Run on a Slurm cluster", parent)
        self._form = form
        self._populating = False
        self.setObjectName("slurmSection")
        self.setCheckable(True)
        self.setToolTip("Submit with sbatch: Slurm allocates the nodes, Rankwatch watches every rank. "
                        "The preview shows the sbatch script, to submit the same job by hand.")
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        layout.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

        self.summary = QLabel()
        self.summary.setObjectName("hint")
        self.summary.setWordWrap(True)
        self.nodes = _spin(1, 100_000, "Nodes Slurm allocates (sbatch --nodes)")
        self.gpus_per_node = _spin(0, 1024, "GPUs per node (--gpus-per-node); CPU mode without", "CPU mode")
        self.cpus_per_node = _spin(0, 100_000, "CPUs per node (--cpus-per-task of each node's one task)",
                                   "1 per process")
        self.partition = QLineEdit()
        self.partition.setPlaceholderText("the cluster's default")
        self.time_limit = QLineEdit()
        self.time_limit.setPlaceholderText("the partition's default; e.g. 2:00:00 or 1-00:00:00")
        self.account = QLineEdit()
        self.qos = QLineEdit()
        self.job_name = QLineEdit()
        self.job_name.setPlaceholderText("rankwatch-<script>")
        self.sbatch_options = QPlainTextEdit()
        self.sbatch_options.setPlaceholderText("one option per line, e.g. --mem=64G")
        self.sbatch_options.setFixedHeight(self.sbatch_options.fontMetrics().lineSpacing() * 3 + 12)
        self.login = QLineEdit()
        self.login.setPlaceholderText("empty: this machine is a login node; else [user@]host for ssh")
        self.login.setToolTip("Submit over ssh on this login host (your ssh config and keys are used)")
        self.login_port = _spin(0, 65535, "The login host's ssh port", "ssh's default")
        self.route = QComboBox()
        for route in ROUTES:
            self.route.addItem(ROUTE_LABELS[route], route)
        self.route.setToolTip("How the compute nodes' agents reach Rankwatch (always with the run's token)")
        self.errors = QLabel()
        self.errors.setObjectName("fieldError")
        self.errors.setStyleSheet(ERROR_STYLE)
        self.errors.setWordWrap(True)
        self.errors.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        layout.addRow(self.summary)
        layout.addRow("Nodes", self.nodes)
        layout.addRow("GPUs / node", self.gpus_per_node)
        layout.addRow("CPUs / node", self.cpus_per_node)
        layout.addRow("Partition", self.partition)
        layout.addRow("Time limit", self.time_limit)
        layout.addRow("Account", self.account)
        layout.addRow("QoS", self.qos)
        layout.addRow("Job name", self.job_name)
        layout.addRow("More #SBATCH", self.sbatch_options)
        layout.addRow("Login host", self.login)
        layout.addRow("SSH port", self.login_port)
        layout.addRow("Telemetry", self.route)
        layout.addRow(self.errors)

        self.toggled.connect(self._on_toggled)
        for spin, name in ((self.nodes, "nodes"), (self.gpus_per_node, "gpus_per_node"),
                           (self.cpus_per_node, "cpus_per_node"), (self.login_port, "login_port")):
            spin.valueChanged.connect(lambda value, name=name: self._on_edited(**{name: value}))
        for line, name in ((self.partition, "partition"), (self.time_limit, "time_limit"), (self.account, "account"),
                           (self.qos, "qos"), (self.job_name, "job_name"), (self.login, "login")):
            line.textEdited.connect(lambda text, name=name: self._on_edited(**{name: text}))
        self.sbatch_options.textChanged.connect(self._on_sbatch_options_changed)
        self.route.currentIndexChanged.connect(self._on_route_changed)
        form.state_replaced.connect(self._on_state_replaced)
        form.evaluated.connect(self._on_evaluated)
        self._on_state_replaced(form.state)
        self._on_evaluated(form.evaluation)

    # Model -> widgets.

    def _on_state_replaced(self, state: FormState) -> None:
        slurm = state.slurm
        self._populating = True
        try:
            self.setChecked(slurm.enabled)
            self.nodes.setValue(slurm.nodes)
            self.gpus_per_node.setValue(slurm.gpus_per_node)
            self.cpus_per_node.setValue(slurm.cpus_per_node)
            self.login_port.setValue(slurm.login_port)
            for line, text in ((self.partition, slurm.partition), (self.time_limit, slurm.time_limit),
                               (self.account, slurm.account), (self.qos, slurm.qos),
                               (self.job_name, slurm.job_name), (self.login, slurm.login)):
                line.setText(text)
            self.sbatch_options.setPlainText(slurm.sbatch_options_text)
            self.route.setCurrentIndex(max(self.route.findData(slurm.telemetry_route), 0))
        finally:
            self._populating = False
        self._update_summary()

    def _on_evaluated(self, evaluation: Evaluation) -> None:
        messages = evaluation.errors_for(*SLURM_FIELD_PREFIXES)
        self.errors.setText("\n".join(messages))
        self.errors.setVisible(bool(messages))
        self._update_summary()

    def _update_summary(self) -> None:
        self.summary.setText(self._form.state.slurm.summary())

    # Widgets -> model.

    def _on_edited(self, **changes: Any) -> None:
        if not self._populating:
            self._form.update(slurm=self._form.state.slurm.with_changes(**changes))

    def _on_toggled(self, checked: bool) -> None:
        self._on_edited(enabled=checked)

    def _on_sbatch_options_changed(self) -> None:
        self._on_edited(sbatch_options_text=self.sbatch_options.toPlainText())

    def _on_route_changed(self, _index: int) -> None:
        self._on_edited(telemetry_route=self.route.currentData())

    def current(self) -> SlurmForm:
        return self._form.state.slurm
