"""The trim through the runtime: each turn logs its speaker's ``dialog_history`` block
with ``rolled_through`` (``forge.runtime.dialogue.memory_blocks``), and the turn's
model request, replayed from the log, holds the block in place of the rolled turns.
Real rollings of real memory (offline model, extractive summaries)."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Membership, User
from forge import runtime
from forge.context import request_for
from forge.runtime.dialogue import memory_blocks
from memory import selectors as memory_selectors
from memory import services as memory_services
from sessions import selectors
from sessions.models import SessionEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def chat(settings: Any, agents: Any) -> None:
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_SMALL_MODEL = "offline/echo"
    settings.FORGE_MEMORY_ROLL_THRESHOLD = 4
    settings.FORGE_MEMORY_ROLL_KEEP = 2


@pytest.fixture
def carol(tenant: Any) -> Any:
    carol = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=tenant, user=carol)
    return carol


def say(session: Any, text: str, who: Any, agent: str | None = None) -> dict[str, Any]:
    done = runtime.prompt(session=session, text=text, wait=True, speaker=who, agent=agent)
    assert done.reply is not None
    assert done.reply["info"]["error"] is None
    return done.message


def roll(session: Any, who: Any, agent: str = "build", **options: Any) -> None:
    core = memory_selectors.find_core(tenant=session.tenant, user=who, agent=agent)
    assert core is not None
    outcome = memory_services.roll_core(tenant=session.tenant, core=core, **options)
    assert outcome.status == "rolled", outcome


def last_step_messages(session: Any) -> list[dict[str, Any]]:
    """The messages of the request of the session's newest step, replayed from the log
    as of that step's start."""
    seq = (
        SessionEvent.objects.filter(session=session, type="part.updated", data__type="step-start")
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    assert seq is not None
    return list(request_for(session, at=seq)[1].messages)


def last_step_request(session: Any) -> list[str]:
    """The user and assistant texts of the request of the session's newest step."""
    return [str(m["content"]) for m in last_step_messages(session)]


def block_in_force(session: Any) -> dict[str, Any] | None:
    from sessions.projector import fold_context

    blocks = fold_context(selectors.context_updates(tenant=session.tenant, session=session))
    return blocks.get("dialog_history:memory")


def copied(session: Any, user: Any, how: str, *, before: str, tmp_path: Any) -> Any:
    """A fork of ``session`` before message ``before``, or (``how`` = "copy") an
    imported copy of its whole export."""
    from django.core.management import call_command

    from sessions import services

    if how == "fork":
        return services.fork_session(session=session, user=user, before_message_id=before)
    path = tmp_path / "log.jsonl"
    call_command("export_session", session.pk, "-o", str(path))
    return services.import_log(
        user=user, events=services.parse_log(path.read_bytes().splitlines()), copy=True
    )


def said(history: list[str], text: str) -> int:
    """How many messages of the request hold ``text`` (a prompt and its echo)."""
    return sum(1 for content in history if text in content)


def test_the_speakers_rolled_turns_leave_the_view_and_another_speaker_brings_theirs(
    chat, session, user, carol
):
    for n in range(3):
        say(session, f"alice turn {n}", user)
    roll(session, user, force=False)  # 6 in the window, threshold 4: rolls turns 0-1
    say(session, "alice turn 3", user)
    block = block_in_force(session)
    assert block is not None
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    assert block["rolled_through"] == history[3]["info"]["id"]  # turn 1's reply
    seen = last_step_request(session)
    assert said(seen, "alice turn 0") == said(seen, "alice turn 1") == 0
    assert said(seen, "alice turn 2") == 2  # the kept turn, verbatim
    assert seen[-1] == "alice turn 3"
    system = request_for(session)[1].system
    assert any("Summaries of the earlier dialogue" in text for text in system)

    # carol speaks next: she has no memory, so the block and its cut go
    say(session, "carol asks", carol)
    assert block_in_force(session) is None
    seen = last_step_request(session)
    assert said(seen, "alice turn 0") == 2  # verbatim again: her memory rolled none of it
    assert seen[-1] == "carol asks"

    # alice again: her block and her cut come back; carol's turn is after the cut
    say(session, "alice turn 4", user)
    seen = last_step_request(session)
    assert said(seen, "alice turn 1") == 0
    assert said(seen, "carol asks") == 2
    assert seen[-1] == "alice turn 4"
    # the chat's history keeps every turn
    assert len(history) + 4 == len(
        list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    )


def last_step_roles(session: Any) -> list[str]:
    return [str(m["role"]) for m in last_step_messages(session)]


@pytest.mark.parametrize("keep", [1, 3])
def test_an_odd_keep_never_starts_the_request_with_a_reply(chat, session, user, keep):
    """keep counts messages, a turn is two: the cut moves back to the turn's prompt, so
    the request after the block starts with a user message (some servers refuse one
    that starts with the assistant), and the turn is kept whole, not half rolled."""
    for n in range(3):
        say(session, f"turn {n}", user)
    roll(session, user, keep=keep)
    say(session, "turn 3", user)
    roles = last_step_roles(session)
    assert roles[0] == "user"
    seen = last_step_request(session)
    assert said(seen, "turn 0") == 0
    assert said(seen, "turn 2") == 2  # kept whole: its prompt and its answer
    assert said(seen, "turn 1") == (2 if keep == 3 else 0)


def test_a_subtask_gets_no_block_and_no_cut(chat, session, user):
    for n in range(3):
        say(session, f"turn {n}", user)
    roll(session, user, force=False)
    assert memory_blocks(session, "build", user, depth=1) == []
    [block] = memory_blocks(session, "build", user)
    assert block["rolled_through"] is not None


def test_a_regenerated_reply_still_sees_its_rolled_prompt(chat, session, user):
    say(session, "first question", user)
    asked = say(session, "second question", user)
    roll(session, user, keep=0)  # everything rolled, the last prompt too
    runtime.regenerate(session=session, wait=True, speaker=user)
    seen = last_step_request(session)
    assert seen == ["second question"]  # the prompt answered again, not the rolled first turn
    block = block_in_force(session)
    assert block is not None
    assert block["rolled_through"] < asked["info"]["id"]


def test_after_a_regenerated_rolled_prompt_the_next_request_starts_with_that_prompt(
    chat, session, user
):
    """A fourth-round finding: once everything was rolled, a regenerated reply's prompt
    was hidden again on the next turn, while the new answer was not (the core had not
    rolled it): the request after the block began with an answer to a question the
    model could not see."""
    say(session, "first question", user)
    say(session, "second question", user)
    roll(session, user, keep=0)
    runtime.regenerate(session=session, wait=True, speaker=user)
    say(session, "third question", user)
    assert last_step_roles(session)[0] == "user"
    seen = last_step_request(session)
    assert seen[0] == "second question"  # the regenerated reply's prompt, then the reply
    assert said(seen, "first question") == 0
    assert seen[-1] == "third question"
    # once the core rolls the new answer too, the cut passes it again
    roll(session, user, keep=0)
    say(session, "fourth question", user)
    assert said(last_step_request(session), "second question") == 0


@pytest.mark.parametrize("how", ["fork", "copy"])
def test_a_fork_or_a_copy_hides_the_rolled_turns_it_holds_too(chat, session, user, how, tmp_path):
    """A second-round finding: a fork (or an imported copy) holds the rolled turns under
    new ids, which the core's rows do not name, so its model saw them raw and inside
    the block's summaries at once. The copy's block names the copy's own cut, and the
    next turns keep it."""

    from sessions.models import Session

    for n in range(3):
        say(session, f"alice turn {n}", user)
    roll(session, user, force=False)  # rolls turns 0-1
    say(session, "alice turn 3", user)
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    copy = copied(session, user, how, before=history[-2]["info"]["id"], tmp_path=tmp_path)
    held = list(selectors.iter_history(tenant=copy.tenant, session_id=copy.pk))
    in_force = block_in_force(copy)
    assert in_force is not None
    assert in_force["rolled_through"] == held[3]["info"]["id"]  # turn 1's reply
    seen = [str(m["content"]) for m in request_for(copy)[1].messages]
    assert said(seen, "alice turn 0") == said(seen, "alice turn 1") == 0
    assert said(seen, "alice turn 2") == 2
    say(copy, "alice in the copy", user)
    seen = last_step_request(copy)
    assert said(seen, "alice turn 0") == said(seen, "alice turn 1") == 0
    assert seen[-1] == "alice in the copy"
    assert Session.objects.filter(pk=copy.pk).exists()


@pytest.mark.parametrize("how", ["fork", "copy"])
def test_a_copy_made_right_after_a_rolling_hides_the_turns_it_rolled(
    chat, session, user, how, tmp_path
):
    """A QA finding: a fork or an import's copy made after a rolling, before the
    source's next turn, showed the rolled turns raw and in the summaries at once: no
    event of the source's log said yet what the rolling cut."""

    for n in range(3):
        say(session, f"alice turn {n}", user)
    roll(session, user, force=False)  # rolls turns 0-1; the log says nothing of it yet
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    copy = copied(session, user, how, before=history[-1]["info"]["id"], tmp_path=tmp_path)
    say(copy, "alice in the copy", user)
    seen = last_step_request(copy)
    assert said(seen, "alice turn 0") == said(seen, "alice turn 1") == 0
    system = request_for(copy)[1].system  # the block, in place of the rolled turns
    assert any("Summaries of the earlier dialogue" in text for text in system)
    # the kept turn, verbatim (a fork before turn 2's reply holds its prompt alone)
    assert said(seen, "alice turn 2") == (1 if how == "fork" else 2)
    assert seen[-1] == "alice in the copy"


def test_a_regenerated_answer_replaces_the_one_it_regenerates_in_memory(chat, session, user):
    """Known since the eighth QA round: the dialogue window was append-only, so a
    regenerated reply left both answers in memory once both were rolled (its slice,
    search, the digest). While the old answer is not rolled yet, the new one takes its
    place in the window."""
    from memory.models import DialogueMessage, MemoryMessage

    say(session, "first question", user)
    asked = say(session, "second question", user)
    replaced = selectors.message_after(
        tenant=session.tenant, session=session, message_id=asked["info"]["id"]
    )
    assert replaced is not None
    runtime.regenerate(session=session, wait=True, speaker=user)
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    again = history[-1]["info"]["id"]
    assert again != replaced["id"]
    core = memory_selectors.find_core(tenant=session.tenant, user=user, agent="build")
    window = list(
        DialogueMessage.objects.filter(core=core).order_by("seq").values_list("message_id", "seq")
    )
    assert [m for m, _ in window][-2:] == [asked["info"]["id"], again]
    assert replaced["id"] not in [m for m, _ in window]
    assert [s for _, s in window] == list(range(window[0][1], window[0][1] + len(window)))
    roll(session, user, keep=0)
    remembered = set(
        MemoryMessage.objects.filter(unit__core=core).values_list("message_id", flat=True)
    )
    assert again in remembered
    assert replaced["id"] not in remembered


@pytest.mark.parametrize("how", ["fork", "copy"])
def test_a_rolling_after_the_copy_hides_the_copied_turns_it_rolled(
    chat, session, user, how, tmp_path
):
    """Known (MEDIUM) since the copies' cut: a fork or a copy made *before* the source's
    turns were rolled showed them raw and in the block's summaries at once, since the
    core's rows name the source's messages, not the copies. The copy's messages keep
    their originals (``sessions.models.CopiedMessage``), and the copy's turn maps the
    source's cut onto them."""
    for n in range(3):
        say(session, f"alice turn {n}", user)
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    copy = copied(session, user, how, before=history[-1]["info"]["id"], tmp_path=tmp_path)
    roll(session, user, force=False)  # rolls the source's turns 0-1, after the copy
    say(copy, "alice in the copy", user)
    seen = last_step_request(copy)
    assert said(seen, "alice turn 0") == said(seen, "alice turn 1") == 0
    system = request_for(copy)[1].system  # the block, in place of the rolled turns
    assert any("Summaries of the earlier dialogue" in text for text in system)
    assert said(seen, "alice turn 2") == (1 if how == "fork" else 2)
    assert seen[-1] == "alice in the copy"
    block = block_in_force(copy)
    assert block is not None
    held = list(selectors.iter_history(tenant=copy.tenant, session_id=copy.pk))
    assert block["rolled_through"] == held[3]["info"]["id"]  # the copy of turn 1's reply


def test_a_fork_owned_by_another_member_is_cut_by_the_speakers_core(chat, session, user, carol):
    """The fork is carol's; alice, whose core rolled the source's turns after the fork,
    prompts in it: her block stands in place of the copies of the turns she rolled."""
    for n in range(3):
        say(session, f"alice turn {n}", user)
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    fork = services_fork(session, carol, before=history[-1]["info"]["id"])
    roll(session, user, force=False)
    say(fork, "alice in carol's fork", user)
    seen = last_step_request(fork)
    assert said(seen, "alice turn 0") == said(seen, "alice turn 1") == 0
    assert said(seen, "alice turn 2") == 1
    # carol has no memory: her turn shows every copied turn verbatim again
    say(fork, "carol asks", carol)
    assert said(last_step_request(fork), "alice turn 0") == 2


def test_a_fork_of_a_fork_maps_back_to_the_first_source(chat, session, user):
    for n in range(3):
        say(session, f"alice turn {n}", user)
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    first = services_fork(session, user, before=history[-1]["info"]["id"])
    held = list(selectors.iter_history(tenant=first.tenant, session_id=first.pk))
    second = services_fork(first, user, before=held[-1]["info"]["id"])  # turns 0-1
    roll(session, user, force=False)  # rolls the first source's turns 0-1
    say(second, "alice in the fork's fork", user)
    seen = last_step_request(second)
    assert said(seen, "alice turn 0") == said(seen, "alice turn 1") == 0
    assert seen == ["alice in the fork's fork"]


def services_fork(session: Any, user: Any, *, before: str) -> Any:
    from sessions import services

    return services.fork_session(session=session, user=user, before_message_id=before)


def test_only_a_copys_turn_reads_the_copies_origins(chat, session, user):
    """A session that copied nothing pays no statement for the copies' cut (its turn's
    count is pinned by ``test_turn_statements``); a fork pays one for its sources and
    two per source, and when its cut moves, two for its copied messages' origins and
    which of them the core rolled."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for n in range(3):
        say(session, f"alice turn {n}", user)
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    fork = services_fork(session, user, before=history[-1]["info"]["id"])
    roll(session, user, force=False)
    with CaptureQueriesContext(connection) as plain:
        [block] = memory_blocks(session, "build", user, current={})
    assert block["rolled_through"] == history[3]["info"]["id"]
    with CaptureQueriesContext(connection) as copied_:
        [block] = memory_blocks(fork, "build", user, current={})
    held = list(selectors.iter_history(tenant=fork.tenant, session_id=fork.pk))
    assert block["rolled_through"] == held[3]["info"]["id"]
    assert not any("copiedmessage" in q["sql"] for q in plain.captured_queries)
    assert sum("copiedmessage" in q["sql"] for q in copied_.captured_queries) == 3
    assert len(copied_.captured_queries) == len(plain.captured_queries) + 5


NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


def test_another_agents_turns_stay_in_view_whichever_core_rolled(chat, session, user, tmp_path):
    """A QA finding (HIGH): the cut hid every message up to it, whichever agent's. With
    turns of two agents in one chat (an ``@explore`` mention, a prompt naming another
    agent), each agent's rolled cut hid the other's turns, which no summary it was sent
    held; a turn no core had rolled at all was lost too."""
    for n in range(3):
        say(session, f"build {NUMBERS[n]}", user, "build")
    for n in range(3):
        say(session, f"explore {NUMBERS[n]}", user, "explore")
    for n in range(3, 6):
        say(session, f"build {NUMBERS[n]}", user, "build")
    roll(session, user, "build", force=False)  # 12 messages, keep 2: build zero to four
    roll(session, user, "explore", force=False)  # 6 messages, keep 2: explore zero, one

    say(session, "explore six", user, "explore")
    seen = last_step_request(session)
    assert said(seen, "explore zero") == said(seen, "explore one") == 0  # in its block
    assert said(seen, "explore two") == 2
    for n in range(6):  # the build turns, in no block this model is sent: all verbatim
        assert said(seen, f"build {NUMBERS[n]}") == 2, NUMBERS[n]
    block = block_in_force(session)
    assert block is not None
    assert block["rolled_kept"]

    say(session, "build six", user, "build")
    seen = last_step_request(session)
    for n in range(5):
        assert said(seen, f"build {NUMBERS[n]}") == 0, NUMBERS[n]  # in its block
    assert said(seen, "build five") == 2  # kept unrolled
    for n in range(3):
        assert said(seen, f"explore {NUMBERS[n]}") == 2, NUMBERS[n]
    assert said(seen, "explore six") == 2
    assert seen[-1] == "build six"
    assert last_step_roles(session)[0] == "user"
    # The next turns fold the same view as the log derives (FORGE_CONTEXT_VERIFY), and
    # a copy keeps it.
    say(session, "build seven", user, "build")
    assert said(last_step_request(session), "explore one") == 2
    copy = copied(session, user, "copy", before="", tmp_path=tmp_path)
    copied_block = block_in_force(copy)
    assert copied_block is not None
    assert copied_block["rolled_kept"]
    say(copy, "build in the copy", user, "build")
    seen = last_step_request(copy)
    assert said(seen, "explore one") == 2
    assert said(seen, "build one") == 0


def test_another_speakers_turns_between_rolled_ones_stay_in_view(chat, session, user, carol):
    say(session, "alice zero", user)
    say(session, "carol asks one", carol)
    say(session, "alice two", user)
    say(session, "alice three", user)
    roll(session, user, force=False)  # alice's 6 messages, keep 2: zero and two
    say(session, "alice four", user)
    seen = last_step_request(session)
    assert said(seen, "alice zero") == said(seen, "alice two") == 0
    assert said(seen, "carol asks one") == 2  # not alice's memory: not in her block
    assert said(seen, "alice three") == 2


@pytest.mark.parametrize("how", ["fork", "copy"])
def test_a_copy_made_after_a_regenerated_rolled_prompt_starts_with_that_prompt(
    chat, session, user, how, tmp_path
):
    """QA (LOW): the copy's cut, set when it was made, hid the prompt of the regenerated
    reply it showed, so its view began with an answer."""
    from forge.context import visible_history

    say(session, "first question", user)
    say(session, "second question", user)
    roll(session, user, keep=0)
    runtime.regenerate(session=session, wait=True, speaker=user)
    last = say(session, "third question", user)
    copy = copied(session, user, how, before=last["info"]["id"], tmp_path=tmp_path)
    seen = visible_history(copy)
    assert seen[0]["info"]["role"] == "user"
    assert seen[0]["parts"][0]["text"] == "second question"


def test_a_compaction_in_a_chat_of_two_agents_loses_no_turn_of_either(chat, session, user):
    """QA (HIGH): the compaction summarized the speaker's agent's view, whose cut hid
    its own rolled turns; its boundary then hid them from the other agent too, whose
    block does not hold them. A chat of several agents or speakers compacts its whole
    history since the last boundary."""
    agents = ["build", "explore"] * 3
    for n, agent in enumerate(agents):
        say(session, f"turn {NUMBERS[n]} for {agent}", user, agent)
    roll(session, user, "build", force=False)
    roll(session, user, "explore", force=False)
    say(session, "turn six for build", user, "build")
    runtime.compact(session=session, wait=True)
    say(session, "turn seven for explore", user, "explore")
    seen = last_step_request(session)  # the compaction's summary is one of its messages
    memory = list(request_for(session)[1].system)  # the block is system text
    for n, agent in enumerate(agents):
        text = f"turn {NUMBERS[n]} for {agent}"
        assert said(seen, text) or any(text in block for block in memory), text


def test_an_imported_copy_keeps_another_speakers_turns_in_view(
    chat, session, user, carol, tmp_path
):
    """QA (HIGH): an import's copy names the importing user as every message's speaker,
    so the cut of the copy took another member's turns for the importer's, hid them,
    and no summary the model was sent held them. A copied turn is the core's when the
    core rolled its original."""
    say(session, "alice zero", user)
    say(session, "carol asks one", carol)
    say(session, "alice two", user)
    say(session, "alice three", user)
    roll(session, user, force=False)  # alice's 6 messages, keep 2: zero and two
    copy = copied(session, user, "copy", before="", tmp_path=tmp_path)
    say(copy, "alice in the copy", user)
    seen = last_step_request(copy)
    assert said(seen, "alice zero") == said(seen, "alice two") == 0
    assert said(seen, "carol asks one") == 2
    assert said(seen, "alice three") == 2


def test_a_compaction_with_another_speaker_above_the_cut_loses_none_of_their_view(
    chat, session, user, carol
):
    """A review finding (HIGH): with another member's turns above the cut only (none
    kept below it), the compaction summarized the speaker's trimmed view, and the other
    member's model then saw alice's rolled turns nowhere."""
    for n in range(3):
        say(session, f"alice {NUMBERS[n]}", user)
    roll(session, user, force=False)
    say(session, "carol asks", carol)
    say(session, "alice again", user)
    runtime.compact(session=session, wait=True)
    say(session, "carol asks again", carol)
    seen = last_step_request(session)  # carol has no memory: the summary is all there is
    for n in range(3):
        assert said(seen, f"alice {NUMBERS[n]}"), NUMBERS[n]
