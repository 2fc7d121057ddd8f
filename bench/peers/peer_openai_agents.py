"""OpenAI Agents SDK: ``SQLiteSession`` (store) and ``Runner.run_streamed`` (turn).

Runs in the ``openai-agents`` virtual environment (``pip install openai-agents``).

* store: a turn is ``session.add_items([user, assistant])`` — the items the runner itself
  saves for a one-step reply; the next turn's model input is ``session.get_items()``.
* turn: ``Runner.run_streamed(agent, text, session=SQLiteSession(...))`` with a fake
  ``Model`` streaming the Responses events of one message, 80 text deltas, no delay;
  every stream event is consumed; tracing is disabled (no exporter to talk to).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import peers_common as common
from agents import Agent, Model, ModelResponse, Runner, SQLiteSession, set_tracing_disabled
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

SYSTEM = "OpenAI Agents SDK SQLiteSession"


def assistant_item(n: int) -> dict[str, Any]:
    """An assistant message as the runner stores it (a Responses output message)."""
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": common.REPLY_TEXT, "annotations": []}],
    }


class FakeModel(Model):
    """Streams one assistant message of :data:`peers_common.DELTAS`, zero delay."""

    def __init__(self) -> None:
        self.calls = 0

    def _response(self, status: str, output: list[Any]) -> Response:
        return Response(
            id=f"resp_{self.calls}",
            created_at=0,
            model="fake",
            object="response",
            output=output,
            tool_choice="auto",
            tools=[],
            top_p=None,
            parallel_tool_calls=False,
            status=status,  # type: ignore[arg-type]
        )

    def _message(self, text: str, status: str) -> ResponseOutputMessage:
        return ResponseOutputMessage(
            id=f"msg_{self.calls}",
            type="message",
            role="assistant",
            status=status,  # type: ignore[arg-type]
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.calls += 1
        return ModelResponse(
            output=[self._message(common.REPLY_TEXT, "completed")],
            usage=Usage(),
            response_id=None,
        )

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.calls += 1
        item_id = f"msg_{self.calls}"
        seq = 0

        def next_seq() -> int:
            nonlocal seq
            seq += 1
            return seq

        yield ResponseCreatedEvent(
            type="response.created",
            response=self._response("in_progress", []),
            sequence_number=next_seq(),
        )
        yield ResponseOutputItemAddedEvent(
            type="response.output_item.added",
            item=ResponseOutputMessage(
                id=item_id, type="message", role="assistant", status="in_progress", content=[]
            ),
            output_index=0,
            sequence_number=next_seq(),
        )
        yield ResponseContentPartAddedEvent(
            type="response.content_part.added",
            item_id=item_id,
            output_index=0,
            content_index=0,
            part=ResponseOutputText(type="output_text", text="", annotations=[]),
            sequence_number=next_seq(),
        )
        for delta in common.DELTAS:
            yield ResponseTextDeltaEvent(
                type="response.output_text.delta",
                item_id=item_id,
                output_index=0,
                content_index=0,
                delta=delta,
                logprobs=[],
                sequence_number=next_seq(),
            )
        text = "".join(common.DELTAS)
        yield ResponseTextDoneEvent(
            type="response.output_text.done",
            item_id=item_id,
            output_index=0,
            content_index=0,
            text=text,
            logprobs=[],
            sequence_number=next_seq(),
        )
        yield ResponseContentPartDoneEvent(
            type="response.content_part.done",
            item_id=item_id,
            output_index=0,
            content_index=0,
            part=ResponseOutputText(type="output_text", text=text, annotations=[]),
            sequence_number=next_seq(),
        )
        message = self._message(text, "completed")
        yield ResponseOutputItemDoneEvent(
            type="response.output_item.done",
            item=message,
            output_index=0,
            sequence_number=next_seq(),
        )
        yield ResponseCompletedEvent(
            type="response.completed",
            response=self._response("completed", [message]),
            sequence_number=next_seq(),
        )


async def store(args: Any) -> dict[str, Any]:
    with common.scratch_directory("openai-agents") as directory:
        path = directory / "agents.sqlite3"
        session = SQLiteSession("bench", db_path=path)

        async def append(n: int) -> None:
            await session.add_items(
                [{"role": "user", "content": common.USER_TEXT}, assistant_item(n)]
            )

        async def load() -> None:
            items = await session.get_items()
            assert items

        result = await common.arun_store(
            args, append=append, load=load, size_bytes=lambda: common.sqlite_bytes(path)
        )
        session.close()
        return result


async def turns(args: Any) -> dict[str, Any]:
    set_tracing_disabled(True)
    agent = Agent(name="bench", instructions="You are a helpful assistant.", model=FakeModel())
    with common.scratch_directory("openai-agents") as directory:
        path = directory / "agents.sqlite3"
        sessions = {name: SQLiteSession(name, db_path=path) for name in ("warmup", "bench")}

        def turn_in(name: str) -> Any:
            async def turn(n: int) -> str:
                result = Runner.run_streamed(agent, common.USER_TEXT, session=sessions[name])
                deltas = []
                async for event in result.stream_events():
                    if event.type == "raw_response_event" and isinstance(
                        event.data, ResponseTextDeltaEvent
                    ):
                        deltas.append(event.data.delta)
                common.check_streamed(deltas)
                return str(result.final_output)

            return turn

        result = await common.arun_turns(args, turn_in("bench"), warmup=turn_in("warmup"))
        for session in sessions.values():
            session.close()
        return result


def main() -> None:
    args = common.arguments()
    if args.workload == "describe":
        common.emit(
            {
                "variants": {"": SYSTEM},
                "versions": common.versions("openai-agents", "openai"),
            }
        )
        return
    result = asyncio.run(store(args) if args.workload == "store" else turns(args))
    common.emit({"system": SYSTEM, **result})


if __name__ == "__main__":
    main()
