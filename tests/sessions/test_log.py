from datetime import UTC, datetime

import pytest

from sessions.log import (
    GENESIS_HASH,
    ChainProblem,
    canonical_body_text,
    canonical_json,
    chain_hash,
    event_body,
    format_time,
    parse_time,
    verify_chain,
)


def _log(n: int, sessions: dict[int, str] | None = None) -> list[dict]:
    """``n`` chained events of ``ses_1`` (or of ``sessions[seq]``), hashes all valid."""
    events, prev = [], GENESIS_HASH
    for seq in range(1, n + 1):
        body = event_body(
            seq=seq,
            id=f"evt_{seq}",
            session_id=(sessions or {}).get(seq, "ses_1"),
            type="part.updated",
            at="2026-11-30T01:02:03.004Z",
            data={"text": f"héllo {seq}", "n": seq, "nested": {"b": 1, "a": [1.5, None]}},
        )
        prev = chain_hash(prev, body)
        events.append({**body, "hash": prev})
    return events


def test_canonical_body_text_is_the_canonical_json_of_the_body():
    data = {"z": 1, "a": {"y": 'ü\n"q"', "b": [True, None, 2.5]}, "id": "prt_1"}
    body = event_body(
        seq=42, id="evt_9", session_id="ses_3", type="part.updated", at="t", data=data
    )
    assert canonical_body_text(
        seq=42,
        id="evt_9",
        session_id="ses_3",
        type="part.updated",
        at="t",
        data_json=canonical_json(data),
    ) == canonical_json(body)


def test_an_untouched_log_verifies():
    assert verify_chain(_log(5), session_id="ses_1") == []


@pytest.mark.parametrize(
    ("tamper", "seq"),
    [
        (lambda log: log[2]["data"].update(text="changed"), 3),
        (lambda log: log.pop(1), 2),
        (lambda log: log.insert(1, log.pop(2)), 2),
        (lambda log: log[3].update(at="2026-11-30T01:02:03.005Z"), 4),
        (lambda log: log[0].update(type="message.updated"), 1),
    ],
    ids=["changed data", "dropped event", "reordered", "changed time", "changed type"],
)
def test_tampering_is_detected_at_the_first_changed_event(tamper, seq):
    log = _log(5)
    tamper(log)
    problems = verify_chain(log, session_id="ses_1")
    assert problems
    assert problems[0].seq == seq


def test_an_event_of_another_session_is_reported_as_that_and_nothing_else():
    """Its hash is valid (it was chained as it is): the one problem is whose it is."""
    log = _log(3, sessions={2: "ses_2"})
    assert verify_chain(log, session_id="ses_1") == [
        ChainProblem(2, "event belongs to another session")
    ]
    assert verify_chain(log) == []  # the chain alone is intact
    assert verify_chain(_log(2), session_id="ses_other") == [
        ChainProblem(1, "event belongs to another session"),
        ChainProblem(2, "event belongs to another session"),
    ]


def test_times_are_iso_utc_with_milliseconds():
    moment = datetime(2026, 11, 30, 1, 2, 3, 456789, tzinfo=UTC)
    assert format_time(moment) == "2026-11-30T01:02:03.456Z"
    assert parse_time("2026-11-30T01:02:03.456Z") == moment.replace(microsecond=456000)
    assert format_time(parse_time("2026-11-30T02:02:03.456+01:00")) == "2026-11-30T01:02:03.456Z"
