"""Desktop notifications: the freedesktop notification service, else a tray balloon.

On Linux desktops (GNOME, KDE, XFCE...) a notification goes to
``org.freedesktop.Notifications`` on the session bus, as ``notify-send`` does; where
there is no such service but a system tray, a tray balloon shows it; where there is
neither (a bare X server, a test), nothing is shown and nothing fails. Every notice
is also kept in :attr:`Notifier.sent`, and the window asks for attention in the
taskbar (``QApplication.alert``) for urgent ones.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget

from gui.models.notices import APP_NAME, Notice

FREEDESKTOP_SERVICE = "org.freedesktop.Notifications"
FREEDESKTOP_PATH = "/org/freedesktop/Notifications"
TIMEOUT_MS = 8000


class Notifier(QObject):
    """Shows :class:`~gui.models.notices.Notice` values on the desktop."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self._window = window
        self._tray: QSystemTrayIcon | None = None
        self.sent: list[Notice] = []
        self.how = ""
        """How the last notice was shown: ``freedesktop``, ``tray`` or ``none``."""

    def notify(self, notice: Notice) -> None:
        self.sent.append(notice)
        if notice.urgent:
            QApplication.alert(self._window, 0)
        if self._send_freedesktop(notice):
            self.how = "freedesktop"
        elif self._send_tray(notice):
            self.how = "tray"
        else:
            self.how = "none"

    def _send_freedesktop(self, notice: Notice) -> bool:
        try:
            from PySide6.QtDBus import QDBus, QDBusConnection, QDBusInterface, QDBusMessage
        except ImportError:
            return False
        bus = QDBusConnection.sessionBus()
        if not bus.isConnected():
            return False
        interface = QDBusInterface(FREEDESKTOP_SERVICE, FREEDESKTOP_PATH, FREEDESKTOP_SERVICE, bus)
        if not interface.isValid():
            return False
        # Notify(app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout).
        # With eight arguments PySide6 has only the overload that names the call mode first.
        reply = interface.call(QDBus.CallMode.AutoDetect, "Notify", APP_NAME, 0, "rankwatch",
                               notice.title, notice.body, [], {}, TIMEOUT_MS)
        return reply.type() != QDBusMessage.MessageType.ErrorMessage

    def _send_tray(self, notice: Notice) -> bool:
        if not QSystemTrayIcon.isSystemTrayAvailable() or not QSystemTrayIcon.supportsMessages():
            return False
        if self._tray is None:
            self._tray = QSystemTrayIcon(self._window.windowIcon(), self)
            self._tray.setToolTip(APP_NAME)
        self._tray.show()
        icon = QSystemTrayIcon.MessageIcon.Critical if notice.urgent else QSystemTrayIcon.MessageIcon.Information
        self._tray.showMessage(notice.title, notice.body, icon, TIMEOUT_MS)
        return True
