"""`hearth models [list] | pull REF | rm NAME` (runtime/cli/main.py): installed local models, the catalog with what
will not fit in this computer's memory, and the model servers; downloads with one progress line (rewritten in
place in a terminal, one line per 10 % otherwise; Ctrl-C pauses, the same command resumes); removal."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from ..config import split_model_ref
from ..local_models.machine import human_bytes
from .exits import EXIT_OK, EXIT_STOPPED

if TYPE_CHECKING:
    from ..api import Runtime
    from ..local_models.progress import DownloadProgress



def add_models_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = sub.add_parser("models", help="local models, downloads, and model servers")
    models_sub = models.add_subparsers(dest="models_command")
    models_sub.add_parser("list", help="installed models, the catalog, and model servers (the default)")
    pull = models_sub.add_parser("pull", help="download a catalog model or a Hugging Face .gguf file")
    pull.add_argument("ref", help="a catalog id, OWNER/REPO/FILE.gguf, or the file's huggingface.co URL")
    rm = models_sub.add_parser("rm", help="remove an installed model (deletes a downloaded file), or delete what "
                                          "a paused download had")
    rm.add_argument("name", help="an installed model's name, or a paused download's REF (as models list shows it)")


async def models_command(rt: Runtime, args: argparse.Namespace) -> int:
    """`hearth models [list] | pull REF | rm NAME`."""
    if args.models_command == "pull":
        return await _pull(rt, args.ref)
    if args.models_command == "rm":
        partial = next((p for p in rt.models.paused() if p.ref == args.name), None)
        if partial is not None and await rt.models.cancel(partial.ref):
            print(f"Deleted the partial download of {partial.label}.")
            return EXIT_OK
        await rt.models.remove(args.name)
        print(f"Removed {args.name}.")
        return EXIT_OK
    default = rt.settings.default_model

    def default_mark(ref: str) -> str:
        return "  (default)" if ref == default else ""

    print("Installed (use with --model):")
    for m in rt.models.installed():
        where = m.repo or ("bundled with Hearth" if m.source == "bundled" else m.path)
        missing = "" if m.present else "  (file missing)"
        print(f"  {m.ref:<40} {human_bytes(m.size):>9}  {where}{missing}{default_mark(m.ref)}")
    paused = rt.models.paused()
    if paused:
        print("\nPaused downloads (hearth models pull REF resumes one, hearth models rm REF deletes it):")
    for p in paused:
        total = human_bytes(p.total) if p.total else "an unknown size"
        print(f"  {p.ref:<40} {human_bytes(p.downloaded)} of {total}")
    print("\nCatalog (hearth models pull ID):")
    for c in rt.models.catalog():
        mark = "installed" if c.installed else "won't fit in this computer's memory" if c.fits is False else ""
        size = f"~{human_bytes(c.size)}" if c.size else "size unknown"
        print(f"  {c.id:<26} {c.label:<26} {size:>9}  needs {human_bytes(c.ram_needed)} RAM  {mark}".rstrip())
    configured, detected = await asyncio.gather(rt.providers.all_models(), rt.providers.detect_local_servers())
    # The local provider's models are the installed ones above: listed again here they read as a stray line.
    servers = {pid: models for pid, models in configured.items() if pid != rt.models.local_provider_id()}
    if servers:
        print("\nModel servers (Settings ▸ Models):")
    for provider_id, models in servers.items():
        if isinstance(models, str):
            print(f"  {provider_id}: unavailable: {models}")
            if split_model_ref(default)[0] == provider_id:  # the default cannot be listed: say which it is
                print(f"  {default}  (default)")
        else:
            print("\n".join(f"  {m}{default_mark(m)}" for m in models) if models else f"  {provider_id}: no models")
    known = {p.base_url for p in rt.settings.providers}
    for preset in rt.providers.presets():
        if preset.id in detected and preset.base_url not in known:
            models = ", ".join(detected[preset.id])
            print(f"\nDetected {preset.label} at {preset.base_url} (not configured yet): {models}")
    return EXIT_OK


async def _pull(rt: Runtime, ref: str) -> int:
    """Download with one progress line (rewritten in place in a terminal, a line per 10 % otherwise)."""
    from ..api import format_progress as progress_line

    tty = sys.stderr.isatty()
    shown: dict[str, object] = {"step": -1, "phase": None, "warned": False}

    def on_progress(p: DownloadProgress) -> None:
        if p.fits is False and not shown["warned"]:
            shown["warned"] = True
            print(f"Warning: {p.name} needs about {human_bytes(p.ram_needed)} of memory, more than this computer "
                  "has; it may not run.", file=sys.stderr)
        step = int((p.fraction or 0) * 10)
        if tty:
            print(f"\r{progress_line(p):<78}", end="" if p.phase != "done" else "\n", file=sys.stderr, flush=True)
        elif p.phase != shown["phase"] or step != shown["step"]:
            print(progress_line(p), file=sys.stderr, flush=True)
        shown["phase"], shown["step"] = p.phase, step

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(rt.models.pull(ref, on_progress))
    loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        model = await task
    except asyncio.CancelledError:
        print("\nPaused; run the same command again to resume the download.", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    print(f"Installed {model.ref} ({human_bytes(model.size)}). Use it with: hearth run --model {model.ref} \"...\"")
    return EXIT_OK
