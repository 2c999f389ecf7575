"""What a task panel shows, read and followed: the paging reads and the live turn (runtime/ARCHITECTURE.md,
"StreamBuffer and subscriptions").

The feed opens the task at its last page (or around the message the person was reading), then follows the task
with one subscription across all its turns. Reads are incremental: a new turn reads the messages after the
newest one known, a finished turn re-reads its own message; nothing re-reads the whole conversation. Events
of a turn go to that turn's live `Message` (and its item when rendered); a turn whose message is not read yet
keeps its events aside until it is; a turn whose message was final when read is ignored (its events are a
replay of what the message holds). The panel it serves gets `apply_info`, `show_phases` and `turn_started`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt

from ..core.bridge import RuntimeBridge, TaskObserver
from .details import DetailsDialog
from .message_item import Message
from .view import PAGE, ConversationView
from .waiting import WaitingBox

if TYPE_CHECKING:
    from runtime.api import MessageInfo

    from ..core.bridge import Batched
    from ..core.sources import AssignmentSource, ChatSource, TaskSource
    from .composer import Composer


class ConversationFeed:
    def __init__(self, bridge: RuntimeBridge, source: TaskSource | ChatSource | AssignmentSource,
                 conversation: ConversationView, panel, view_state=None):
        self.bridge = bridge
        self.source = source
        self.conversation = conversation
        self.panel = panel
        self.observer: TaskObserver | None = None
        self.loaded = asyncio.Event()
        self.live: dict[str, Message] = {}  # turn id -> its assistant message while the turn runs
        self._final: set[str] = set()  # turns whose message was final when read: their events are a replay
        self._early: dict[str, list] = {}  # events of turns whose message is not read yet
        self._fetching: asyncio.Task | None = None
        self._moved: set[int] = set()  # queued inputs whose turn started: they live on under a new id
        self._finishing = 0  # ended turns whose saved message is being read back
        self.last_id = 0  # the newest message id read
        self._view_state = view_state
        self._closed = False
        # The view's paging reads through this feed while it is open (a team's board changes feeds on one view).
        self._paging = [(conversation.older_wanted, lambda: bridge.run(self.load_older())),
                        (conversation.newer_wanted, lambda: bridge.run(self.load_newer())),
                        (conversation.latest_wanted, lambda: bridge.run(self.open_page())),
                        (conversation.start_wanted, lambda: bridge.run(self.open_page(at_top=True)))]
        for signal, slot in self._paging:
            signal.connect(slot)

    async def start(self) -> None:
        anchor, offset, expanded = self._view_state or (None, 0, set())
        if anchor is None:
            await self.open_page()
        else:
            await self._open_around(anchor)
        if self._closed:
            return
        self.conversation.expand_calls(expanded)
        self.conversation.restore_view(anchor, offset)
        self.observer = self.source.observe()
        self.observer.batch.connect(self._on_batch)
        self.loaded.set()

    async def _messages(self, infos: list[MessageInfo]) -> list[Message]:
        """Messages for the view, with their turn rows; a running turn's answer becomes live (its events,
        replayed from the start, fill it)."""
        turn_ids = {m.turn_id for m in infos if m.role == "assistant" and m.turn_id}
        turns = {t["id"]: t for t in await self.source.turns(turn_ids)} if turn_ids else {}
        if self._closed:
            return []
        out = []
        for info in infos:
            live = self.live.get(info.turn_id) if info.role == "assistant" and info.turn_id else None
            if live is not None:
                out.append(live)
                continue
            m = Message.of(info, turns.get(info.turn_id))
            if m.role == "assistant" and m.status == "streaming" and m.turn_id and m.turn_id not in self._final:
                m.live, m.parts = True, []
                self.live[m.turn_id] = m
                for batch in self._early.pop(m.turn_id, []):
                    self._route_known(m, batch)
            elif m.role == "assistant" and m.turn_id:
                self._final.add(m.turn_id)
            out.append(m)
            self.last_id = max(self.last_id, info.id)
        return out

    async def open_page(self, at_top: bool = False) -> None:
        """The newest page (or the first one): what opening a task shows, at once."""
        if at_top:
            infos = await self.source.messages(after=0, limit=PAGE + 1)
            more, infos = len(infos) > PAGE, infos[:PAGE]
        else:
            infos = await self.source.messages(limit=PAGE + 1)
            more, infos = len(infos) > PAGE, infos[-PAGE:]
        info = await self.source.info()
        messages = await self._messages(infos)
        if self._closed:
            return
        if at_top:
            self.conversation.show_page(messages, has_older=False, has_newer=more, at_top=True)
        else:
            self.conversation.show_page(messages, has_older=more, has_newer=False)
        self.panel.apply_info(info)

    async def _open_around(self, anchor: int) -> None:
        """The pages around a message the person was reading when they left the task."""
        before = await self.source.messages(before=anchor + 1, limit=PAGE + 1)
        after = await self.source.messages(after=anchor, limit=PAGE + 1)
        info = await self.source.info()
        older, newer = len(before) > PAGE, len(after) > PAGE
        messages = await self._messages(before[-PAGE:] + after[:PAGE])
        if newer:  # know the newest message (and a turn running there) without showing it yet
            await self._messages(await self.source.messages(limit=1))
        if self._closed:
            return
        self.conversation.show_page(messages, has_older=older, has_newer=newer, at_top=True)
        self.panel.apply_info(info)

    async def load_older(self) -> None:
        first = self.conversation.messages[0].id if self.conversation.messages else None
        try:
            infos = await self.source.messages(before=first, limit=PAGE + 1)
        except Exception:
            self.conversation.page_failed()
            raise
        more, infos = len(infos) > PAGE, infos[-PAGE:]
        messages = await self._messages(infos)
        if not self._closed:
            self.conversation.add_older(messages, more)

    async def load_newer(self) -> None:
        last = self.conversation.messages[-1].id if self.conversation.messages else 0
        infos = await self.source.messages(after=last, limit=PAGE + 1)
        more, infos = len(infos) > PAGE, infos[:PAGE]
        messages = await self._messages(infos)
        if not self._closed:
            self.conversation.add_newer(messages, more)

    async def sync(self) -> None:
        """What changed since the panel last looked: task state and the messages after the newest it knows.
        Cheap at any task length (one page read at most)."""
        # One read at a time: callers that waited for the same read wake together, and each must wait again for
        # the read the first of them starts (two reads after the same last id would both add what they find).
        while self._fetching is not None and not self._fetching.done():
            await asyncio.shield(self._fetching)
        self._fetching = asyncio.ensure_future(self._read_new())
        await asyncio.shield(self._fetching)

    async def _read_new(self) -> None:
        info = await self.source.info()
        infos = await self.source.messages(after=self.last_id)
        messages = [m for m in await self._messages(infos) if m.id not in self._moved]
        if self._closed:
            return
        if messages and not self.conversation.has_newer:
            self.conversation.add_newer(messages, False)
        elif messages:
            self.conversation.note_live_activity()
        self.panel.apply_info(info)

    async def refresh_message(self, message: Message) -> None:
        """Re-read one message (its turn ended, or it left the queue) and show it as saved. A queued input whose
        turn started has moved to the end under a new id (`sync` shows it there): its old place goes."""
        infos = await self.source.messages(after=message.id - 1, limit=1)
        if self._closed:
            return
        if not infos or infos[0].id != message.id:
            self._moved.add(message.id)  # a read that began before it moved must not bring it back
            self.conversation.remove_message(message.id)
            return
        turns = await self.source.turns([infos[0].turn_id]) if infos[0].turn_id else []
        if self._closed:
            return
        fresh = Message.of(infos[0], turns[0] if turns else None)
        if fresh.role == "assistant" and fresh.turn_id:
            self._final.add(fresh.turn_id)
        self.conversation.update_message(fresh)

    # -- live --

    def _on_batch(self, items: list[Batched]) -> None:
        if self._closed:
            return
        by_turn: dict[str, list[Batched]] = {}
        for ev in items:
            by_turn.setdefault(ev.turn_id, []).append(ev)
        for turn_id, events in by_turn.items():
            if turn_id in self._final:
                self._ended_again(turn_id, events)
                continue
            m = self.live.get(turn_id)
            if m is not None:
                self._route_known(m, events)
            else:
                self._early.setdefault(turn_id, []).append(events)
                if any(ev.type == "turn_started" for ev in events):
                    self._turn_started(turn_id)
            self.panel.show_phases(events)

    def _ended_again(self, turn_id: str, events: list[Batched]) -> None:
        """A finished turn whose end is told anew, other than the panel shows it (a wait for the person's answer
        that ended without one: its card now reads stopped): show its message as saved now. A replay of what the
        panel read changes nothing."""
        ended = next((ev for ev in reversed(events) if ev.type == "turn_ended"), None)
        m = next((m for m in self.conversation.messages if m.role == "assistant" and m.turn_id == turn_id), None)
        if ended is None or m is None:
            return
        # Its parts and its turn row are two reads: either may predate the wait's end.
        asking = any(p.get("type") == "tool_call" and p.get("state") == "pending" for p in m.parts)
        if (m.turn or {}).get("reason") != ended.reason or (asking and ended.reason != "waiting"):
            self.bridge.run(self._reread(m))

    async def _reread(self, m: Message) -> None:
        await self.refresh_message(m)
        await self.sync()

    def _turn_started(self, turn_id: str) -> None:
        # Only one turn of a task runs at a time: any other live one has ended (its end may not be replayed).
        for other in [t for t in self.live if t != turn_id]:
            self._finish(self.live[other], other)
        self.panel.turn_started()
        self.bridge.run(self._after_start())

    async def _after_start(self) -> None:
        await self.sync()
        await self._refresh_queued()

    async def _refresh_queued(self) -> None:
        """Queued inputs shown whose turn has started since are shown as sent (or gone from their old place)."""
        for m in list(self.conversation.messages):
            if self._closed:
                return
            if m.role == "user" and m.status == "queued":
                await self.refresh_message(m)

    def _route_known(self, m: Message, events: list[Batched]) -> None:
        """A batch of events of one turn, to its live message `m`."""
        m.apply(events)
        turn_id = events[0].turn_id
        item = self.conversation.live_item(turn_id)
        if item is not None:
            item.apply(events)
        self.conversation.note_live_activity()
        if any(ev.type == "turn_ended" for ev in events):
            self._finish(m, turn_id)

    def _finish(self, m: Message, turn_id: str) -> None:
        self.live.pop(turn_id, None)
        self._final.add(turn_id)
        m.live = False
        self._finishing += 1  # now, not when the task starts: until the saved message is shown, nothing settled
        self.bridge.run(self._finished(m))

    async def _finished(self, m: Message) -> None:
        try:  # settled only once all of it is shown: the saved message, and queued inputs that ran meanwhile
            await self.refresh_message(m)
            await self.sync()
            await self.source.wait_idle()  # the composer leaves "running" once the turn is cleaned up
            if not self._closed:
                await self.sync()
                await self._refresh_queued()  # a queued turn that ran meanwhile may not have been seen starting
        finally:
            self._finishing -= 1


    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        for signal, slot in self._paging:
            signal.disconnect(slot)
        self._paging.clear()
        if self.observer is not None:
            self.observer.close()
            self.observer.deleteLater()
            self.observer = None


class TurnDetails:
    """An answer's Details (its turn's model steps, and the helpers a task's turn ran), for the task and chat
    panels and a team's board: mixed in before QWidget. It owns `feed` (None while a board shows no assignment)
    and `conversation`."""

    feed: ConversationFeed | None
    conversation: ConversationView
    details_dialog: DetailsDialog | None = None

    def show_details(self, turn_id: str) -> None:
        feed = self.feed
        if feed is None:
            return

        async def go() -> None:
            details = await feed.source.turn_details(turn_id)
            if not feed.closed:
                self.details_dialog = DetailsDialog(details, self.conversation)
                self.details_dialog.show()

        feed.bridge.run(go())


class FeedPanel(TurnDetails):
    """What a panel with a composer over a feed answers alike (task and chat panels): mixed in before QWidget.
    It owns `feed`, `conversation` and `composer`."""

    feed: ConversationFeed
    composer: Composer
    waiting: WaitingBox | None
    _closed: bool

    @property
    def loaded(self) -> asyncio.Event:
        return self.feed.loaded

    @property
    def live(self) -> dict[str, Message]:
        return self.feed.live

    @property
    def live_turn(self) -> str | None:
        return next(iter(self.feed.live), None)

    @property
    def settled(self) -> bool:
        """No turn runs and every ended turn is shown as it was saved."""
        return not self.feed.live and not self.feed._finishing and not self.composer.running

    async def sync(self) -> None:
        await self.feed.sync()

    def _act(self, action: Callable[[], Awaitable[object]], on_error: Callable[[], None] | None = None) -> None:
        """Run an action on the conversation (send, answer, retry…), then read what it changed; if it fails,
        `on_error` gives the person back what they did, while the panel is open."""
        async def go() -> None:
            try:
                await action()
            except Exception:
                if on_error is not None and not self._closed:
                    on_error()
                raise
            await self.sync()

        self.feed.bridge.run(go())

    def send_or_queue(self, send: Callable[[bool], Awaitable[object]], running: bool, text: str,
                      files: list[str]) -> None:
        """Send what the composer submitted: `send(queue)`, queued behind the running turn if one runs (or started
        meanwhile); if it fails, the text goes back into the composer."""
        async def send_or_queue() -> None:
            try:
                await send(running)
            except self.feed.bridge.api.TaskBusy:  # it started running meanwhile: queue instead
                await send(True)

        self._act(send_or_queue, on_error=lambda: self.composer.restore(text, files))

    def _reenable_waiting(self) -> None:
        """An answer that failed: the waiting box takes another."""
        if self.waiting is not None:
            self.waiting.reenable()

    def focus_composer(self) -> None:
        self.composer.edit.setFocus(Qt.FocusReason.OtherFocusReason)

    def turn_text(self, turn_id: str) -> str:
        return self.conversation.turn_text(turn_id)


    def view_state(self) -> tuple:
        anchor, offset = self.conversation.view_state()
        return anchor, offset, self.conversation.expanded_calls()

