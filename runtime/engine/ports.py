"""The host ports a turn runs on (runtime/ARCHITECTURE.md, "Ports").

`run_turn` and `finalize` never see the `Runtime`: they get a `TurnServices` whose parts are these
Protocols. The desktop implementations are `store.repo.Store`, `locks.TaskLocks`, `abort.AbortRegistry`,
`stream_buffer.BufferRegistry`, `jobs.LocalJobs` and `kits.task.AgentKit`; a Chat or Team surface, or a test, can
bring its own. The server host (runtime/server/) implements the same Protocols on Redis and PostgreSQL: a lease
that fails fast instead of a waiting lock, a Redis stream any API instance reads, an abort bus.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..events import Event
from ..parts import FinalRecord
from ..providers.base import Provider
from ..tools.base import Tool
from .abort import TurnSlot

if TYPE_CHECKING:
    from ..store.conversations import ContextInputs, EndedWait, Started


class TurnStorage(Protocol):
    async def context_inputs(self, task_id: str) -> ContextInputs:
        """The latest checkpoint, the messages after it and the usage anchor."""

    async def set_todos(self, task_id: str, todos: list[dict[str, Any]]) -> None: ...

    async def add_checkpoint(self, task_id: str, turn_id: str | None, upto_message_id: int, summary: str) -> None:
        """Persist a summary that replaces the task's messages with id <= `upto_message_id` in model inputs."""

    async def checkpoint(self, message_id: int, parts: list[dict[str, Any]]) -> None: ...

    async def finalize_turn(self, record: FinalRecord) -> None:
        """The message, turn row and task state, in one transaction."""

    async def fail_turn(self, record: FinalRecord) -> None:
        """Fallback when `finalize_turn` failed: settled parts, turn `error`, task idle."""

    async def write_turn_records(self, record: FinalRecord) -> None:
        """Auxiliary records (usage anchor, steps, subagents), after the message commit."""

    async def permission_rules(self, task_id: str) -> list[dict[str, Any]]:
        """The task's and the global permission rules (`tool`, `decision`, `command`)."""

    async def messages(self, task_id: str, *, after: int | None = None, limit: int | None = None
                       ) -> list[dict[str, Any]]: ...

    async def settle_title(self, task_id: str, title: str | None) -> bool:
        """The model's title replaces a provisional one (runtime/engine/titles.py); False when it no longer may."""


class HostStorage(TurnStorage, Protocol):
    """The host-side writes around a turn (engine/host.py): the input made durable before `send` returns, the
    queue, a wait ended by Stop. `store.conversations.Conversations` for tasks, chats and assignments."""

    @property
    def owner_key(self) -> str:
        """The owner's column in its rows: task_id, chat_id or assignment_id."""

    async def find_client_message(self, owner_id: str, client_msg_id: str) -> dict[str, Any] | None: ...

    async def add_input(self, owner_id: str, parts: list[dict], *, client_msg_id: str | None, turn_id: str | None,
                        title: str | None = None) -> tuple[int, Started | None]:
        """The input's message id, and its turn's start unless it was queued (no `turn_id`)."""

    async def start_queued_turn(self, owner_id: str, turn_id: str) -> Started | None: ...

    async def discard_queued(self, owner_id: str, message_id: int) -> bool: ...

    async def has_queued(self, owner_id: str) -> bool: ...

    async def is_waiting(self, owner_id: str) -> bool: ...

    async def end_wait(self, owner_id: str) -> EndedWait | None:
        """End a wait for the person's answer as `aborted`, or None when the owner did not wait."""


class TaskLockPort(Protocol):
    def hold(self, task_id: str) -> AbstractAsyncContextManager[object]:
        """Held by a run for its whole life, cleanup included, so two runs of a task never overlap. The desktop's
        waits for the run before it (whose cleanup may still be going on); the server's lease fails at once with
        `TaskBusy` (another worker runs the task) and is renewed by a heartbeat while held."""


class AbortBus(Protocol):
    """Stop as a request that outlives a process: a flag a run checks when it starts, and a message that reaches
    the process running the turn. The desktop needs none (its Stop is the slot's, in this process); the server's
    is Redis (runtime/server/redis/abort.py)."""

    async def request(self, task_id: str) -> None: ...

    async def clear(self, task_id: str) -> None:
        """A new input: a Stop that came before it is stale."""

    async def requested(self, task_id: str) -> bool: ...


class AbortPort(Protocol):
    def get(self, task_id: str) -> TurnSlot | None: ...

    def register(self, slot: TurnSlot) -> None: ...

    def free(self, slot: TurnSlot) -> None:
        """The turn's end is announced: the task takes its next input while the cleanup goes on."""

    def release(self, slot: TurnSlot) -> None: ...


class TurnStream(Protocol):
    """Where a turn's events go, numbered by `seq`. The producer side never awaits: `append_delta` is the hot path
    (a tuple test and an append per chunk), `publish` numbers a non-delta event; nothing after `turn_ended`."""

    task_id: str
    turn_id: str
    seq: int
    ended: bool

    def append_delta(self, kind: int, part_id: int, text: str) -> None: ...

    def publish(self, event: Event) -> None: ...


class StreamTransport(Protocol):
    """The streams a turn produces into (the host starts each turn's stream: engine/host.py, server/host.py)."""

    def get(self, task_id: str) -> TurnStream | None: ...

    def announce(self, event: Event) -> None:
        """An event that belongs to no turn's stream, to every feed."""


class JobPort(Protocol):
    def enqueue(self, kind: str, owner_id: str | None, payload: dict[str, Any], *, key: str | None = None,
                disposable: bool = False) -> None:
        """Run the post-turn job `kind` on `payload` (JSON-able) in the background, never raising and never
        awaited by the turn: in process (jobs.LocalJobs) or on a server's queue. `key`: at most one job per key
        (a quota counted once); a `disposable` job is cancelled, not waited for, at shutdown."""


class ChangeRecorder(Protocol):
    """What a task's turn changed in its workspace (services/changes.TurnRecorder)."""

    async def watch(self) -> None:
        """Before each call that may change something; the first one looks at the workspace as it is."""

    async def record(self, turn_id: str) -> None:
        """After the turn: what changed since `watch`, written down with what it takes to undo it."""


class TurnSetup(Protocol):
    """What the agent port prepares for a turn (kits.task.Prepared)."""

    @property
    def tools(self) -> Mapping[str, Tool]:
        """This turn's tools by name."""

    @property
    def notes(self) -> list[str]:
        """What each step is given beside the system prompt (planning mode, skills, memories)."""

    @property
    def system(self) -> str: ...

    @property
    def notice(self) -> str | None:
        """A sentence for the person, given once (a model that can only talk, asked for files or commands)."""

    @property
    def changes(self) -> ChangeRecorder | None:
        """Records this turn's workspace changes (a task's turn), or None."""


class TurnMCP(Protocol):
    """A turn's MCP sessions (tools.mcp.sessions.MCPTurnSessions, or a team member's view of them)."""

    @property
    def paused(self) -> Collection[str]:
        """Those of `ready`'s warnings that say a server is paused because its tools changed."""

    def start(self) -> None:
        """Begin connecting, without waiting (the rest of the setup goes on meanwhile)."""

    async def ready(self) -> tuple[list[Tool], list[str]]:
        """The servers' tools, and a warning for each server that is not available."""

    async def aclose(self) -> None: ...


class AgentPort(Protocol):
    """What the turn's setup builds its agent from: model, tools, MCP, budget, background jobs."""

    @property
    def max_steps(self) -> int: ...

    def provider(self, provider_id: str) -> Provider: ...

    async def prepare(self, task: dict[str, Any], input_parts: list[dict[str, Any]]) -> TurnSetup: ...

    def mcp_sessions(self, owner: dict[str, Any], cwd: Path) -> TurnMCP | None:
        """This turn's MCP sessions for the task, chat or assignment, or None."""

    async def context_window(self, provider: Provider, model: str) -> tuple[int, str | None]:
        """The model's context window in tokens, and a note for the person when it had to be assumed."""

    def background_jobs(self, task: dict[str, Any], reason: str) -> list[tuple[str, dict[str, Any]]]:
        """The agent's own post-turn jobs after this ending, as (kind, JSON-able payload)."""

    def run_job(self, kind: str, payload: dict[str, Any]) -> Awaitable[Any]:
        """Run one of the agent's post-turn jobs (what `background_jobs` gave), in any process."""


@dataclass(slots=True)
class TurnServices:
    storage: TurnStorage
    locks: TaskLockPort
    aborts: AbortPort
    streams: StreamTransport
    jobs: JobPort
    agent: AgentPort
    on_turn_done: Callable[[str], None]  # the host starts the next queued input
