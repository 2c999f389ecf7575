"""Export a task as Markdown (for reading) or JSON (everything the facade returns, for tools). Keys are never
part of messages, so nothing secret can end up in an export. What the task delivered is written beside the export
(`rt.deliveries.export`, into a folder of its own); both formats list each delivery with the file it became there."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from runtime.api import DeliveryInfo, MessageInfo, TaskInfo

    Delivered = Sequence[tuple[DeliveryInfo, str]]  # each delivery and its file's name in the export's folder


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else ""


def to_markdown(info: TaskInfo, messages: list[MessageInfo], turns: list[dict], delivered: Delivered = (),
                folder: str = "") -> str:
    by_turn = {t["id"]: t for t in turns}
    out = [f"# {info.title or 'Untitled task'}", "",
           f"Model `{info.model}` · approvals `{info.approval}` · created {_when(info.created_at)}", ""]
    for m in messages:
        if m.role == "user":
            out.append(f"## You · {_when(m.created_at)}")
            for p in m.parts:
                if p.get("type") == "text":
                    out.append(p.get("text", ""))
                elif p.get("type") == "attachment":
                    out.append(f"📎 {p.get('name', '')}")
                elif p.get("type") == "answer":
                    req = p.get("request") or {}
                    out.append(f"*Answer to {req.get('tool_name') or 'a question'}:* {p.get('answer', '')}")
            out.append("")
        elif m.role == "assistant":
            turn = by_turn.get(m.turn_id) or {}
            out.append(f"## Hearth · {turn.get('reason') or m.status}")
            for p in m.parts:
                kind = p.get("type")
                if kind == "text":
                    out.append(p.get("text", ""))
                elif kind == "reasoning":
                    out.append("<details><summary>Thinking</summary>\n\n" + p.get("text", "") + "\n\n</details>")
                elif kind == "tool_call":
                    args = json.dumps(p.get("args") or {}, ensure_ascii=False)
                    out.append(f"**Tool `{p.get('name')}`** ({p.get('state')}) `{args}`")
                    if p.get("result"):
                        out.append("```\n" + str(p["result"]).replace("```", "ʼʼʼ") + "\n```")
                out.append("")
            if turn.get("error"):
                out.append(f"> Error: {turn['error']}")
            out.append("")
    if delivered:
        out += ["## Deliverables", ""]
        for d, name in delivered:
            out.append(f"- `{d.path}` version {d.version} · {d.size:,} bytes · {_when(d.created_at)} — {d.note} "
                       f"→ [{name}](<{folder}/{name}>)")
    return "\n".join(out).rstrip() + "\n"


def to_json(info: TaskInfo, messages: list[MessageInfo], turns: list[dict], delivered: Delivered = (),
            folder: str = "") -> str:
    data = {
        "task": info.model_dump(mode="json"),
        "turns": turns,
        "messages": [m.model_dump(mode="json") for m in messages],
        # Where each copy is in the export, not where the data folder keeps it.
        "deliveries": [dict(d.model_dump(mode="json", exclude={"file"}), exported=f"{folder}/{name}")
                       for d, name in delivered],
    }
    return json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
