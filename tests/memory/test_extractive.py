# ruff: noqa: RUF001, RUF003 - Chinese text is written with its full-width punctuation
"""The offline summarizer keeps the sentences that carry facts (issue 18, part 4).

Plain functions, no database: ``memory.extractive`` is pure. English, Chinese and
mixed dialogues; a planted fact in the middle of a long message; dialogues over the
character budget keep their facts and drop the chit-chat.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memory.extractive import SUMMARY_CHARS, extractive, score, sentences
from memory.summarizers import extractive as default_extractive


def says(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"role": role, "text": text, "at": "2026-12-01T10:00:00.000Z"} for role, text in pairs]


def lines_of(summary: str) -> list[str]:
    return summary.split("\n")


CHIT_CHAT_EN = [
    "How is your day going so far?",
    "It has been a long week, honestly.",
    "I was just thinking out loud here.",
    "Work has been busy and tiring lately.",
    "The weather keeps changing all the time.",
    "Anyway, that is what is on my mind.",
]
CHIT_CHAT_ZH = [
    "最近怎么样？",
    "这几天有点累。",
    "我只是随便聊聊。",
    "工作挺忙的。",
    "天气总是变来变去。",
    "反正就是这样。",
]


def test_the_default_summarizer_path_names_it():
    assert default_extractive is extractive


# --- a fact in the middle of a long message ----------------------------------------------------


def test_a_planted_fact_in_the_middle_of_a_long_english_message_is_kept():
    fact = "My sister Ada flies to Lisbon on 14 March."
    text = " ".join([*CHIT_CHAT_EN * 6, fact, *CHIT_CHAT_EN * 6])
    assert len(text) > 2 * SUMMARY_CHARS
    summary = extractive(says(("user", text), ("assistant", "Okay, thanks for telling me!")))
    assert fact in summary
    assert summary.startswith("user: ")
    assert len(summary) <= SUMMARY_CHARS


def test_a_planted_fact_in_the_middle_of_a_long_chinese_message_is_kept():
    fact = "我妹妹小丽3月14日坐飞机去杭州。"
    text = "".join([*CHIT_CHAT_ZH * 6, fact, *CHIT_CHAT_ZH * 6])
    summary = extractive(says(("user", text), ("assistant", "好的，谢谢！")))
    assert fact in summary
    assert summary.startswith("user: ")
    # Chinese sentences are cut at 。！？ and copied whole, never translated.
    body = summary.removeprefix("user: ")
    assert all(not ("a" <= char.lower() <= "z") for char in body)


def test_a_fact_inside_a_very_long_sentence_is_kept():
    """A sentence past the sentence limit is cut at its clause marks: the clause with the
    fact survives, the run of words around it does not."""
    padding = ", ".join(["and then some more talk about nothing much"] * 12)
    text = f"So {padding}, and my dentist appointment is next Tuesday at 9:30, {padding}."
    summary = extractive(says(("user", text)))
    assert "next Tuesday at 9:30" in summary


# --- over budget: facts, not chit-chat ---------------------------------------------------------

FACTS_EN = [
    "My name is Priya and I live in Toronto.",
    "I moved there in 2019 for a job at Shopify.",
    "I prefer tea over coffee, always.",
    "We decided to meet next Friday at 7 pm.",
    "My dog Biscuit turns 3 on 5 May.",
]


def english_dialogue() -> list[dict[str, Any]]:
    pairs: list[tuple[str, str]] = []
    for n in range(30):
        pairs.append(("user", CHIT_CHAT_EN[n % len(CHIT_CHAT_EN)]))
        pairs.append(("assistant", "That sounds good, thank you!"))
        pairs.append(("assistant", f"{CHIT_CHAT_EN[(n + 3) % len(CHIT_CHAT_EN)]} Tell me more."))
        if n % 6 == 3:
            pairs.append(("user", FACTS_EN[n // 6]))
        pairs.append(("user", "ok"))
        pairs.append(("assistant", "Thanks!"))
    return says(*pairs)


def test_an_english_dialogue_over_budget_keeps_the_facts_not_the_chit_chat():
    messages = english_dialogue()
    assert sum(len(m["text"]) for m in messages) > 3 * SUMMARY_CHARS
    summary = extractive(messages)
    assert len(summary) <= SUMMARY_CHARS
    for fact in FACTS_EN:
        assert f"user: {fact}" in lines_of(summary), fact
    # In dialogue order, with who said it.
    positions = [summary.index(fact) for fact in FACTS_EN]
    assert positions == sorted(positions)
    assert all(line.startswith(("user: ", "assistant: ")) for line in lines_of(summary))
    # Greetings and filler never make a line.
    assert "user: ok" not in lines_of(summary)
    assert "assistant: Thanks!" not in lines_of(summary)
    assert "That sounds good" not in summary
    # The chit-chat fills what room is left, and there was not room for all of it.
    chit_chat = sum(summary.count(line) for line in CHIT_CHAT_EN)
    assert chit_chat < sum(m["text"].count(line) for m in messages for line in CHIT_CHAT_EN)


FACTS_ZH = [
    "我叫王小明，住在杭州市西湖区。",
    "我下周三要去上海出差。",
    "我最喜欢吃辣的川菜，不吃香菜。",
    "我们决定3月5日晚上七点见面。",
    "张老师说考试在星期五上午。",
]


def test_a_chinese_dialogue_over_budget_keeps_the_facts_not_the_chit_chat():
    pairs: list[tuple[str, str]] = []
    for n in range(40):
        pairs.append(("user", "".join(CHIT_CHAT_ZH[n % 6 :] + CHIT_CHAT_ZH[: n % 6])))
        pairs.append(("assistant", "哈哈，好的好的！"))
        if n % 8 == 5:
            pairs.append(("user", f"对了，{FACTS_ZH[n // 8]}"))
        pairs.append(("assistant", "嗯嗯，明白了。谢谢你！"))
    messages = says(*pairs)
    assert sum(len(m["text"]) for m in messages) > 2 * SUMMARY_CHARS
    summary = extractive(messages)
    assert len(summary) <= SUMMARY_CHARS
    for fact in FACTS_ZH:
        assert fact in summary, fact
    positions = [summary.index(fact) for fact in FACTS_ZH]
    assert positions == sorted(positions)
    assert "哈哈" not in summary
    assert "谢谢你" not in summary
    assert summary.count("最近怎么样") < 40


def test_a_mixed_dialogue_keeps_each_line_in_its_own_language():
    messages = says(
        ("user", "Hi! 我下个月15号要搬到深圳。Any tips?"),
        ("assistant", "好的！Shenzhen is humid in summer. Pack light clothes."),
        ("user", "哈哈，谢谢！"),
        ("user", "My manager Li Wei said the office is in Nanshan district."),
        ("assistant", "Great. 南山区离机场不远。"),
    )
    summary = extractive(messages)
    assert "我下个月15号要搬到深圳。" in summary
    assert "My manager Li Wei said the office is in Nanshan district." in summary
    assert "南山区离机场不远。" in summary
    assert "Shenzhen is humid in summer." in summary
    assert "哈哈" not in summary
    assert lines_of(summary)[0].startswith("user: ")
    assert [line.split(":")[0] for line in lines_of(summary)] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_left_out_sentences_of_a_message_are_marked():
    text = (
        "I have been thinking about it a lot. It is nice to talk. "
        "We booked a cabin in Banff for 12 June. Nothing else to add. Really nothing."
    )
    summary = extractive(says(("user", text)))
    assert summary == "user: We booked a cabin in Banff for 12 June."
    two = extractive(
        says(("user", "My flight is at 6 am. Nothing else happened. I land in Oslo at noon."))
    )
    assert two == "user: My flight is at 6 am. … I land in Oslo at noon."


# --- filler -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sentence",
    [
        "ok",
        "Thanks!",
        "Sounds good, thank you so much!",
        "lol",
        "👍🎉",
        "Hey Mel!",
        "Thanks, Melanie!",
        "That's so cool, Caroline!",
        "How have you been?",
        "好的",
        "哈哈哈",
        "嗯嗯，谢谢！",
        "はい、そうですね。",
        "ありがとうございます！",
        "네, 감사합니다!",
        "ㅋㅋㅋ",
    ],
)
def test_greetings_and_filler_score_nothing(sentence):
    assert score(sentence) == 0


@pytest.mark.parametrize(
    ("fact", "plain"),
    [
        ("I love hiking in the Alps.", "I was thinking about it."),
        ("The meeting is on Wednesday.", "The talk went on for a while."),
        ("我喜欢喝绿茶。", "我在想这件事。"),
        ("我们星期三见。", "我们再聊聊。"),
        ("小王明天去北京。", "他说了很多话。"),
        ("It costs 40 dollars.", "It costs a bit."),
        ("We met in Austin, Texas.", "We met at last, finally."),
        ("猫の名前はミケです。", "猫はかわいいです。"),
        ("来週の金曜日に大阪へ行く予定です。", "それは知らなかった。"),
        ("田中さんに会いました。", "ちょっと疲れました。"),
        ("제 이름은 민수예요.", "그냥 그런 느낌이에요."),
        ("저는 서울에 살아요.", "조금 피곤해요."),
        ("I have 3 kids.", "See (2) below."),
        ("写真は3枚あります。", "（写真1）"),
    ],
)
def test_a_sentence_with_a_fact_scores_above_a_plain_one(fact, plain):
    assert score(fact) > score(plain) > 0


def test_a_dialogue_of_nothing_but_filler_still_gives_its_first_sentences():
    summary = extractive(says(("user", "hi"), ("assistant", "Hello! 👋"), ("user", "哈哈")))
    assert summary == "user: hi\nassistant: Hello!\nuser: 哈哈"


def test_a_dialogue_without_facts_gives_its_first_sentences():
    summary = extractive(
        says(
            ("user", "How do I roll dialogs? I tried twice."),
            ("tool", "ls output"),
            ("assistant", "Run the command.\nThen check the output."),
        )
    )
    assert summary == "user: How do I roll dialogs?\nassistant: Run the command."


# --- sentences ------------------------------------------------------------------------------------


def test_sentences_are_cut_at_latin_and_ideographic_ends():
    assert sentences("Mr. Lee arrived at 3.30 today. He left! Did he?") == [
        "Mr. Lee arrived at 3.30 today.",
        "He left!",
        "Did he?",
    ]
    assert sentences("我昨天喝了咖啡。你呢？我明天还去！好的!下次见") == [
        "我昨天喝了咖啡。",
        "你呢？",
        "我明天还去！",
        "好的!",
        "下次见",
    ]
    assert sentences("“我到了。”他说。\nline two") == ["“我到了。”", "他说。", "line two"]


def test_text_without_any_boundary_is_cut_to_the_budget():
    huge = says(("user", "x" * 50_000), ("assistant", "我" * 30_000))
    summary = extractive(huge)
    assert 0 < len(summary) <= SUMMARY_CHARS


# --- any input --------------------------------------------------------------------------------

_TEXT = st.text(
    alphabet=st.sampled_from(
        list("abc XYZ.,!?:;'\"-\n0123456789")
        + list("我你他的了。！？，；：、“”")
        + ["🎉", "é", "İ"]
    ),
    max_size=400,
)


@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant", "tool", "reasoning"]), _TEXT),
        max_size=30,
    )
)
@hsettings(max_examples=200, deadline=None)
def test_any_dialogue_gives_a_summary_within_budget_made_of_its_own_text(pairs):
    messages = says(*pairs)
    summary = extractive(messages)
    assert len(summary) <= SUMMARY_CHARS
    spoken = [
        (role, text) for role, text in pairs if role in ("user", "assistant") and text.strip()
    ]
    if not spoken:
        return
    assert summary
    texts = " ".join(" ".join(text.split()) for _, text in spoken)
    for line in summary.split("\n"):
        role, _, body = line.partition(": ")
        assert role in ("user", "assistant")
        for piece in body.replace("…", "\n").split("\n"):
            assert " ".join(piece.split()) in texts


def test_a_fact_repeated_back_is_kept_once_and_the_room_goes_to_other_facts():
    """A third-round finding: an assistant that repeats each fact it is told doubled
    every fact's cost, and 8 of 20 facts were left out of a summary that held each
    twice."""
    facts = [
        f"My {thing} is {n}{n}{n} {place} Street in Springfield since March {n + 1}, 2021."
        for n, (thing, place) in enumerate(
            [
                ("office", "Maple"),
                ("studio", "Oak"),
                ("garage", "Pine"),
                ("cabin", "Cedar"),
                ("flat", "Elm"),
                ("shop", "Birch"),
                ("barn", "Willow"),
                ("loft", "Aspen"),
                ("kiosk", "Spruce"),
                ("depot", "Hazel"),
                ("shed", "Alder"),
                ("booth", "Linden"),
            ],
            start=1,
        )
    ]
    messages = []
    for fact in facts:
        messages += [{"role": "user", "text": fact}, {"role": "assistant", "text": fact}]
    summary = extractive(messages)
    assert all(fact in summary for fact in facts)
    assert all(summary.count(fact) == 1 for fact in facts)


def test_a_japanese_dialogue_over_budget_keeps_the_name_and_the_age():
    """A third-round finding: "猫の名前はミケです。3歳です。" kept only the age (no cue found
    the name), and bracketed numbers such as (写真1) in full-width brackets counted as facts."""
    topics = list("空海山川雲風雨雪花木森草石砂星月光音色形")
    pairs: list[tuple[str, str]] = []
    for n, topic in enumerate(topics * 3):
        pairs.append(
            ("user", f"{topic}のことをずっと考えていました。なんとなく気になって。"[n % 2 :])
        )
        pairs.append(("assistant", f"（写真{n % 9 + 1}）{topic}はきれいですね。"))
        if n == 17:
            pairs.append(("user", "うちの猫の名前はミケです。3歳です。"))
    messages = says(*pairs)
    assert sum(len(m["text"]) for m in messages) > 2 * SUMMARY_CHARS
    summary = extractive(messages)
    assert len(summary) <= SUMMARY_CHARS
    assert "猫の名前はミケです。" in summary
    assert "3歳です。" in summary
