"""Screenshots of the window on a Hearth server (issue 31): the connect dialog, a server's task streaming (the
sidebar's mark says where the tasks live), and the server gone (the mark says "reconnecting…", the message typed
meanwhile kept in its box). A real `hearth serve` single box and a loopback model server. Run under a display (Xvfb,
the xcb platform):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python -m tests.support.server_shots resources/screenshots
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.support.cluster import Cluster
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.qt_helpers import until

ANSWER = ("Here is a plan for the garden this spring:\n\n## Beds\n\n- **North bed**: peas and lettuce, sown in "
          "March\n- **South bed**: tomatoes and basil, planted out in May\n- **Border**: lavender, which the bees "
          "like\n\n## Watering\n\nA soaker hose on a timer, early in the morning, keeps the leaves dry. ") * 3


async def shots(out: Path) -> None:
    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-server-shots-"))
    os.environ["HEARTH_TEST_KEYRING"] = str(tmp / "keyring.json")  # the file keyring below, not the desktop's
    import keyring

    from tests.support.keyring_file import FileKeyring

    keyring.set_keyring(FileKeyring())
    async with OpenAIServer() as model:
        cluster = Cluster(tmp / "server", model.base_url)
        try:
            api = cluster.launch_api()
            await api.started()
            token = await cluster.user("ada")
            ctl = HearthApp(tmp / "home", use_tray=False, preload_model=False)
            await ctl.start()
            ctl.window.resize(1100, 720)
            ctl.window.actions_by_name["Connect to a Server…"].trigger()
            dlg = ctl.connect_window
            dlg.url.setText(api.base_url)
            dlg.token.setText(token)
            await asyncio.sleep(0.8)  # lets Qt paint; processEvents() here would re-enter the qasync loop
            dlg.grab().save(str(out / "50-connect-to-server.png"))
            dlg.connect_button.click()
            await until(lambda: ctl.bridge is not None and ctl.bridge.remote and ctl.window is not None
                        and ctl.window._bridge is ctl.bridge, timeout=15, what="connected")
            await ctl.window.loading
            window = ctl.window
            model.script(Reply([ANSWER[i:i + 6] for i in range(0, len(ANSWER), 6)], delay=0.03))
            new = window.new_task()
            new.goal.setPlainText("Plan the garden for this spring")
            new.title.setText("Garden plan")
            new.create_button.click()
            panel = await until(lambda: window.panel, what="the panel")
            await until(lambda: panel.live_turn and len(panel.turn_text(panel.live_turn)) > 260, timeout=20,
                        what="streaming")
            await asyncio.sleep(0.3)
            window.grab().save(str(out / "51-server-task-streaming.png"))
            api.kill()
            await api.stopped()
            await until(lambda: "reconnecting" in window.sidebar.where.text(), timeout=15, what="reconnecting")
            panel.composer.edit.setPlainText("Add a herb spiral by the door")
            panel.composer.submit()
            await until(lambda: panel.composer.edit.toPlainText() and window.statusBar().currentMessage(),
                        what="the message kept")
            await asyncio.sleep(0.8)
            window.grab().save(str(out / "52-server-reconnecting.png"))
            await ctl.shutdown()
        finally:
            cluster.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
