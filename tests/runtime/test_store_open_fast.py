"""Opening a data folder whose database is already at the newest revision does not load alembic (with mako and
pygments, a sizeable part of every start of `hearth run` and of the app); a new or older database still migrates."""

from __future__ import annotations

import subprocess
import sys

from alembic.script import ScriptDirectory

from runtime.store.db import alembic_config, head_revision

OPEN_AND_REPORT = """
import asyncio, sys
from runtime.api import Runtime
async def main():
    rt = await Runtime.open(sys.argv[1])
    task = await rt.create_task(title="works")
    assert (await rt.get_task(task.id)).title == "works"
    await rt.aclose()
asyncio.run(main())
print("alembic" in sys.modules)
"""


def test_the_head_is_read_like_alembic_reads_it():
    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_an_up_to_date_database_opens_without_alembic(home):
    opened = subprocess.run([sys.executable, "-c", OPEN_AND_REPORT, str(home)], capture_output=True, text=True)
    assert opened.stdout.strip() == "True", opened.stderr  # a new folder: migrated by alembic
    again = subprocess.run([sys.executable, "-c", OPEN_AND_REPORT, str(home)], capture_output=True, text=True)
    assert again.stdout.strip() == "False", again.stderr  # at the head: alembic never imported, tasks work


def test_starting_without_knowledge_vectors_does_not_import_numpy(home):
    """numpy (~0.2 s of every start) is loaded only by knowledge search with embeddings."""
    code = OPEN_AND_REPORT.replace('print("alembic" in sys.modules)', 'print("numpy" in sys.modules)')
    opened = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True)
    assert opened.stdout.strip() == "False", opened.stderr
