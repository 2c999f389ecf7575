"""Chats in SQLite: their rows, and (through `Conversations`) their messages, turns and checkpoints.

A chat turn runs on the same engine as a task's (`turn.run_turn`), so this store answers the same storage port
(ports.TurnStorage); what a chat does not have — a todo list, helpers — is empty. Its permission rules are the
global ones (RulesRepo: none names a chat).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from ..parts import FinalRecord
from .conversations import Conversations, Tables, row_dict
from .models import ChatCheckpointRow, ChatMessageRow, ChatRow, ChatStepRow, ChatTurnRow
from .rules import RulesRepo

CHAT_TABLES = Tables(ChatRow.__table__, ChatMessageRow.__table__, ChatTurnRow.__table__,
                     ChatCheckpointRow.__table__, "chat_id")


class ChatStore(Conversations, RulesRepo):
    def __init__(self, engine: AsyncEngine):
        super().__init__(engine, CHAT_TABLES)

    async def create_chat(self, chat_id: str, model: str, title: str | None) -> dict[str, Any]:
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(insert(ChatRow).values(id=chat_id, model=model, title=title, state="idle",
                                                      created_at=now, updated_at=now))
            return row_dict((await conn.execute(select(ChatRow.__table__).where(ChatRow.id == chat_id))).one())

    async def get_chat(self, chat_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(ChatRow.__table__).where(ChatRow.id == chat_id))).first()
        return row_dict(r) if r else None

    async def list_chats(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(ChatRow.__table__).order_by(ChatRow.updated_at.desc()))
            return [row_dict(r) for r in rows]

    async def update_chat(self, chat_id: str, **values: Any) -> None:
        values["updated_at"] = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(update(ChatRow).where(ChatRow.id == chat_id).values(**values))

    async def change_model(self, chat_id: str, old: str, new: str) -> None:
        """The chat's next turns use `new`; a marker in the conversation says so (and is left out of model
        inputs: context.build_chat reads user and assistant messages only)."""
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(insert(ChatMessageRow).values(
                chat_id=chat_id, role="event", parts=[{"type": "model_changed", "from": old, "to": new}],
                status="complete", created_at=now))
            await conn.execute(update(ChatRow).where(ChatRow.id == chat_id).values(model=new, updated_at=now))

    async def delete_chat(self, chat_id: str) -> None:
        async with self.engine.begin() as conn:
            turn_ids = select(ChatTurnRow.id).where(ChatTurnRow.chat_id == chat_id)
            await conn.execute(delete(ChatStepRow).where(ChatStepRow.turn_id.in_(turn_ids)))
            for table in (ChatCheckpointRow, ChatTurnRow, ChatMessageRow):
                await conn.execute(delete(table).where(table.chat_id == chat_id))
            await conn.execute(delete(ChatRow).where(ChatRow.id == chat_id))

    async def write_turn_records(self, rec: FinalRecord) -> None:
        """A chat turn's model steps (a chat has no usage anchor and runs no helpers)."""
        if rec["steps"]:
            async with self.engine.begin() as conn:
                await conn.execute(insert(ChatStepRow), [dict(s, turn_id=rec["turn_id"]) for s in rec["steps"]])

    async def steps(self, chat_id: str, turn_id: str) -> list[dict[str, Any]]:
        """The model steps of one of this chat's turns, in order (none for another chat's turn)."""
        own = select(ChatTurnRow.id).where(ChatTurnRow.id == turn_id, ChatTurnRow.chat_id == chat_id)
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(ChatStepRow.__table__).where(ChatStepRow.turn_id.in_(own))
                                      .order_by(ChatStepRow.step_index))
            return [row_dict(r) for r in rows]

    # -- the rest of the turn's storage port: a chat keeps none of these --

    async def set_todos(self, chat_id: str, todos: list[dict]) -> None:
        return None

