"""The one finalize path (DESIGN §5). Runs exactly once per turn, in this order:

1. verdict: abort/shutdown reason first (so an error a Stop provoked stays `aborted`), then error,
   then `waiting` when a question or approval is pending, else `completed`;
2. settle: unfinished tool parts become `interrupted` (side-effecting ones "outcome unknown");
3. one transaction: assistant message and parts, turn row, task totals/state, usage anchor, steps;
4. background jobs (title), fire-and-forget;
5. announce `turn_ended`, only after the commit succeeded; if it failed, the turn ends `error` with
   what could be saved and the event says so.
Cleanup (step 6) is in turn.py's `finally`, so it also runs when setup threw.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .errors import HearthError
from .events import Aborted, EndReason, TaskState, TurnEnded
from .parts import settle_parts

if TYPE_CHECKING:
    from .api import Runtime
    from .turn import TurnContext

log = logging.getLogger(__name__)


def verdict(ctx: TurnContext) -> EndReason:
    if ctx.controller.reason is not None:
        return ctx.controller.reason
    if ctx.error is not None:
        return EndReason.error
    if ctx.pending_request is not None:
        return EndReason.waiting
    return EndReason.completed


def error_text(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    if isinstance(exc, HearthError):
        return str(exc)
    return f"Internal error: {type(exc).__name__}: {exc}"


async def finalize(rt: Runtime, ctx: TurnContext) -> None:
    reason = verdict(ctx)
    if reason == EndReason.error and not isinstance(ctx.error, HearthError):
        log.error("turn %s failed", ctx.turn_id, exc_info=ctx.error)
    parts = ctx.snapshot()
    settle_parts([p for p in parts if not (reason == EndReason.waiting and p.get("awaiting"))])
    error = error_text(ctx.error) if reason == EndReason.error else None
    state = TaskState.waiting if reason == EndReason.waiting else TaskState.idle
    record = {
        "task_id": ctx.task_id, "turn_id": ctx.turn_id, "output_message_id": ctx.output_message_id,
        "parts": parts, "reason": reason.value, "error": error, "usage": ctx.usage, "state": state.value,
        "pending_request": ctx.pending_request if reason == EndReason.waiting else None,
        "task_values": {"tool_rules": ctx.tool_rules},
        "anchor_tokens": ctx.step_tokens[-1] if ctx.step_tokens else 0,
        "anchor_chars": ctx.chat_chars,
        "steps": ctx.steps,
    }
    try:
        await rt.store.finalize_turn(record)
    except Exception as exc:
        log.exception("finalize commit of turn %s failed", ctx.turn_id)
        reason = EndReason.error
        error = f"The turn could not be saved completely ({type(exc).__name__}: {exc})."
        try:
            await rt.store.fail_turn(record | {"error": error})
        except Exception:
            log.exception("could not mark turn %s as failed", ctx.turn_id)
    if reason == EndReason.completed and not ctx.task.get("title"):
        rt.jobs.submit("title", ctx.task_id, rt.make_title(ctx.task_id))
    if reason == EndReason.aborted and not ctx.slot.aborted_published:
        ctx.slot.aborted_published = True
        ctx.publish(Aborted(task_id=ctx.task_id, turn_id=ctx.turn_id))
    ctx.publish(TurnEnded(task_id=ctx.task_id, turn_id=ctx.turn_id, reason=reason, usage=ctx.usage, error=error))
