# ruff: noqa: F722, F821 - D-Bus signatures in annotations, as dbus-fast reads them
"""A private D-Bus session bus with a notification service, for the app's notification tests.

    async with notification_service() as calls: ...   # DBUS_SESSION_BUS_ADDRESS points to it meanwhile

`calls` collects (summary, body) of every org.freedesktop.Notifications.Notify the app makes. (No
`from __future__ import annotations` here: dbus-fast reads the D-Bus signatures from the annotations.)
"""

import asyncio
import contextlib
import os

from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method, signal


class Notifications(ServiceInterface):
    def __init__(self):
        super().__init__("org.freedesktop.Notifications")
        self.calls = []

    @method()
    def Notify(self, app_name: "s", replaces_id: "u", app_icon: "s", summary: "s", body: "s",
               actions: "as", hints: "a{sv}", expire_timeout: "i") -> "u":
        self.calls.append((summary, body))
        return len(self.calls)

    @method()
    def CloseNotification(self, notification_id: "u"):
        pass

    @method()
    def GetCapabilities(self) -> "as":
        return ["body", "actions"]

    @method()
    def GetServerInformation(self) -> "ssss":
        return ["hearth-tests", "hearth", "1", "1.2"]

    @signal()
    def NotificationClosed(self) -> "uu":
        return [0, 0]

    @signal()
    def ActionInvoked(self) -> "us":
        return [0, ""]


@contextlib.asynccontextmanager
async def notification_service():
    daemon = await asyncio.create_subprocess_exec(
        "dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address",
        stdout=asyncio.subprocess.PIPE)
    old = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    try:
        address = (await asyncio.wait_for(daemon.stdout.readline(), 10)).decode().strip()
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
        bus = await MessageBus(bus_address=address).connect()
        service = Notifications()
        bus.export("/org/freedesktop/Notifications", service)
        await bus.request_name("org.freedesktop.Notifications")
        try:
            yield service.calls
        finally:
            bus.disconnect()
    finally:
        if old is None:
            os.environ.pop("DBUS_SESSION_BUS_ADDRESS", None)
        else:
            os.environ["DBUS_SESSION_BUS_ADDRESS"] = old
        daemon.terminate()
        await daemon.wait()
