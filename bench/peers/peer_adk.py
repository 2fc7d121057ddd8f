"""Google ADK: ``SqliteSessionService`` and ``DatabaseSessionService`` (SQLite via aiosqlite).

Runs in the ``adk`` virtual environment (``pip install 'google-adk[db]' aiosqlite``).
Two variants, each a row of the table: ``sqlite`` and ``database``.

* store: a turn is two ``append_event`` calls (the user's content, the agent's reply),
  what the runner appends for a one-step reply; the next turn's model input is
  ``get_session(...)`` (the session with its events).
* turn: ``Runner.run_async(...)`` with ``RunConfig(streaming_mode=StreamingMode.SSE)`` on
  an ``LlmAgent`` whose model is a ``BaseLlm`` yielding 80 partial responses and the
  final aggregated one, no delay; every event of the run is consumed.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncGenerator
from typing import Any

import peers_common as common
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

VARIANTS = {
    "sqlite": "Google ADK SqliteSessionService",
    "database": "Google ADK DatabaseSessionService",
}
APP, USER = "bench", "bench"


class FakeLlm(BaseLlm):
    """Streams :data:`peers_common.DELTAS` as partial responses, then the whole reply."""

    model: str = "fake-deltas"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if stream:
            for delta in common.DELTAS:
                yield LlmResponse(
                    content=types.Content(role="model", parts=[types.Part(text=delta)]),
                    partial=True,
                )
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=common.REPLY_TEXT)]),
            partial=False,
            turn_complete=True,
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=100, candidates_token_count=80, total_token_count=180
            ),
        )


def service_for(variant: str, path: Any) -> Any:
    if variant == "sqlite":
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        return SqliteSessionService(str(path))
    from google.adk.sessions.database_session_service import DatabaseSessionService

    return DatabaseSessionService(f"sqlite+aiosqlite:///{path}")


async def close(service: Any) -> None:
    closer = getattr(service, "close", None)
    if closer is not None:
        await closer()


def content(role: str, text: str) -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=text)])


async def store(args: Any) -> dict[str, Any]:
    with common.scratch_directory("adk") as directory:
        path = directory / "adk.sqlite3"
        service = service_for(args.variant, path)
        session = await service.create_session(app_name=APP, user_id=USER)

        async def append(n: int) -> None:
            invocation = f"inv-{n}"
            await service.append_event(
                session,
                Event(
                    invocation_id=invocation,
                    author="user",
                    content=content("user", common.USER_TEXT),
                ),
            )
            await service.append_event(
                session,
                Event(
                    invocation_id=invocation,
                    author="bench",
                    content=content("model", common.REPLY_TEXT),
                ),
            )

        async def load() -> None:
            loaded = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
            assert loaded is not None
            assert loaded.events

        result = await common.arun_store(
            args, append=append, load=load, size_bytes=lambda: common.sqlite_bytes(path)
        )
        await close(service)
        return result


async def turns(args: Any) -> dict[str, Any]:
    with common.scratch_directory("adk") as directory:
        path = directory / "adk.sqlite3"
        service = service_for(args.variant, path)
        agent = LlmAgent(name="bench", model=FakeLlm(), instruction="You are a helpful assistant.")
        runner = Runner(app_name=APP, agent=agent, session_service=service)
        config = RunConfig(streaming_mode=StreamingMode.SSE)

        async def turn_in() -> Any:
            session = await service.create_session(app_name=APP, user_id=USER)

            async def turn(n: int) -> str:
                final, deltas = "", []
                async for event in runner.run_async(
                    user_id=USER,
                    session_id=session.id,
                    new_message=content("user", common.USER_TEXT),
                    run_config=config,
                ):
                    if event.content and event.content.parts:
                        text = "".join(p.text or "" for p in event.content.parts)
                        if event.partial:
                            deltas.append(text)
                        else:
                            final = text
                common.check_streamed(deltas)
                return final

            return turn

        result = await common.arun_turns(args, await turn_in(), warmup=await turn_in())
        await close(service)
        return result


def main() -> None:
    warnings.simplefilter("ignore")  # experimental-feature notices
    args = common.arguments()
    if args.workload == "describe":
        common.emit(
            {
                "variants": VARIANTS,
                "versions": common.versions("google-adk", "sqlalchemy", "aiosqlite"),
            }
        )
        return
    result = asyncio.run(store(args) if args.workload == "store" else turns(args))
    common.emit({"system": VARIANTS[args.variant], **result})


if __name__ == "__main__":
    main()
