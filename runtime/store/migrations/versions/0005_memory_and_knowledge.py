"""memory (provenance and a full-text index of the memory files) and the knowledge library (documents, passages,
a full-text index of the passages); tasks get their "use and save memory" setting

Revision ID: 0005_memory_and_knowledge
Revises: 0004_plans_checkpoints_subagents
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_memory_and_knowledge"
down_revision = "0004_plans_checkpoints_subagents"
branch_labels = None
depends_on = None

# FTS5 tables cannot be described by SQLAlchemy's metadata. passages_fts reads its text from `passages`
# (external content), kept in step by the two triggers.
FTS = [
    "CREATE VIRTUAL TABLE memory_fts USING fts5(name UNINDEXED, summary, body, tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE passages_fts USING fts5(text, heading, content='passages', content_rowid='id', "
    "tokenize='porter unicode61')",
    # Passage text counts twice its heading in BM25; `ORDER BY rank` lets FTS5 rank inside the index.
    "INSERT INTO passages_fts(passages_fts, rank) VALUES ('rank', 'bm25(1.0, 0.5)')",
    "CREATE TRIGGER passages_ai AFTER INSERT ON passages BEGIN "
    "INSERT INTO passages_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading); END",
    "CREATE TRIGGER passages_ad AFTER DELETE ON passages BEGIN "
    "INSERT INTO passages_fts(passages_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, old.heading); "
    "END",
]


def upgrade() -> None:
    # ADD COLUMN, never a table rebuild: tasks is the parent of foreign keys that are on.
    op.add_column("tasks", sa.Column("memory", sa.Boolean(), server_default=sa.text("1"), nullable=False))
    op.create_table(
        "memories",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("source_task_id", sa.String(length=32), nullable=True),
        sa.Column("source_turn_id", sa.String(length=32), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("mtime", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "documents",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("size", sa.Integer(), server_default="0", nullable=False),
        sa.Column("mtime", sa.Float(), server_default="0", nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("progress", sa.Float(), server_default="0", nullable=False),
        sa.Column("passages", sa.Integer(), server_default="0", nullable=False),
        sa.Column("embed_model", sa.String(length=200), nullable=True),
        sa.Column("added_at", sa.Float(), nullable=False),
        sa.Column("indexed_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_documents_path", "documents", ["path"], unique=True)
    op.create_index("ix_documents_status", "documents", ["status"], unique=False)
    op.create_table(
        "passages",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("heading", sa.Text(), nullable=True),
        sa.Column("page", sa.Integer(), nullable=True),
        sa.Column("line_start", sa.Integer(), nullable=True),
        sa.Column("line_end", sa.Integer(), nullable=True),
        sa.Column("vector", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(["document_id"], ["documents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_passages_document", "passages", ["document_id", "seq"], unique=False)
    for statement in FTS:
        op.execute(statement)


def downgrade() -> None:
    for name in ("passages_ad", "passages_ai"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("DROP TABLE IF EXISTS passages_fts")
    op.execute("DROP TABLE IF EXISTS memory_fts")
    op.drop_index("ix_passages_document", table_name="passages")
    op.drop_table("passages")
    op.drop_index("ix_documents_status", table_name="documents")
    op.drop_index("ix_documents_path", table_name="documents")
    op.drop_table("documents")
    op.drop_table("memories")
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.drop_column("memory")
