"""LangGraph: ``MessagesState`` + SQLite checkpointer (store), ``create_react_agent`` (turn).

Runs in the ``langgraph`` virtual environment
(``pip install langgraph langgraph-checkpoint-sqlite langchain-core``).

* store: a graph ``START -> reply -> END`` over ``MessagesState`` with ``SqliteSaver``;
  a turn is ``graph.invoke({"messages": [user]})`` whose node returns the ~400-character
  assistant message (no model): the checkpoints a LangGraph app writes for one turn.
  The next turn's model input is ``graph.get_state(config)`` (the latest checkpoint).
  ``MessagesState`` keeps the whole message list in every checkpoint, so the bytes grow
  quadratically; the runner stops LangGraph's store at ``--langgraph-max-size`` turns.
* turn: ``create_react_agent(model, tools=[], checkpointer=AsyncSqliteSaver)`` streamed
  with ``astream(..., stream_mode="messages")``, the model a ``BaseChatModel`` whose
  ``_astream`` yields the 80 deltas, no delay.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import peers_common as common
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

SYSTEM = "LangGraph MessagesState + SQLite checkpointer"


class FakeChatModel(BaseChatModel):
    """Streams :data:`peers_common.DELTAS` as ``AIMessageChunk``s, zero delay."""

    @property
    def _llm_type(self) -> str:
        return "fake-deltas"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(common.REPLY_TEXT))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for delta in common.DELTAS:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=delta))
            if run_manager is not None:
                run_manager.on_llm_new_token(delta, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for delta in common.DELTAS:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=delta))
            if run_manager is not None:
                await run_manager.on_llm_new_token(delta, chunk=chunk)
            yield chunk


def store(args: Any) -> dict[str, Any]:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(common.REPLY_TEXT)]}

    with common.scratch_directory("langgraph") as directory:
        path = directory / "langgraph.sqlite3"
        connection = sqlite3.connect(str(path), check_same_thread=False)
        saver = SqliteSaver(connection)
        builder = StateGraph(MessagesState)
        builder.add_node("reply", reply)
        builder.add_edge(START, "reply")
        builder.add_edge("reply", END)
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "bench"}}

        def append(n: int) -> None:
            graph.invoke({"messages": [HumanMessage(common.USER_TEXT)]}, config)

        def load() -> None:
            messages = graph.get_state(config).values["messages"]
            assert messages[-1].content == common.REPLY_TEXT

        result = common.run_store(
            args, append=append, load=load, size_bytes=lambda: common.sqlite_bytes(path)
        )
        connection.close()
        return result


async def turns(args: Any) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.prebuilt import create_react_agent

    with common.scratch_directory("langgraph") as directory:
        path = directory / "langgraph.sqlite3"
        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            agent = create_react_agent(FakeChatModel(), tools=[], checkpointer=saver)

            def turn_in(thread: str) -> Any:
                config = {"configurable": {"thread_id": thread}}

                async def turn(n: int) -> str:
                    streamed = []
                    async for chunk, _ in agent.astream(
                        {"messages": [HumanMessage(common.USER_TEXT)]},
                        config,
                        stream_mode="messages",
                    ):
                        if chunk.content:  # langchain-core closes a stream with an empty chunk
                            streamed.append(chunk.content)
                    common.check_streamed(streamed)
                    return "".join(streamed)

                return turn

            return await common.arun_turns(args, turn_in("bench"), warmup=turn_in("warmup"))


def main() -> None:
    warnings.simplefilter("ignore")  # create_react_agent's deprecation notice
    args = common.arguments()
    if args.workload == "describe":
        common.emit(
            {
                "variants": {"": SYSTEM},
                "versions": common.versions(
                    "langgraph", "langgraph-checkpoint-sqlite", "langchain-core"
                ),
            }
        )
        return
    result = store(args) if args.workload == "store" else asyncio.run(turns(args))
    common.emit({"system": SYSTEM, **result})


if __name__ == "__main__":
    main()
