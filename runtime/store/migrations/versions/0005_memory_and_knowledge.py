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

# PostgreSQL has no FTS5. Its counterparts are tsvector columns that PostgreSQL computes itself (GENERATED ...
# STORED, so no trigger keeps them in step) with GIN indexes; the 'english' configuration stems as FTS5's porter
# tokenizer does. memory_fts is an ordinary table with FTS5's columns, so the memory repository writes it with the
# same statements on both, plus its vector `search` (summary weighted A, body B: ts_rank with '{0, 0, 0.5, 1}'
# gives the 2:1 of bm25(memory_fts, 0, 2.0, 1.0)). The passages' vector is a column of `passages` itself (text A,
# heading B, for bm25(1.0, 0.5)): on SQLite passages_fts reads its text from there too, and a document's cascade
# needs nothing more. A search matches `search @@ to_tsquery('english', ...)`.
PG_FTS = [
    "CREATE TABLE memory_fts (name TEXT PRIMARY KEY, summary TEXT NOT NULL, body TEXT NOT NULL, "
    "search tsvector GENERATED ALWAYS AS (setweight(to_tsvector('english', summary), 'A') || "
    "setweight(to_tsvector('english', body), 'B')) STORED)",
    "CREATE INDEX ix_memory_fts_search ON memory_fts USING gin (search)",
    "ALTER TABLE passages ADD COLUMN search tsvector GENERATED ALWAYS AS (setweight(to_tsvector('english', text), "
    "'A') || setweight(to_tsvector('english', coalesce(heading, '')), 'B')) STORED",
    "CREATE INDEX ix_passages_search ON passages USING gin (search)",
]


def upgrade() -> None:
    # ADD COLUMN, never a table rebuild: tasks is the parent of foreign keys that are on.
    # sa.true(): DEFAULT 1 on SQLite as before, DEFAULT true on PostgreSQL (no integer default on a boolean).
    op.add_column("tasks", sa.Column("memory", sa.Boolean(), server_default=sa.true(), nullable=False))
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
    for statement in PG_FTS if op.get_bind().dialect.name == "postgresql" else FTS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":  # on PostgreSQL passages.search goes with its table
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
