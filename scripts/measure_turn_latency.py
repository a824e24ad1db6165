"""Time a chat turn's stages on the demo knowledge base, as the consumer runs them.

Runs every judged question of demo/eval/tasks.jsonl (with its history stored as earlier
messages) through `conversations.turn.turn_run` and prints p50/p95 of the time from the
user's message to the `rewrite` frame, the `sources` frame, the first `delta` and `done`.
In-process: WebSocket transport is not included. Uses the configured database (the embedded
one by default) and its `company` collection, so run `make run` (or `manage.py seed_demo`)
once first.

    python scripts/measure_turn_latency.py [--limit N] [--json out.json]
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
    from django.contrib.auth.models import User

    from conversations.models import Conversation, Message
    from conversations.turn import turn_run
    from retrieval.pipeline.metrics import percentile

    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=Path, default=BASE_DIR / "demo/eval/tasks.jsonl")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    tasks = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
    if args.limit:
        tasks = tasks[: args.limit]
    user, _ = User.objects.get_or_create(username="latency-bench")
    stages = ["rewrite", "sources", "delta", "done"]
    samples: dict[str, list[float]] = {s: [] for s in stages}

    async def run_one(message_id: int) -> dict[str, float]:
        seen: dict[str, float] = {}
        start = time.perf_counter()

        async def emit(event: dict[str, Any]) -> None:
            kind = event["type"]
            if kind in {"rewrite", "sources", "delta", "done", "clarify"}:
                seen.setdefault(kind, (time.perf_counter() - start) * 1000)

        await turn_run(message_id=message_id, emit=emit, received_at=start)
        return seen

    async def run_all() -> None:
        from asgiref.sync import sync_to_async

        for task in tasks:
            conversation = await sync_to_async(Conversation.objects.create)(owner=user)
            for item in task["history"]:
                await sync_to_async(Message.objects.create)(
                    conversation=conversation, role=item["role"], text=item["text"]
                )
            message = await sync_to_async(Message.objects.create)(
                conversation=conversation, role="user", text=task["question"], status="received"
            )
            seen = await run_one(message.id)
            for stage in stages:
                if stage in seen:
                    samples[stage].append(seen[stage])
            await sync_to_async(conversation.delete)()

    asyncio.run(run_all())
    print(f"{len(tasks)} turns (rule rewrite, extractive answer, demo knowledge base)")
    print(f"{'from message to':<18} {'n':>4} {'p50 ms':>8} {'p95 ms':>8}")
    report = {}
    for stage in stages:
        values = samples[stage]
        p50, p95 = percentile(values, 50), percentile(values, 95)
        report[stage] = {"n": len(values), "p50": p50, "p95": p95}
        label = "first delta" if stage == "delta" else f"{stage} frame"
        print(f"{label:<18} {len(values):>4} {p50:>8.1f} {p95:>8.1f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
