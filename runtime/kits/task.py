"""AgentKit: the desktop implementation of the turn's agent port (ports.AgentPort).

It builds what a turn's setup needs from the data folder's settings: the task's provider (built once and
kept), its tools, this turn's MCP sessions, the context budget, and the background jobs finalize enqueues.
A task's `run_shell` runs in the sandbox (tools/shell/sandbox.py) when one can start: its workspace writable, the data
folder and the home's secret folders hidden, the network as the task allows.

Memory and knowledge come in here: a task with memory on (and memory on in settings) gets the `memory` tool and,
in every step's notes, the person's saved memories relevant to the input; after a completed turn in which the
person said something about themselves, the `memory.extraction` job. A task bound to documents gets
`search_knowledge`, scoped to them, and a note telling the model to cite what it uses.

A model that cannot call tools reliably (`talk_only`: the catalog says so, the bundled 135M one) gets no tools,
no MCP servers and a system prompt without them; its memories' note still comes, but no memory extraction (it
cannot answer in the JSON asked for). A request that seems to need files or commands gets a notice
(engine/agent/talk_only.py), which the turn says once per task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Settings, split_model_ref
from ..engine.agent.prompt import PLANNING, SYSTEM_PROMPT, TALK_ONLY
from ..engine.agent.subagents import Delegate, load_definitions
from ..engine.agent.talk_only import needs_files_or_commands, notice
from ..errors import ConfigError
from ..keys import SecretStore
from ..knowledge.library import Knowledge
from ..knowledge.search import KNOWLEDGE_NOTE, LIBRARY_NOTE, answer_text, search
from ..local_models.library import ModelLibrary
from ..memory.extraction import eligible, extract
from ..memory.folder import Memory
from ..parts import text_of
from ..providers import build_provider
from ..providers.base import Provider
from ..tools.base import Effect, Tool, tool_spec
from ..tools.builtin import builtin_tools
from ..tools.deliver import Deliver
from ..tools.interactive import interactive_tools
from ..tools.knowledge_tool import SearchKnowledge
from ..tools.mcp.consent import MCPConsents
from ..tools.mcp.util import of_server
from ..tools.memory_tool import MemoryTool
from ..tools.planning import SubmitPlan
from ..tools.shell.background import BackgroundCommands
from ..tools.shell.sandbox import Sandbox, SandboxStatus, detect, hidden_paths
from ..tools.skills import SkillTool, activated, instructions, load_skills, skills_note
from ..tools.team_lead import PlanAssignments
from ..tools.waiting import BackgroundCommand, Wait, WakeSetter

if TYPE_CHECKING:
    from ..engine.ports import ChangeRecorder
    from ..tools.mcp.sessions import MCPTurnSessions

log = logging.getLogger(__name__)

UNKNOWN_CONTEXT_TOKENS = 8192  # assumed for a model whose window nobody states: small enough for most servers


def _skills_and_helpers(home: Path) -> tuple[list, list]:
    return load_skills(home), load_definitions(home)


async def _search(knowledge: Knowledge, bound: list[str], query: str, limit: int) -> str:
    hits, notes = await search(knowledge, bound, query, limit)
    return answer_text(query, hits, notes)


def planning(task: dict[str, Any]) -> bool:
    return bool(task.get("planning")) and task.get("plan_status") != "approved"


@dataclass
class Prepared:
    tools: dict[str, Tool]
    notes: list[str] = field(default_factory=list)
    system: str = SYSTEM_PROMPT
    notice: str | None = None  # for a model that can only talk: the input asks for what it cannot do
    changes: ChangeRecorder | None = None  # a task's turn's workspace changes


class AgentKit:
    def __init__(self, home: Path, settings: Callable[[], Settings], keys: SecretStore,
                 providers: dict[str, Provider], tools: list[Tool], consents: MCPConsents,
                 library: ModelLibrary | None = None, *, memory: Memory | None = None,
                 knowledge: Knowledge | None = None, told: Callable[[str], Awaitable[None]] | None = None,
                 deliver: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
                 background: BackgroundCommands | None = None, wakes: Callable[[], WakeSetter] | None = None):
        self.home = home
        self._deliver = deliver  # records a delivery (store/deliveries.py); None: no `deliver` tool
        self.background = background  # the tasks' background commands (a task's run_shell may start one)
        self._wakes = wakes  # the wake-ups service, built after the kit: `wait` keeps the task's wake-up there
        self.memory = memory
        self.knowledge = knowledge
        # task id (None: first_prompt's) -> what the person said in the running turn (for extraction)
        self._said: dict[str | None, str] = {}
        self._settings = settings
        self._keys = keys
        self.providers = providers
        self._extra_tools = tools
        self._consents = consents
        self._told = told  # keeps in settings that a provider's person was told about its assumed window
        self._defaulted: set[str] = set()  # providers told in this process (also when keeping it failed)
        self._library = library  # installed local models, served by a llama_cpp provider without model_path
        # A task turn's change recorder (rt.changes.recorder), set once that service is built.
        self.record_changes: Callable[[dict[str, Any]], ChangeRecorder] | None = None

    @property
    def max_steps(self) -> int:
        return self._settings().max_steps

    def provider(self, provider_id: str) -> Provider:
        provider = self.providers.get(provider_id)
        if provider is None:
            cfg = self._settings().provider(provider_id)
            provider = self.providers[provider_id] = build_provider(cfg, self._keys, self._library)
        return provider

    async def sandbox(self) -> tuple[SandboxStatus, Sandbox | None]:
        """Whether commands can run sandboxed (detected once per sandbox program; see tools/shell/sandbox.py)."""
        settings = self._settings()
        return await detect(settings.sandbox_bwrap, settings.sandbox_max_processes)

    async def prepare(self, task: dict[str, Any], input_parts: list[dict], *, background: bool = True) -> Prepared:
        """This turn's tools and the notes its every step is given: planning mode (while a task created with
        planning on has no approved plan, only the tools that change nothing, plus submit_plan), the skills
        the model may load, a skill the input activates with /name. The shell runs sandboxed when it can.
        A task's (`background`; a team member's is not one) shell may start background commands, which
        `background_command` checks on and `wait` waits for."""
        if self.talk_only(task):
            said = text_of(input_parts)
            return await self._talk_only(task, input_parts, notice() if needs_files_or_commands(said) else None)
        hidden = self._settings().secret_env_names()  # read per turn: a settings change applies to the next
        # The skills and the helpers' definitions (files, read in one worker thread) and the memories (files and
        # the database) are read side by side, then put in their fixed order.
        (status, sandbox), (skills, definitions), (memory_tool, memory_note) = await asyncio.gather(
            self.sandbox(), asyncio.to_thread(_skills_and_helpers, self.home), self._memory(task, input_parts))
        shell = {"sandbox": sandbox, "hidden": hidden_paths(self.home), "network": bool(task.get("network")),
                 "unsandboxed_reason": status.reason or ""}
        commands = self.background if background else None
        tools = [*builtin_tools(hidden_env=hidden, background=commands, **shell), *interactive_tools(),
                 *self._extra_tools]
        notes: list[str | None] = []
        if skills:
            tools.append(SkillTool(skills))
            notes.append(skills_note(skills))
            chosen = activated(skills, text_of(input_parts))
            if chosen is not None:
                notes.append(instructions(chosen))
        tools.append(Delegate(definitions))
        if self._deliver is not None:
            tools.append(Deliver(self.home, self._deliver))
        if memory_tool is not None:
            tools.append(memory_tool)
            notes.append(memory_note)
        bound = list(task.get("knowledge") or ())
        knowledge = self.knowledge
        if bound and knowledge is not None:
            tools.append(SearchKnowledge(lambda query, limit: _search(knowledge, bound, query, limit)))
            notes.append(KNOWLEDGE_NOTE)
        if planning(task):
            tools = [t for t in tools if t.effect == Effect.read_only] + [SubmitPlan()]
            notes.insert(0, PLANNING)
        elif commands is not None and self._wakes is not None:
            tools += [BackgroundCommand(commands), Wait(self._wakes(), commands)]
        record = self.record_changes if task.get("workspace") else None  # first_prompt's stand-in task has none
        changes = record(task) if record is not None else None
        return Prepared({t.name: t for t in tools}, [n for n in notes if n], changes=changes)

    async def _talk_only(self, owner: dict[str, Any], input_parts: list[dict], told: str | None) -> Prepared:
        """A model that can only talk: no tools, a prompt without them, the memories' note when memory is on.
        A planning turn is the exception: its one tool is submit_plan, which the loop then asks for by name at
        once, so "Plan first" brings back a plan to approve on this model too."""
        _, memory_note = await self._memory(owner, input_parts)  # the note only: it cannot call the memory tool
        notes = [memory_note] if memory_note else []
        if planning(owner):
            return Prepared({SubmitPlan.name: SubmitPlan()}, [PLANNING, *notes], TALK_ONLY)
        return Prepared({}, notes, TALK_ONLY, told)

    def talk_only(self, owner: dict[str, Any]) -> bool:
        """The task's (or chat's) model cannot call tools reliably: its provider says so (`calls_tools`)."""
        provider_id, model = split_model_ref(owner.get("model") or self._settings().default_model)
        try:
            calls_tools = getattr(self.provider(provider_id), "calls_tools", None)
        except ConfigError:  # the turn reports an unknown provider in its own words
            return False
        return calls_tools is not None and not calls_tools(model)

    async def prepare_chat(self, chat: dict[str, Any], input_parts: list[dict]) -> Prepared:
        """A chat's tools: no files, shell or MCP; memory when on, and search over the whole knowledge library
        (it only reads) when the library holds documents. None on a model that can only talk."""
        if self.talk_only(chat):
            return await self._talk_only(chat, input_parts, None)  # a chat never offers files or commands
        tools: list[Tool] = []
        notes: list[str | None] = []
        knowledge = self.knowledge
        documents = knowledge.documents() if knowledge is not None else asyncio.sleep(0, [])
        (memory_tool, memory_note), documents = await asyncio.gather(self._memory(chat, input_parts), documents)
        if memory_tool is not None:
            tools.append(memory_tool)
            notes.append(memory_note)
        if knowledge is not None:
            library = [d["path"] for d in documents]
            if library:
                tools.append(SearchKnowledge(lambda query, limit: _search(knowledge, library, query, limit)))
                notes.append(LIBRARY_NOTE)
        return Prepared({t.name: t for t in tools}, [n for n in notes if n])

    async def _memory(self, owner: dict[str, Any], input_parts: list[dict]) -> tuple[Tool | None, str | None]:
        """The memory tool and the note of the memories relevant to this input (None when there are none), when
        memory is on for this task or chat; (None, None) when it is off."""
        if self.memory is None or not self.memory_on(owner):
            return None, None
        said = text_of(input_parts)
        self._said[owner["id"]] = said
        try:
            return MemoryTool(self.memory), await self.memory.note(f"{owner.get('title') or ''}\n{said}")
        except Exception:  # a broken memory folder costs this turn its memories, never the turn
            log.exception("could not load the memories for %s", owner["id"])
            return MemoryTool(self.memory), None

    def tool_names(self) -> list[str]:
        """Every name a turn's tools can have, MCP servers' aside, whether or not this task has them (skills,
        memory, documents, planning, a team's lead): what a permission rule may name."""
        always = [*builtin_tools(), *interactive_tools(), *self._extra_tools, SubmitPlan()]
        sometimes = [SkillTool.name, Delegate.name, Deliver.name, MemoryTool.name, SearchKnowledge.name,
                     PlanAssignments.name, BackgroundCommand.name, Wait.name]
        return sorted({t.name for t in always} | set(sometimes))

    async def first_prompt(self, model: str | None = None) -> tuple[list[dict], list[dict]]:
        """The system message and tools a new task's first step starts with, on `model` (default: the default
        model): the static prefix a local model's prompt cache is warmed with (models_api, cli/preload.py). Memory is
        as a new task has it (on when settings say so: its tool, and the index once there are memories), or the
        first send's prefix would differ and be evaluated again; an input that matches memories gets them in its
        note, and a prefix of its own. A model that can only talk gets no tools (nothing to warm)."""
        prepared = await self.prepare({"id": None, "memory": True, "model": model}, [])
        self._said.pop(None, None)  # no turn runs: nothing said to extract memories from
        system = {"role": "system", "content": "\n\n".join([prepared.system, *prepared.notes])}
        return [system], [tool_spec(t) for t in prepared.tools.values()]

    def mcp_sessions(self, task: dict[str, Any], cwd: Path, *,
                     for_tools: list[str] | None = None) -> MCPTurnSessions | None:
        """This turn's MCP sessions, or None when no server is configured or the task is planning (an MCP
        tool's effect is the server's to say, so a turn that must change nothing starts none). `for_tools`: only
        the servers that some of these tool names belong to (a team member's list)."""
        settings = self._settings()
        servers = {} if planning(task) else settings.mcp_servers
        if servers and self.talk_only(task):  # its tools would never be offered
            servers = {}
        if for_tools is not None:
            servers = {s: cfg for s, cfg in servers.items() if any(of_server(name, s) for name in for_tools)}
        if not servers:
            return None
        from ..tools.mcp.sessions import MCPTurnSessions

        return MCPTurnSessions(
            servers, approved=self._consents.is_approved,
            connect_timeout=settings.mcp_connect_timeout, cwd=cwd, hidden_env=settings.secret_env_names(),
            check_tools=self._consents.check_tools, pending_review=self._consents.pending_change,
        )

    async def context_window(self, provider: Provider, model: str) -> tuple[int, str | None]:
        """(tokens, a one-time note) for the model's context window: the provider's own figure (a local model's
        n_ctx, settings.json, what the server says), else a conservative default, with a sentence the first
        time one of the provider's models has to make do with it. Once per provider, ever: settings.json keeps
        that it was said (`context_window_told`), so neither the next answer nor the next start says it again."""
        tokens = await self.window_tokens(provider, model)
        if tokens:
            return tokens, None
        if provider.id in self._defaulted or provider.id in self._settings().context_window_told:
            return UNKNOWN_CONTEXT_TOKENS, None
        self._defaulted.add(provider.id)
        if self._told is not None:
            try:
                await self._told(provider.id)
            except Exception:  # a full disk costs the note's memory, never the turn
                log.exception("could not keep that the context window note for %s was given", provider.id)
        return UNKNOWN_CONTEXT_TOKENS, (
            f"The server of {provider.id} does not say how long a context {model} takes, so Hearth assumes "
            f"{UNKNOWN_CONTEXT_TOKENS:,} tokens for its models. If they can take more, set the context window in "
            f"Settings ▸ Models ▸ {provider.id}.")

    async def window_tokens(self, provider: Provider, model: str) -> int | None:
        """The model's context window as its provider knows it (a local model's n_ctx, settings.json, what the
        server says); None when nobody says."""
        ask = getattr(provider, "context_window", None)
        found = await ask(model) if ask is not None else None
        if found is not None:
            return int(found[0])
        sized = getattr(provider, "context_tokens_for", None)  # a local provider serving several models
        tokens = sized(model) if sized is not None else getattr(provider, "context_tokens", None)
        return int(tokens) if tokens else None

    def memory_on(self, task: dict[str, Any]) -> bool:
        """Memory is used and saved: on in settings, and the task was not created with it off."""
        return self._settings().memory and task.get("memory", True) is not False

    def background_jobs(self, task: dict[str, Any], reason: str) -> list[tuple[str, dict[str, Any]]]:
        """After a completed turn in which the person said something about themselves: `memory.extraction`."""
        said = self._said.pop(task["id"], None)
        if reason != "completed" or not said or self.memory is None or not self.memory_on(task) or not eligible(said):
            return []
        if self.talk_only(task):  # it cannot answer in the JSON extraction asks for: it would fail every time
            return []
        return [("memory.extraction", {"owner_id": task["id"], "model": task["model"], "said": said})]

    async def run_job(self, kind: str, payload: dict[str, Any]) -> Any:
        """The kit's post-turn jobs (`background_jobs`), wherever they run: `memory.extraction`."""
        if kind != "memory.extraction" or self.memory is None:
            raise ConfigError(f"There is no background job {kind!r} here.")
        provider_id, model = split_model_ref(payload["model"])
        return await extract(self.memory, self.provider(provider_id), model, payload["owner_id"], payload["said"])
