"""Per-request priority through the engine client: under the priority policy, urgent requests are admitted
first when a slot frees."""

from __future__ import annotations

import asyncio

from revolta_api.clients.threaded import ThreadedEngineClient
from revolta_engine import EngineArgs, LLMEngine, SamplingParams


def test_waiting_requests_run_in_priority_order():
    engine = LLMEngine.from_engine_args(EngineArgs.from_kwargs(max_model_len=256, kv_cache_memory_bytes=32 << 20, max_num_seqs=1,
                                              scheduling_policy="priority"))
    client = ThreadedEngineClient(engine)
    finished: list[str] = []

    async def run(rid: str, priority: int, max_tokens: int) -> None:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        async for out in client.generate(rid, [1, 2, 3, 4], params, priority):
            if out.finished:
                finished.append(rid)

    async def main() -> None:
        await client.start()
        try:
            blocker = asyncio.create_task(run("blocker", 0, 40))  # holds the one slot while the others queue
            await asyncio.sleep(0.5)
            await asyncio.gather(blocker, run("low", 5, 2), run("high", -3, 2), run("mid", 1, 2))
        finally:
            await client.shutdown()

    asyncio.run(main())
    assert finished == ["blocker", "high", "mid", "low"]
