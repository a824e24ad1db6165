"""What the rewrite cache saves when conversations are replayed: hit rate and model time.

Replays the judged conversations of demo/eval/tasks.jsonl (each task's history stored as
earlier messages, then its question) through `conversations.turn.turn_run`, as the chat runs
a turn, `--passes` times, with the model's rewrite and the rewrite cache on. Each run reads
as a reader of a group of its own (made for the run, holding no document: it reads what an
employee reads), so its first pass starts with a cold cache whatever earlier runs kept. Per
pass it prints the turns, the model rewrites, the cache hits, the hit rate, the rewrite's p50
on hits and on misses, and the model time the hits saved (each hit's turn took its rewrite's
time from the cache's record of it).

Needs a model server and the demo in the `company` collection (`make run` or `manage.py
seed_demo` once):

    python -m chatrag.dev.localmodel --max-tokens 64 -- \
        .venv/bin/python scripts/replay_rewrite_cache.py [--limit N] [--passes 2] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
os.environ.setdefault("CHATRAG_DEBUG", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main() -> int:
    import django

    django.setup()
    from asgiref.sync import sync_to_async
    from django.conf import settings
    from django.contrib.auth.models import Group, User

    from conversations.models import Conversation, Message, TurnTrace
    from conversations.turn import turn_run
    from retrieval.pipeline.metrics import percentile

    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=Path, default=BASE_DIR / "demo/eval/tasks.jsonl")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not settings.CHATRAG_LLM_BACKEND:
        print("no model server: run under `python -m chatrag.dev.localmodel -- ...`")
        return 2
    if not settings.CHATRAG_REWRITE_CACHE_SECONDS:
        print("the rewrite cache is off (CHATRAG_REWRITE_CACHE_SECONDS=0)")
        return 2

    tasks = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
    if args.limit:
        tasks = tasks[: args.limit]
    user, _ = User.objects.get_or_create(username="cache-replay")
    group = Group.objects.create(name=f"cache-replay-{time.time_ns()}")
    user.groups.set([group])

    async def emit(event: dict[str, Any]) -> None:
        return None

    def trace_of(message_id: int) -> tuple[str | None, float]:
        trace = TurnTrace.objects.get(message_id=message_id)
        return trace.rewrite.get("cache"), float(trace.timings_ms.get("rewrite", 0.0))

    async def one_pass() -> list[tuple[str | None, float]]:
        out = []
        for task in tasks:
            conversation = await sync_to_async(Conversation.objects.create)(owner=user)
            for item in task["history"]:
                await sync_to_async(Message.objects.create)(
                    conversation=conversation, role=item["role"], text=item["text"]
                )
            message = await sync_to_async(Message.objects.create)(
                conversation=conversation, role="user", text=task["question"], status="received"
            )
            await turn_run(message_id=message.id, emit=emit)
            out.append(await sync_to_async(trace_of)(message.id))
            await sync_to_async(conversation.delete)()
        return out

    try:
        passes = [asyncio.run(one_pass()) for _ in range(args.passes)]
    finally:
        group.delete()
    # What a hit saved: the model's rewrite time of the same turn when it missed.
    missed_ms = {i: ms for run in passes for i, (state, ms) in enumerate(run) if state == "miss"}
    print(f"{len(tasks)} judged turns of {args.tasks.name}, model {settings.CHATRAG_LLM_MODEL}")
    header = f"{'pass':>4} {'turns':>5} {'model':>5} {'hits':>5} {'hit rate':>8}"
    print(f"{header} {'hit p50 ms':>10} {'miss p50 ms':>11} {'saved s':>8}")
    report = []
    for number, run in enumerate(passes, 1):
        hits = [ms for state, ms in run if state == "hit"]
        misses = [ms for state, ms in run if state == "miss"]
        asked = len(misses) + len(hits)  # turns that wanted the model's rewrite
        saved = sum(missed_ms.get(i, 0.0) - ms for i, (s, ms) in enumerate(run) if s == "hit")
        row = {
            "pass": number,
            "turns": len(run),
            "model_rewrites": len(misses),
            "hits": len(hits),
            "hit_rate": len(hits) / asked if asked else 0.0,
            "hit_p50_ms": percentile(hits, 50) if hits else None,
            "miss_p50_ms": percentile(misses, 50) if misses else None,
            "saved_s": saved / 1000,
        }
        report.append(row)
        hit_p50 = f"{row['hit_p50_ms']:.1f}" if hits else "-"
        miss_p50 = f"{row['miss_p50_ms']:.0f}" if misses else "-"
        print(
            f"{number:>4} {len(run):>5} {len(misses):>5} {len(hits):>5} "
            f"{row['hit_rate']:>8.2f} {hit_p50:>10} {miss_p50:>11} {row['saved_s']:>8.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
