"""The one finalize path (runtime/ARCHITECTURE.md, "Finalize"). Runs exactly once per turn, in this order:

1. verdict: `slot.settle()` — a recorded abort/shutdown reason wins (an error a Stop provoked stays
   `aborted`), else error, else `waiting` when a question or approval is pending, else `completed`; from here
   on the reason is fixed, so a Stop landing during the commit changes nothing and publishes nothing;
2. settle: unfinished tool parts become `interrupted` (side-effecting ones "outcome unknown");
3. one transaction: assistant message and parts, turn row, task totals and state. If it fails, the fallback
   still writes the settled parts and ends the turn `error`; if that fails too, the next open recovers the
   turn as `interrupted`;
4. auxiliary records (usage anchor, steps, subagents) after the message commit; their failure is logged;
5. post-turn jobs (the agent's: memory extraction; the model's title while the title is provisional; a server
   user's token usage), enqueued as a kind and a payload, fire-and-forget, only after a successful commit;
6. announce `turn_ended`, only after the commit; when it failed, the event says so. From that moment the owner
   takes its next input (`announce_end`): an observer that saw `turn_ended` may send at once.
Cleanup is in engine/turn.py's `finally`, so it also runs when setup threw; it holds the owner's lock until it is done,
so the next turn's run (which takes the lock first) never overlaps it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import HearthError
from ..events import EndReason, TaskState, TurnEnded
from ..parts import FinalRecord, settle_parts
from ..redact import redact
from .titles import title_payload, wants_title

if TYPE_CHECKING:
    from .agent.state import TurnContext
    from .ports import TurnServices

log = logging.getLogger(__name__)


def _verdict(ctx: TurnContext) -> EndReason:
    if ctx.error is not None:
        return EndReason.error
    if ctx.pending_request is not None:
        return EndReason.waiting
    return EndReason.completed


def error_text(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    if isinstance(exc, HearthError):
        return redact(str(exc))
    return redact(f"Internal error: {type(exc).__name__}: {exc}")


async def finalize(services: TurnServices, ctx: TurnContext) -> None:
    reason = ctx.slot.settle(_verdict(ctx))
    if reason == EndReason.error and not isinstance(ctx.error, HearthError):
        log.error("turn %s failed", ctx.turn_id, exc_info=ctx.error)
    parts = ctx.snapshot()
    settle_parts([p for p in parts if not (reason == EndReason.waiting and p.get("awaiting"))])
    error = error_text(ctx.error) if reason == EndReason.error else None
    state = TaskState.waiting if reason == EndReason.waiting else TaskState.idle
    record = FinalRecord(
        task_id=ctx.task_id, turn_id=ctx.turn_id, output_message_id=ctx.output_message_id, parts=parts,
        reason=reason.value, error=error, usage=ctx.usage, state=state.value,
        pending_request=ctx.pending_request if reason == EndReason.waiting else None,
        anchor_tokens=ctx.anchor_tokens, anchor_chars=ctx.anchor_chars, steps=ctx.steps, subagents=ctx.subagents,
    )
    storage = services.storage
    try:
        await storage.finalize_turn(record)
    except Exception as exc:
        log.exception("finalize commit of turn %s failed", ctx.turn_id)
        reason = EndReason.error
        error = "The turn could not be saved completely" + (f": {redact(str(exc))}" if isinstance(exc, HearthError)
                                                           else ".")
        record["reason"], record["error"] = reason.value, error
        record["state"], record["pending_request"] = TaskState.idle.value, None
        try:
            await storage.fail_turn(record)
        except Exception:
            log.exception("could not save turn %s as failed; the next start recovers it", ctx.turn_id)
    else:
        try:
            await storage.write_turn_records(record)
        except Exception:
            log.exception("could not write the step records of turn %s", ctx.turn_id)
        _enqueue_jobs(services, ctx, reason)
    announce_end(services, ctx, TurnEnded(task_id=ctx.task_id, turn_id=ctx.turn_id, reason=reason, usage=ctx.usage,
                                          error=error))


def _enqueue_jobs(services: TurnServices, ctx: TurnContext, reason: EndReason) -> None:
    jobs = services.jobs
    for kind, payload in services.agent.background_jobs(ctx.task, reason.value):
        jobs.enqueue(kind, ctx.task_id, payload)
    if reason == EndReason.completed and wants_title(ctx.task) and ctx.provider is not None:
        jobs.enqueue("title", ctx.task_id, title_payload(ctx.task_id, ctx.turn_id, ctx.task["model"]),
                     disposable=True)
    user_id = ctx.task.get("owner_id")  # a server user's task: their quota counts the turn's tokens, once
    if user_id and (tokens := ctx.usage.input_tokens + ctx.usage.output_tokens):
        jobs.enqueue("quota", ctx.task_id, {"user_id": user_id, "tokens": tokens}, key=f"quota:{ctx.turn_id}")


def announce_end(services: TurnServices, ctx: TurnContext, event: TurnEnded) -> None:
    """Publish the turn's terminal event, the owner no longer busy first (no await in between, so no observer
    can see the event and still find the owner busy); `wait_idle` goes on waiting for the cleanup."""
    services.aborts.free(ctx.slot)
    ctx.publish(event)
