"""Alembic environment: runs on the connection the runtime passes in `config.attributes`.

That connection is not in a transaction yet, so alembic opens one per revision and commits the revision
with its version stamp (`transaction_per_migration`); `transactional_ddl` tells it SQLite's DDL takes part
(runtime/store/db.py makes the driver let it).
"""

from alembic import context

from runtime.store import changes, team_models  # noqa: F401  (their tables join Base.metadata)
from runtime.store.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                  transactional_ddl=True, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
