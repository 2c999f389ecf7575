"""sandbox settings per task, permission rules per task and global

Tasks get `network` (its commands may use the network) and `unsandboxed_ok` (in full_auto, commands may run without
a sandbox when none can start). The per-task whole-tool rules of `tasks.tool_rules` ({tool: always|never}) move
into `permission_rules`, which also holds command rules and global rules (task_id NULL). `tool_rules` is dropped
with SQLite's own ALTER TABLE DROP COLUMN (3.35+): alembic's batch mode would copy and drop the whole `tasks`
table, and with foreign keys on that drop would delete every message through ON DELETE CASCADE.

Revision ID: 0003_sandbox_and_permissions
Revises: 0002_tasks_by_update
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_sandbox_and_permissions"
down_revision = "0002_tasks_by_update"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "permission_rules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=True),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("decision", sa.String(length=8), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_permission_rules_task", "permission_rules", ["task_id"], unique=False)
    # sa.false(): DEFAULT 0 on SQLite as before, DEFAULT false on PostgreSQL (no integer default on a boolean).
    op.add_column("tasks", sa.Column("network", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("tasks", sa.Column("unsandboxed_ok", sa.Boolean(), server_default=sa.false(), nullable=False))
    if op.get_bind().dialect.name == "postgresql":
        # The same move in PostgreSQL's JSON functions: tool_rules is a json column there (always valid JSON),
        # and json_each_text takes only an object.
        op.execute(
            "INSERT INTO permission_rules (task_id, tool, command, decision, created_at) "
            "SELECT tasks.id, rule.key, NULL, CASE rule.value WHEN 'always' THEN 'allow' ELSE 'deny' END, "
            "tasks.updated_at FROM tasks, json_each_text(CASE json_typeof(tasks.tool_rules) WHEN 'object' "
            "THEN tasks.tool_rules ELSE '{}'::json END) AS rule WHERE rule.value IN ('always', 'never')"
        )
    else:
        op.execute(
            "INSERT INTO permission_rules (task_id, tool, command, decision, created_at) "
            "SELECT tasks.id, rule.key, NULL, CASE rule.value WHEN 'always' THEN 'allow' ELSE 'deny' END, "
            "tasks.updated_at FROM tasks, json_each(tasks.tool_rules) AS rule "
            "WHERE json_valid(tasks.tool_rules) AND rule.value IN ('always', 'never')"
        )
    op.execute("ALTER TABLE tasks DROP COLUMN tool_rules")


def downgrade() -> None:
    op.add_column("tasks", sa.Column("tool_rules", sa.JSON(), server_default="{}", nullable=False))
    # PostgreSQL names SQLite's json_group_object json_object_agg.
    group_object = "json_object_agg" if op.get_bind().dialect.name == "postgresql" else "json_group_object"
    op.execute(
        f"UPDATE tasks SET tool_rules = (SELECT {group_object}(tool, CASE decision WHEN 'allow' THEN 'always' "
        "ELSE 'never' END) FROM permission_rules WHERE permission_rules.task_id = tasks.id "
        "AND permission_rules.command IS NULL) "
        "WHERE EXISTS (SELECT 1 FROM permission_rules WHERE permission_rules.task_id = tasks.id "
        "AND permission_rules.command IS NULL)"
    )
    op.execute("ALTER TABLE tasks DROP COLUMN unsandboxed_ok")
    op.execute("ALTER TABLE tasks DROP COLUMN network")
    op.drop_index("ix_permission_rules_task", table_name="permission_rules")
    op.drop_table("permission_rules")
