"""The turn-lifecycle SQL of any conversation owner — a task, or a chat — on its own tables.

A task (`tasks`, `messages`, `turns`, `context_checkpoints`, `usage_anchors`) and a chat (`chats`,
`chat_messages`, `chat_turns`, `chat_checkpoints`) keep the same columns apart from the owner key, so the writes a
turn makes (its input, checkpoints, finalize and its fallback, startup recovery) and the reads that rebuild its
model input are written once, here, over a `Tables` description.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Table, Text, func, insert, or_, select, type_coerce, update
from sqlalchemy.engine import CursorResult, Result, Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..events import Usage
from ..parts import FinalRecord, settle_parts, stop_waiting
from .lengths import refuse_too_long


@dataclass(frozen=True)
class Tables:
    owner: Table
    messages: Table
    turns: Table
    checkpoints: Table
    key: str  # the owner's id column in the other tables: "task_id" or "chat_id"
    anchors: Table | None = None  # where the last request's size is kept (tasks only)


@dataclass
class ContextInputs:
    messages: list[dict[str, Any]]
    anchor: dict[str, Any] | None
    checkpoint: dict[str, Any] | None  # {"id", "upto_message_id", "summary"}: the older history, summarized


@dataclass
class EndedWait:
    """A wait for the person's answer that ended without one (Stop, or another input): the turn that waited, its
    calls now `stopped`, and its tokens (what its `turn_ended` repeats)."""

    turn_id: str
    stopped: list[dict[str, Any]]
    usage: Usage


@dataclass
class Started:
    """A turn that started: its input (id, parts), its answer's message id, and the wait it ended, if any."""

    input_id: int
    parts: list[dict[str, Any]]
    output_id: int
    ended_wait: EndedWait | None


class RunningTurn(NamedTuple):
    turn_id: str
    owner_id: str  # the task (chat, assignment) it runs for
    started_at: float


class DuplicateMessage(Exception):
    """An input with this client message id exists already; `row` is it."""

    def __init__(self, row: dict[str, Any]):
        super().__init__(row["client_msg_id"])
        self.row = row


def row_dict(r: Row) -> dict[str, Any]:
    return dict(r._mapping)


def inserted_id(result: CursorResult[Any]) -> int:
    """The integer primary key a one-row INSERT gave its row."""
    key = result.inserted_primary_key
    assert key is not None, "only an INSERT of many rows, or one with RETURNING, has no inserted key"
    return int(key[0])


def row_dicts(result: Result[Any]) -> list[dict[str, Any]]:
    """Every row of a result as a dict, the column names read once (a row's own mapping costs ~10 µs a row,
    which a turn over a 2,000-message task pays on every model request)."""
    keys = list(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result]


class Conversations:
    def __init__(self, engine: AsyncEngine, tables: Tables):
        self.engine = engine
        self.t = tables

    @property
    def owner_key(self) -> str:
        return self.t.key

    def _own(self, table: Table, owner_id: str) -> ColumnElement[bool]:
        return table.c[self.t.key] == owner_id

    # -- messages --

    async def messages(self, owner_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> list[dict[str, Any]]:
        """The messages in order. With `limit`: the newest `limit` ones (before `before`), or the oldest ones
        after `after` — a page, read through the (owner, id) index."""
        m = self.t.messages
        query = select(m).where(self._own(m, owner_id), m.c.status != "discarded")
        if before is not None:
            query = query.where(m.c.id < before)
        if after is not None:
            query = query.where(m.c.id > after)
        newest_first = limit is not None and after is None
        query = query.order_by(m.c.id.desc() if newest_first else m.c.id)
        if limit is not None:
            query = query.limit(limit)
        async with self.engine.connect() as conn:
            rows = row_dicts(await conn.execute(query))
        return rows[::-1] if newest_first else rows

    async def find_client_message(self, owner_id: str, client_msg_id: str) -> dict[str, Any] | None:
        m = self.t.messages
        async with self.engine.connect() as conn:
            r = (await conn.execute(
                select(m).where(self._own(m, owner_id), m.c.client_msg_id == client_msg_id))).first()
        return row_dict(r) if r else None

    async def add_input(
        self, owner_id: str, parts: list[dict], *, client_msg_id: str | None, turn_id: str | None,
        title: str | None = None,
    ) -> tuple[int, Started | None]:
        """Persist an input, durably, in one transaction. Without a turn id it is queued. With one, a turn
        starts for the owner's oldest queued input, which is this one unless older queued inputs wait (a new
        input never overtakes them). Returns (message id, the started turn or None). Raises `DuplicateMessage`
        when `client_msg_id` was used before by this owner, ConfigError when it is longer than its column."""
        now = time.time()
        m, o = self.t.messages, self.t.owner
        refuse_too_long(m, {"client_msg_id": client_msg_id})
        try:
            async with self.engine.begin() as conn:
                msg_id = inserted_id(await conn.execute(insert(m).values({
                    self.t.key: owner_id, "role": "user", "parts": parts, "status": "queued",
                    "client_msg_id": client_msg_id, "created_at": now})))
                started = await self._start_oldest_queued(conn, owner_id, turn_id, now) if turn_id else None
                if title:
                    titled = {"title": title} | ({"title_provisional": True} if "title_provisional" in o.c else {})
                    await conn.execute(update(o).where(o.c.id == owner_id, o.c.title.is_(None)).values(titled))
        except IntegrityError:
            seen = await self.find_client_message(owner_id, client_msg_id) if client_msg_id else None
            if seen is None:
                raise
            raise DuplicateMessage(seen) from None
        return msg_id, started

    async def settle_title(self, owner_id: str, title: str | None) -> bool:
        """The model's title (None: keep the provisional one) replaces a provisional or missing title, which
        is final from then on; False when the person named the owner meanwhile, or it is gone."""
        o = self.t.owner
        values: dict[str, Any] = {"title_provisional": False}
        if title:
            values["title"] = title
        async with self.engine.begin() as conn:
            result = await conn.execute(update(o).where(
                o.c.id == owner_id, or_(o.c.title_provisional.is_(True), o.c.title.is_(None))).values(values))
        return result.rowcount == 1

    async def start_queued_turn(self, owner_id: str, turn_id: str) -> Started | None:
        """Start a turn for the oldest queued input, or None when there is none."""
        async with self.engine.begin() as conn:
            return await self._start_oldest_queued(conn, owner_id, turn_id, time.time())

    async def _start_oldest_queued(self, conn: AsyncConnection, owner_id: str, turn_id: str,
                                   now: float) -> Started | None:
        """The oldest queued input becomes its turn's input. Later inputs queued behind it would otherwise sit
        between it and its answer (ids give the order): it moves to the end of the conversation first, under a
        new id, its old row left as an empty `discarded` tombstone (ids never reused). An input that is no answer
        ends a wait for one first (`end_wait`), so no question or approval is left pending."""
        m = self.t.messages
        first = (await conn.execute(select(m.c.id, m.c.parts, m.c.client_msg_id, m.c.created_at).where(
            self._own(m, owner_id), m.c.status == "queued").order_by(m.c.id).limit(1))).first()
        if first is None:
            return None
        input_id = first.id
        newest = (await conn.execute(select(m.c.id).where(  # read backwards on the (owner, id) index: O(1)
            self._own(m, owner_id), m.c.status != "discarded").order_by(m.c.id.desc()).limit(1))).scalar_one()
        if newest != first.id:
            await conn.execute(update(m).where(m.c.id == first.id).values(
                status="discarded", parts=[], client_msg_id=None))
            input_id = inserted_id(await conn.execute(insert(m).values({
                self.t.key: owner_id, "role": "user", "parts": first.parts, "status": "complete",
                "client_msg_id": first.client_msg_id, "created_at": first.created_at})))
        else:
            await conn.execute(update(m).where(m.c.id == first.id).values(status="complete"))
        answers = any(p.get("type") == "answer" for p in first.parts)
        ended = None if answers else await self._end_wait(conn, owner_id)
        return Started(input_id, first.parts, await self._start_turn(conn, owner_id, turn_id, input_id, now), ended)

    async def _start_turn(self, conn: AsyncConnection, owner_id: str, turn_id: str, input_id: int, now: float) -> int:
        m, t, o = self.t.messages, self.t.turns, self.t.owner
        out_id = inserted_id(await conn.execute(insert(m).values({
            self.t.key: owner_id, "turn_id": turn_id, "role": "assistant", "parts": [], "status": "streaming",
            "created_at": now})))
        await conn.execute(insert(t).values({
            "id": turn_id, self.t.key: owner_id, "input_message_id": input_id, "output_message_id": out_id,
            "status": "running", "started_at": now}))
        await conn.execute(update(m).where(m.c.id == input_id).values(turn_id=turn_id))
        await conn.execute(update(o).where(o.c.id == owner_id).values(state="running", pending_request=None,
                                                                       updated_at=now))
        return out_id

    async def has_queued(self, owner_id: str) -> bool:
        """Whether an input of the owner waits for its turn."""
        m = self.t.messages
        async with self.engine.connect() as conn:
            found = (await conn.execute(select(m.c.id).where(
                self._own(m, owner_id), m.c.status == "queued").limit(1))).first()
        return found is not None

    async def discard_queued(self, owner_id: str, message_id: int) -> bool:
        """Discard a queued input that has not started (its text is dropped); False when there is none with that
        id. The row stays as an empty tombstone: message ids only ever grow, so a reader that asks for the
        messages after the newest id it knows never misses one (SQLite reuses a deleted highest rowid)."""
        m = self.t.messages
        async with self.engine.begin() as conn:
            result = await conn.execute(update(m).where(
                m.c.id == message_id, self._own(m, owner_id), m.c.status == "queued"
            ).values(status="discarded", parts=[], client_msg_id=None))
        return result.rowcount > 0

    async def finished_messages(self, owner_id: str) -> list[dict[str, Any]]:
        """Role, parts and time of every finished message, in order (what a copy into a new task takes)."""
        m = self.t.messages
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(m.c.role, m.c.parts, m.c.created_at).where(
                self._own(m, owner_id), m.c.status.in_(("complete", "streaming")),
                m.c.role.in_(("user", "assistant"))).order_by(m.c.id))
            return row_dicts(rows)

    async def checkpoint(self, message_id: int, parts: list[dict]) -> None:
        m = self.t.messages
        async with self.engine.begin() as conn:
            await conn.execute(update(m).where(m.c.id == message_id).values(parts=parts))

    # -- turns --

    async def turns(self, owner_id: str, turn_ids: list[str] | None = None) -> list[dict[str, Any]]:
        t = self.t.turns
        query = select(t).where(self._own(t, owner_id))
        if turn_ids is not None:
            query = query.where(t.c.id.in_(turn_ids))
        async with self.engine.connect() as conn:
            return row_dicts(await conn.execute(query.order_by(t.c.started_at)))

    async def context_inputs(self, owner_id: str) -> ContextInputs:
        """What a turn's model input is rebuilt from, read on one connection (this is on the turn's critical
        path): the latest context checkpoint, the messages after it, the usage anchor. Parts come as JSON text:
        the turn decodes them in a worker thread, off the event loop."""
        m, c, a = self.t.messages, self.t.checkpoints, self.t.anchors
        async with self.engine.connect() as conn:
            cp = (await conn.execute(select(c.c.id, c.c.upto_message_id, c.c.summary).where(
                self._own(c, owner_id)).order_by(c.c.upto_message_id.desc(), c.c.id.desc()).limit(1))).first()
            query = select(m.c.id, m.c.role, m.c.status, type_coerce(m.c.parts, Text).label("parts")).where(
                self._own(m, owner_id), m.c.status != "discarded")
            if cp is not None:
                query = query.where(m.c.id > cp.upto_message_id)
            messages = row_dicts(await conn.execute(query.order_by(m.c.id)))
            anchor = (await conn.execute(select(a).where(self._own(a, owner_id)))).first() if a is not None else None
        return ContextInputs(messages, row_dict(anchor) if anchor else None, row_dict(cp) if cp else None)

    async def add_checkpoint(self, owner_id: str, turn_id: str | None, upto_message_id: int, summary: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(self.t.checkpoints).values({
                self.t.key: owner_id, "turn_id": turn_id, "upto_message_id": upto_message_id, "summary": summary,
                "created_at": time.time()}))

    async def checkpoints(self, owner_id: str) -> list[dict[str, Any]]:
        c = self.t.checkpoints
        async with self.engine.connect() as conn:
            return row_dicts(await conn.execute(select(c).where(self._own(c, owner_id)).order_by(c.c.id)))

    async def finalize_turn(self, rec: FinalRecord) -> None:
        """Finalize's commit: the message and its parts, the turn row and the owner, in one transaction."""
        now = time.time()
        m, t, o = self.t.messages, self.t.turns, self.t.owner
        usage = rec["usage"]
        async with self.engine.begin() as conn:
            await conn.execute(update(m).where(m.c.id == rec["output_message_id"]).values(
                parts=rec["parts"], status="complete"))
            await conn.execute(update(t).where(t.c.id == rec["turn_id"]).values(
                status="ended", reason=rec["reason"], ended_at=now, error=rec["error"],
                input_tokens=usage.input_tokens, output_tokens=usage.output_tokens))
            await conn.execute(update(o).where(o.c.id == rec["task_id"]).values(
                state=rec["state"], last_reason=rec["reason"], last_error=rec["error"],
                pending_request=rec["pending_request"], updated_at=now,
                input_tokens=o.c.input_tokens + usage.input_tokens,
                output_tokens=o.c.output_tokens + usage.output_tokens))

    async def fail_turn(self, rec: FinalRecord) -> None:
        """Fallback when `finalize_turn` failed: the settled parts, the turn `error`, the owner idle."""
        now = time.time()
        m, t, o = self.t.messages, self.t.turns, self.t.owner
        async with self.engine.begin() as conn:
            await conn.execute(update(m).where(m.c.id == rec["output_message_id"]).values(
                parts=rec["parts"], status="complete"))
            await conn.execute(update(t).where(t.c.id == rec["turn_id"]).values(
                status="ended", reason="error", ended_at=now, error=rec["error"]))
            await conn.execute(update(o).where(o.c.id == rec["task_id"]).values(
                state="idle", last_reason="error", last_error=rec["error"], pending_request=None, updated_at=now))

    async def is_waiting(self, owner_id: str) -> bool:
        """Whether the owner waits for the person's answer (False for one that does not exist)."""
        o = self.t.owner
        async with self.engine.connect() as conn:
            state = (await conn.execute(select(o.c.state).where(o.c.id == owner_id))).scalar_one_or_none()
        return state == "waiting"

    async def end_wait(self, owner_id: str) -> EndedWait | None:
        """End the owner's wait for an answer without one (Stop), in one transaction; None when it did not wait."""
        async with self.engine.begin() as conn:
            return await self._end_wait(conn, owner_id)

    async def _end_wait(self, conn: AsyncConnection, owner_id: str) -> EndedWait | None:
        """The owner idle, its question or approval gone, the turn that waited `aborted` and its waiting calls
        `stopped`: only if it waits (the check and the change are one statement)."""
        m, t, o = self.t.messages, self.t.turns, self.t.owner
        ended = await conn.execute(update(o).where(o.c.id == owner_id, o.c.state == "waiting").values(
            state="idle", last_reason="aborted", last_error=None, pending_request=None, updated_at=time.time()))
        if ended.rowcount != 1:
            return None
        turn = (await conn.execute(select(t.c.id, t.c.output_message_id, t.c.input_tokens, t.c.output_tokens).where(
            self._own(t, owner_id), t.c.reason == "waiting").order_by(t.c.started_at.desc()).limit(1))).first()
        if turn is None:
            return None
        parts = (await conn.execute(select(m.c.parts).where(m.c.id == turn.output_message_id))).scalar() or []
        stopped = stop_waiting(parts)
        await conn.execute(update(m).where(m.c.id == turn.output_message_id).values(parts=parts))
        await conn.execute(update(t).where(t.c.id == turn.id).values(reason="aborted"))
        return EndedWait(turn.id, stopped, Usage(input_tokens=turn.input_tokens or 0,
                                                 output_tokens=turn.output_tokens or 0))

    # -- recovery --

    async def recover(self) -> list[str]:
        """Startup recovery: running turns become `interrupted`, their unfinished tool parts settled,
        checkpointed text kept. Waiting owners stay waiting. Returns the recovered turn ids."""
        now = time.time()
        t, o = self.t.turns, self.t.owner
        async with self.engine.begin() as conn:
            running = (await conn.execute(select(t.c.id, t.c[self.t.key], t.c.output_message_id).where(
                t.c.status == "running"))).all()
            for turn_id, owner_id, out_id in running:
                await conn.execute(update(t).where(t.c.id == turn_id).values(
                    status="ended", reason="interrupted", ended_at=now))
                await self._settle_interrupted(conn, owner_id, out_id, now)
            # An owner marked running without a running turn (crash between commits) is idle again.
            await conn.execute(update(o).where(o.c.state == "running").values(
                state="idle", last_reason=func.coalesce(o.c.last_reason, "interrupted")))
        return [r[0] for r in running]

    async def running_turn(self, owner_id: str, turn_id: str) -> Started | None:
        """A turn that is still running, as its start gave it (its input and parts, its answer's message): what a
        server worker runs. None when it is not running (any more)."""
        t, m = self.t.turns, self.t.messages
        async with self.engine.connect() as conn:
            turn = (await conn.execute(select(t.c.input_message_id, t.c.output_message_id).where(
                t.c.id == turn_id, self._own(t, owner_id), t.c.status == "running"))).first()
            if turn is None:
                return None
            parts = (await conn.execute(select(m.c.parts).where(m.c.id == turn.input_message_id))).scalar()
        return Started(turn.input_message_id, parts or [], turn.output_message_id, None)

    async def running_turns(self) -> list[RunningTurn]:
        """Every turn still marked running, oldest first: what the server host's lease reaper looks at."""
        t = self.t.turns
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(t.c.id, t.c[self.t.key], t.c.started_at).where(
                t.c.status == "running").order_by(t.c.started_at))
            return [RunningTurn(*r) for r in rows]

    async def interrupt_turn(self, owner_id: str, turn_id: str) -> bool:
        """What startup recovery does, for one turn whose process is gone (the server host's reaper, when the
        turn's lease expired): the turn `interrupted`, its checkpointed text kept, its unfinished tool parts
        settled (a side-effecting one "outcome unknown"), the owner idle unless it waits for an answer or another
        turn of it runs. False, changing nothing, when the turn is not running (any more): it was finalized, or
        another reaper was first — the turn's row is claimed first, so two reapers never both settle it."""
        now = time.time()
        t = self.t.turns
        async with self.engine.begin() as conn:
            claimed = await conn.execute(update(t).where(
                t.c.id == turn_id, self._own(t, owner_id), t.c.status == "running").values(
                status="ended", reason="interrupted", ended_at=now))
            if claimed.rowcount != 1:
                return False
            out_id = (await conn.execute(select(t.c.output_message_id).where(t.c.id == turn_id))).scalar()
            others = select(t.c.id).where(self._own(t, owner_id), t.c.status == "running").exists()
            await self._settle_interrupted(conn, owner_id, out_id, now, ~others)
        return True

    async def _settle_interrupted(self, conn: AsyncConnection, owner_id: str, out_id: int | None, now: float,
                                  *when: ColumnElement[bool]) -> None:
        """An interrupted turn's answer: its parts as far as they were checkpointed, unfinished tool parts
        settled, complete; its owner idle with `last_reason` interrupted, unless it waits (or `when` fails)."""
        m, o = self.t.messages, self.t.owner
        if out_id is not None:
            parts = (await conn.execute(select(m.c.parts).where(m.c.id == out_id))).scalar_one_or_none() or []
            settle_parts(parts)
            await conn.execute(update(m).where(m.c.id == out_id).values(parts=parts, status="complete"))
        await conn.execute(update(o).where(o.c.id == owner_id, o.c.state != "waiting", *when).values(
            state="idle", last_reason="interrupted", updated_at=now))
