"""``memory.rolling.snapshot.turn_cutoff``: the rolling's cutoff never splits a turn."""

from __future__ import annotations

from datetime import UTC, datetime

from memory.normalize import Msg
from memory.rolling.snapshot import turn_cutoff

AT = datetime(2026, 1, 1, tzinfo=UTC)


def window(*spec: str, start: int = 0) -> list[tuple[int, Msg]]:
    """``"s1:u"`` is a user message of session s1, ``"s1:a"`` a reply, in seq order."""
    rows = []
    for seq, item in enumerate(spec, start=start):
        session, role = item.split(":")
        rows.append(
            (
                seq,
                Msg(
                    role={"u": "user", "a": "assistant"}[role], text=item, at=AT, session_id=session
                ),
            )
        )
    return rows


def test_a_cut_on_a_prompt_stays():
    assert turn_cutoff(window("s:u", "s:a", "s:u", "s:a"), cutoff=2, floor=0) == 2


def test_a_cut_on_a_reply_moves_back_to_its_prompt():
    assert turn_cutoff(window("s:u", "s:a", "s:u", "s:a", "s:u", "s:a"), cutoff=3, floor=0) == 2


def test_a_regenerated_reply_moves_back_past_the_replaced_one():
    assert turn_cutoff(window("s:u", "s:a", "s:u", "s:a", "s:a"), cutoff=4, floor=0) == 2


def test_interleaved_sessions_move_until_every_session_starts_with_a_prompt():
    # s1's first kept message is its reply at 2 once s2's cut moved to 1
    rows = window("s1:u", "s2:u", "s1:a", "s2:a", "s1:u", "s1:a")
    assert turn_cutoff(rows, cutoff=3, floor=0) == 0
    assert turn_cutoff(rows, cutoff=4, floor=0) == 4


def test_never_below_the_floor_and_a_turn_rolled_already_is_left():
    rows = window("s:a", "s:u", "s:a", start=2)  # the prompt of seq 2's reply is rolled
    assert turn_cutoff(rows, cutoff=3, floor=2) == 3
    assert turn_cutoff(rows, cutoff=4, floor=2) == 3
    assert turn_cutoff(window("s:u", "s:a", start=5), cutoff=6, floor=5) == 5


def test_messages_without_prompts_are_cut_where_asked():
    assert turn_cutoff(window("s:a", "s:a", "s:a"), cutoff=1, floor=0) == 1
    assert turn_cutoff(window("s:u", "s:u", "s:u"), cutoff=2, floor=0) == 2
