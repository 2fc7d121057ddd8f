"""``shielding.finish_then_cancel``: work that starts a turn goes on to its end when its
caller is cancelled, and what it raises then is never lost nor left unretrieved."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from forge.errors import SessionBusy
from forge.runtime.prompting import McpServersStarting
from forge.runtime.shielding import finish_then_cancel


async def _fails_later(error: BaseException, ended: list[str]) -> None:
    await asyncio.sleep(0.2)
    ended.append("ended")
    raise error


@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_failure_after_the_caller_has_gone_is_logged_once(caplog, cancels):
    """Review (LOW): a second cancel of the caller, while it waited for the work, left
    the work's error "never retrieved" (asyncio's own log); and a first one dropped an
    unexpected error without a word."""
    ended: list[str] = []
    caller = asyncio.create_task(finish_then_cancel(_fails_later(RuntimeError("db"), ended)))
    await asyncio.sleep(0.05)
    for _ in range(cancels):
        caller.cancel()
        await asyncio.sleep(0.01)
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0.3)
    gc.collect()
    assert ended == ["ended"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == ["work whose caller had gone failed"]


@pytest.mark.parametrize(
    "error",
    [SessionBusy("busy"), McpServersStarting({})],
    ids=["refusal", "mcp-servers-starting"],
)
async def test_a_refusal_after_the_caller_has_gone_is_not_logged(caplog, error):
    """A refusal, or the signal to list an agent's MCP tools first (review), is no
    failure to log."""
    ended: list[str] = []
    caller = asyncio.create_task(finish_then_cancel(_fails_later(error, ended)))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    gc.collect()
    assert ended == ["ended"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
