"""The pure parts: normalization of slices and units, the compressor, the summarizer."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from memory.compressor import compress, strip_text
from memory.exceptions import (
    InvalidInput,
    SummarizerEmpty,
    SummarizerError,
    SummarizerMisconfigured,
    SummarizerTimeout,
)
from memory.ids import is_valid_id, new_slice_id
from memory.normalize import Msg, clean_messages, normalize_slices, normalize_unit
from memory.summarizers import extractive, get_summarizer, summarize

from .summarizers import empty, failing, not_a_string, slow

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def at(minutes: int) -> str:
    return (NOW + timedelta(minutes=minutes)).isoformat()


# --- slices ---------------------------------------------------------------------------------


def test_missing_ids_and_times_are_filled():
    [item] = normalize_slices(
        [{"start_index": 0, "end_index": 2, "summary": "s"}], message_count=3, now=NOW
    )
    assert is_valid_id(item["id"])
    assert item["id"].startswith("msl_")
    assert item["created_at"] == NOW


def test_ranges_are_clamped_into_the_unit_with_end_not_before_start():
    slices = normalize_slices(
        [
            {"id": "a", "start_index": -4, "end_index": 2, "created_at": at(1)},
            {"id": "b", "start_index": 3, "end_index": 99, "created_at": at(2)},
            {"id": "c", "start_index": 9, "end_index": 1, "created_at": at(3)},
        ],
        message_count=5,
        now=NOW,
    )
    assert [(s["id"], s["start_index"], s["end_index"]) for s in slices] == [
        ("a", 0, 2),
        ("b", 3, 5),
        ("c", 5, 5),
    ]


def test_slices_are_ordered_by_creation_time():
    slices = normalize_slices(
        [
            {"id": "late", "start_index": 2, "end_index": 4, "created_at": at(5)},
            {"id": "early", "start_index": 0, "end_index": 2, "created_at": at(1)},
        ],
        message_count=4,
        now=NOW,
    )
    assert [s["id"] for s in slices] == ["early", "late"]


def test_no_two_slices_overlap_a_later_one_starts_where_the_earlier_end():
    slices = normalize_slices(
        [
            {"id": "a", "start_index": 0, "end_index": 6, "created_at": at(1)},
            {"id": "b", "start_index": 4, "end_index": 8, "created_at": at(2)},
            {"id": "c", "start_index": 1, "end_index": 3, "created_at": at(3)},
            {"id": "d", "created_at": at(4)},
        ],
        message_count=10,
        now=NOW,
    )
    ranges = [(s["start_index"], s["end_index"]) for s in slices]
    assert ranges == [(0, 6), (6, 8), (8, 8), (8, 10)]
    for (s1, e1), (s2, e2) in itertools.pairwise(ranges):
        assert e1 <= s2
        assert s1 <= e1
        assert s2 <= e2


def test_same_time_slices_keep_their_id_order():
    first, second = new_slice_id(), new_slice_id()
    slices = normalize_slices(
        [
            {"id": second, "start_index": 1, "end_index": 2, "created_at": at(0)},
            {"id": first, "start_index": 0, "end_index": 1, "created_at": at(0)},
        ],
        message_count=2,
        now=NOW,
    )
    assert [s["id"] for s in slices] == [first, second]


@pytest.mark.parametrize(
    "bad",
    [
        ["not a slice"],
        [{"start_index": "1"}],
        [{"start_index": True}],
        [{"id": "bad id!"}],
        [{"created_at": "yesterday"}],
        [{"created_at": "2026-11-30T12:00:00"}],  # no zone
        [{"summary": 3}],
    ],
)
def test_bad_slices_are_refused(bad):
    with pytest.raises(InvalidInput):
        normalize_slices(bad, message_count=3, now=NOW)


def test_a_unit_is_normalized_whole():
    unit = normalize_unit(
        {
            "conversation_messages": [
                {"role": "user", "text": "hi"},
                {"role": "assistant", "text": "hello", "at": "2026-11-30T11:00:00.123456Z"},
            ],
            "slices": [{"start_index": 1, "end_index": 7, "summary": "  greeting  "}],
        },
        now=NOW,
    )
    assert unit["id"].startswith("mun_")
    assert unit["memory_session_id"].startswith("mss_")
    assert unit["updated_at"] == NOW
    assert [m.at for m in unit["conversation_messages"]] == [
        NOW,
        datetime(2026, 11, 30, 11, 0, 0, 123000, tzinfo=UTC),
    ]
    [item] = unit["slices"]
    assert (item["start_index"], item["end_index"], item["summary"]) == (1, 2, "greeting")


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ("hello", "list"),
        ({"role": "user"}, "list"),
        ([{"role": "robot", "text": "x"}], "role"),
        ([{"role": "user", "text": 5}], "text"),
        ([{"role": "user", "text": "x", "extra": 1}], "unknown"),
        ([{"role": "user", "text": "x", "session_id": "no spaces please"}], "session_id"),
        ([{"role": "user", "text": "x" * 100_001}], "longer"),
        ([{"role": "user", "text": "a\x00b"}], "NUL"),
        ([{"role": "user", "text": "x"}] * 201, "at most"),
    ],
)
def test_bad_messages_are_refused_with_a_clear_message(messages, problem):
    with pytest.raises(InvalidInput, match=problem) as info:
        clean_messages(messages, now=NOW)
    assert info.value.code == "invalid"
    assert info.value.status == 400


# --- the compressor ----------------------------------------------------------------------------


def msg(role: str, text: str, minute: int = 0) -> Msg:
    return Msg(role=role, text=text, at=NOW + timedelta(minutes=minute))


def test_compressor_drops_reasoning_and_empty_messages():
    out = compress([msg("user", "hi"), msg("reasoning", "let me think"), msg("assistant", "  \n ")])
    assert out == [{"role": "user", "text": "hi", "at": "2026-11-30T12:00:00.000Z"}]


def test_compressor_merges_consecutive_messages_of_one_role():
    out = compress(
        [
            msg("user", "one", 0),
            msg("user", "two", 1),
            msg("reasoning", "hmm", 2),
            msg("assistant", "three", 3),
            msg("reasoning", "hmm", 4),
            msg("assistant", "four", 5),
            msg("user", "five", 6),
        ]
    )
    assert [(m["role"], m["text"]) for m in out] == [
        ("user", "one\n\ntwo"),
        ("assistant", "three\n\nfour"),
        ("user", "five"),
    ]
    assert out[1]["at"] == "2026-11-30T12:03:00.000Z"


def test_compressor_caps_tool_output_only():
    long = "x" * 5000
    out = compress([msg("tool", long), msg("assistant", long)], tool_output_chars=100)
    assert out[0]["text"].startswith("x" * 100)
    assert out[0]["text"].endswith("[4900 more characters]")
    assert out[1]["text"] == long


def test_compressor_strips_white_space():
    assert strip_text("  a  \r\n\r\n\r\n\n b\t\n  ") == "a\n\n b"


# --- the summarizer -----------------------------------------------------------------------------


def test_extractive_of_tool_output_only_names_it():
    assert extractive([{"role": "tool", "text": "x"}]) == "(1 messages: tool)"


MESSAGES = [{"role": "user", "text": "hi", "at": "2026-11-30T12:00:00.000Z"}]


@pytest.mark.parametrize(
    ("summarizer", "error", "code"),
    [
        (failing, SummarizerError, "summarizer_failed"),
        (empty, SummarizerEmpty, "summarizer_empty"),
        (not_a_string, SummarizerEmpty, "summarizer_empty"),
    ],
)
def test_summarizer_failures_are_named_errors(summarizer, error, code):
    with pytest.raises(error) as info:
        summarize(MESSAGES, summarizer=summarizer, timeout=5)
    assert info.value.code == code
    with pytest.raises(error):
        summarize(MESSAGES, summarizer=summarizer, timeout=0)


def test_a_summarizer_that_overruns_times_out():
    with pytest.raises(SummarizerTimeout) as info:
        summarize(MESSAGES, summarizer=slow, timeout=0.2)
    assert info.value.code == "summarizer_timeout"


def test_the_summarizer_comes_from_settings(settings):
    settings.FORGE_MEMORY_SUMMARIZER = "tests.memory.summarizers.empty"
    assert get_summarizer() is empty
    settings.FORGE_MEMORY_SUMMARIZER = "tests.memory.summarizers.nothing_here"
    with pytest.raises(SummarizerMisconfigured, match="cannot be imported"):
        get_summarizer()
    settings.FORGE_MEMORY_SUMMARIZER = "memory.summarizers.DEFAULT_TIMEOUT"
    with pytest.raises(SummarizerMisconfigured, match="not callable"):
        get_summarizer()
