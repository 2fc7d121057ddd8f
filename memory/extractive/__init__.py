"""The offline summarizer: the sentences of a dialogue that carry facts, in dialogue order.

``extractive(messages)`` is the ``MessageSummarizer`` used when no model writes
the summary (``memory.summarizers``'s default; ``forge.runtime.small_model``
falls back to it for offline models). The summary is what the search index
reads and what the ``dialog_history`` block shows in place of the rolled
turns, so it keeps what a later question will ask about — names, numbers,
dates and times, places, preferences, plans and decisions — rather than the
first sentence of each message.

How, and the invariants:

* Only ``user`` and ``assistant`` messages are read. Each is cut into
  sentences (``.!?`` followed by white space; the ideographic full stop and the
  full-width exclamation and question marks with or without it; line breaks); a
  sentence longer than :data:`SENTENCE_CHARS` is cut at its clause marks (Latin
  and full-width commas, semicolons and colons, the ideographic comma), and a
  clause still longer into pieces of that size.
* Each sentence gets points for the kinds of fact it seems to carry, by cues of
  English and Chinese: names (capitalised words not at the start of a
  sentence), numbers (digits, number words, ``三个``), dates and times
  (``3月5日``, ``星期三``, ``next Friday``, ``2019``, ``7:30 pm``), places
  (``in``/``at``/``to`` + a capitalised word, ``…市``/``…路``/``…机场``, a few
  cities), preferences (``I like/love/hate/prefer``, ``favourite``,
  ``我喜欢/讨厌/最喜欢``), plans and decisions (``will``, ``decided``, ``booked``,
  ``打算/决定/预订``) and facts about the speaker (``my sister``, ``I live``,
  ``我叫``). Chinese names have no capitals: they are found by cues (``我叫…``,
  ``张老师``, ``小王``, ``我妈妈``). Japanese and Korean have cues of their own
  (``名前``, ``さん``, a katakana word, ``予定``, ``好き``; ``이름``, ``저는``, ``서울``).
  A bracketed number that only numbers or refers (``(2)``, ``[1]``, ``【3】``) is no
  fact. Greetings and filler (``ok``, ``thanks``, ``哈哈``, ``はい``, ``감사합니다``,
  emoji) score nothing.
* Sentences with a fact go first, best first (a message's second and later
  facts a little behind other messages' best; earlier first on a tie); then, of
  each message that holds no fact, its first sentence that is not filler, oldest
  first; never filler or another sentence with nothing in it. They are taken while the summary stays
  within :data:`SUMMARY_CHARS`, then written back in dialogue order, a line per
  message, ``role: sentence sentence``, with `` … `` where sentences of one
  message were left out between two kept ones. A dialogue of nothing but filler
  gives its first sentences.
* A sentence is copied, never rewritten or translated: the summary is in the
  language of the dialogue.
* Deterministic (no randomness, no model, no clock) and linear in the text:
  the English cues are set lookups over the sentence's words, the Chinese ones a
  few regular expressions that start with a literal, run only on CJK text.

The package, a module for each step (everything other code uses is re-exported here):

* :mod:`.splitting` — cutting text into sentences (:func:`sentences`), and the marks
  and scripts (end marks, closers, clause marks, CJK) the other steps share;
* :mod:`.scoring` — what a sentence carries: the kinds of fact, their points and the
  English and Chinese cues (:func:`facts`, :func:`score`, :func:`without_vocatives`);
* :mod:`.summary` — choosing sentences within the budget and writing them back in
  dialogue order (:func:`extractive`).
"""

from .scoring import facts, score, without_vocatives
from .splitting import SENTENCE_CHARS, sentences
from .summary import SPOKEN, SUMMARY_CHARS, extractive

__all__ = [
    "SENTENCE_CHARS",
    "SPOKEN",
    "SUMMARY_CHARS",
    "extractive",
    "facts",
    "score",
    "sentences",
    "without_vocatives",
]
