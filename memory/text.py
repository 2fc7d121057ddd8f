"""The one tokenizer of memory search, for documents and queries, on both engines.

Full text is matched on the tokens this module makes, never on what a database's
own parser makes of the text: SQLite's FTS5 table and PostgreSQL's ``tsvector``
hold exactly these tokens (``memory.search``), so both engines find the same
slices for the same query, and a query is cut exactly as the documents were.

How a text becomes tokens:

1. **Fold.** NFKC (full-width letters and digits become ASCII, half-width
   katakana full-width), case folded, and diacritics (every mark) removed from every
   letter outside the paired scripts below (``café`` → ``cafe``, ``Ångström`` →
   ``angstrom``, ``किताब`` → ``कतब``); letters that have no decomposition become
   their plain letters (``søren`` → ``soren``, ``æsir`` → ``aesir``, ``łódź`` →
   ``lodz``); kana and Hangul keep their marks (``が`` is not ``か``).
2. **Cut** into runs of letters and digits. A run of CJK characters (Han,
   hiragana, katakana, Hangul), or of a script written without spaces (Thai, Lao,
   Myanmar, Khmer: their marks kept), gives its **unigrams** and its overlapping
   **bigrams**, in documents and in queries: ``我昨天喝了咖啡`` holds ``咖啡``;
   a bigram, rarer, weighs more, and the unigrams let a paraphrase that shares
   characters but no pair still match (and a one-character query find a word
   inside a longer run).
   No dictionary segmentation: bigrams find any substring of two characters or
   more, in Chinese, Japanese and Korean alike.
3. **Other runs** are words: English stop words are dropped, the rest stemmed
   with the Snowball English stemmer (``deploying`` → ``deploy``), at most
   :data:`TOKEN_MAX` characters.

A query of only stop words, emoji or punctuation (CJK punctuation included)
has no tokens: the search answers ``[]``.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

import snowballstemmer

TOKEN_MAX = 64

# Scripts cut into bigrams: Hangul Jamo, CJK symbols that are letters (々〆〇),
# hiragana, katakana (and its extensions), Hangul compatibility Jamo, CJK
# extension A, the unified ideographs, Hangul syllables, compatibility
# ideographs, and the supplementary ideograph planes.
_CJK_RANGES = (
    "\u1100-\u11ff"
    "\u3005-\u3007"
    "\u3021-\u3029"
    "\u3031-\u3035"
    "\u3038-\u303c"
    "\u3041-\u309f"
    "\u30a0-\u30ff"
    "\u3130-\u318f"
    "\u31f0-\u31ff"
    "\u3400-\u4dbf"
    "\u4e00-\u9fff"
    "\ua960-\ua97f"
    "\uac00-\ud7af"
    "\ud7b0-\ud7ff"
    "\uf900-\ufaff"
    "\U00020000-\U0003134f"
)
# Scripts of South and South-East Asia written without spaces between words: Thai, Lao,
# Myanmar (and its extensions), Khmer (and its symbols), Tai Le, New Tai Lue, Buginese,
# Tai Tham, Balinese, Javanese, Tai Viet. Cut into pairs as CJK is, their vowel and tone
# marks kept (QA: a Thai mark, not a letter, cut the run it stood in, and a word was not
# found inside a sentence); their punctuation and symbols end a run (``_Fold``).
_NO_SPACE_RANGES = (
    "\u0e00-\u0e7f"
    "\u0e80-\u0eff"
    "\u1000-\u109f"
    "\u1780-\u17ff"
    "\u1950-\u197f"
    "\u1980-\u19df"
    "\u19e0-\u19ff"
    "\u1a00-\u1a1f"
    "\u1a20-\u1aaf"
    "\u1b00-\u1b7f"
    "\ua980-\ua9df"
    "\ua9e0-\ua9ff"
    "\uaa60-\uaa7f"
    "\uaa80-\uaadf"
)
_NO_SPACE_CHAR = re.compile(f"[{_NO_SPACE_RANGES}]")
_PAIRED_RANGES = _CJK_RANGES + _NO_SPACE_RANGES
_RUN = re.compile(rf"([{_PAIRED_RANGES}]+)|((?:(?![{_PAIRED_RANGES}])[^\W_])+)")
_CJK_CHAR = re.compile(rf"[{_PAIRED_RANGES}]")

# Latin letters with no Unicode decomposition, as their plain letters (QA: "Soren" did
# not find "Søren"); after case folding, so lower case only.
_PLAIN_LETTERS = str.maketrans(
    {
        "ø": "o",
        "ł": "l",
        "đ": "d",
        "ð": "d",
        "æ": "ae",
        "œ": "oe",
        "þ": "th",
        "ħ": "h",
        "\u0131": "i",  # dotless i
        "ŧ": "t",
        "ŀ": "l",
        "ƀ": "b",
        "ɨ": "i",
        "ʉ": "u",
    }
)

# English stop words (the Snowball list PostgreSQL's ``english`` configuration uses).
_STOP_WORDS = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what
    which who whom this that these those am is are was were be been being have has had
    having do does did doing a an the and but if or because as until while of at by for
    with about against between into through during before after above below to from up
    down in out on off over under again further then once here there when where why how
    all any both each few more most other some such no nor not only own same so than too
    very s t can will just don should now
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())


class _Fold(dict[int, str]):
    """``str.translate`` table: each character's folded form, computed once per character.

    Diacritics go from letters outside the CJK scripts only: decomposing kana would
    turn ``が`` into ``か`` plus a mark, and Hangul syllables into Jamo.
    """

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if _NO_SPACE_CHAR.match(char) and unicodedata.category(char)[0] in "PSZ":
            folded = " "  # (``။``, ``฿``: a query of them alone has no tokens)
        elif _CJK_CHAR.match(char):
            folded = char
        else:
            # Every mark goes, spacing ones too (a Devanagari vowel sign, not a letter,
            # cut the word it stood in into letters: QA).
            decomposed = unicodedata.normalize("NFKD", char)
            folded = "".join(c for c in decomposed if unicodedata.category(c)[0] != "M")
            folded = unicodedata.normalize("NFC", folded).translate(_PLAIN_LETTERS)
        self[code] = folded
        return folded


_FOLD = _Fold()


def fold(text: str) -> str:
    """NFKC, case folded, diacritics removed outside CJK (see the module's docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if text.isascii():
        return text
    return text.translate(_FOLD)


_stemmer_local = threading.local()


def _stemmer() -> snowballstemmer.stemmer:
    # A Snowball stemmer keeps state while it works: one per thread.
    stemmer = getattr(_stemmer_local, "stemmer", None)
    if stemmer is None:
        stemmer = _stemmer_local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


@lru_cache(maxsize=200_000)
def _word(word: str) -> str | None:
    """The token of a folded word (stemmed), or None for a stop word."""
    if word in STOP_WORDS:
        return None
    word = word[:TOKEN_MAX]
    if word.isdigit() or not word.isascii():
        return word
    return str(_stemmer().stemWord(word))


def _runs(folded: str) -> Iterator[tuple[bool, str, int]]:
    for match in _RUN.finditer(folded):
        cjk = match.group(1)
        if cjk is not None:
            yield True, cjk, match.start()
        else:
            yield False, match.group(2), match.start()


_ASCII_RUN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """The tokens of a document, in order: stemmed words, CJK unigrams and bigrams."""
    folded = fold(text)
    if folded.isascii():  # the common case, without the CJK alternation
        return [w for w in map(_word, _ASCII_RUN.findall(folded)) if w is not None]
    out: list[str] = []
    for cjk, other in _RUN.findall(folded):
        if cjk:
            out.extend(cjk)
            out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        else:
            word = _word(other)
            if word is not None:
                out.append(word)
    return out


def query_tokens(text: str) -> list[str]:
    """The tokens of a query, in order, repeated ones kept: stemmed words, and CJK
    unigrams and bigrams (as :func:`tokens`, a run's characters then its pairs)."""
    out: list[str] = []
    for cjk, run, _start in _runs(fold(text)):
        if cjk:
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            word = _word(run)
            if word is not None:
                out.append(word)
    return out


def query_words(text: str) -> list[tuple[str, str]]:
    """The words of a query that are not CJK nor stop words, in order, each as
    ``(folded word, its token)``: what query expansion looks up (by the word as
    written, before stemming)."""
    out: list[tuple[str, str]] = []
    for cjk, run, _start in _runs(fold(text)):
        if not cjk:
            word = _word(run)
            if word is not None:
                out.append((run, word))
    return out


_WORD = re.compile(r"[^\W_]+")


def without_words(text: str, drop: set[str] | frozenset[str]) -> str:
    """``text`` without its Latin-script words whose token is in ``drop`` (CJK runs and
    every other word kept, as written), white space collapsed: a query as the dense
    embedder should read it once the words that say nothing in this memory are out."""
    if not drop:
        return text

    def keep(match: re.Match[str]) -> str:
        word = match.group(0)
        if has_cjk(word):
            return word
        return " " if _word(fold(word)) in drop else word

    return " ".join(_WORD.sub(keep, text).split())


def word_token(word: str) -> str | None:
    """The token of one folded word (stemmed), or None for a stop word."""
    return _word(word)


@lru_cache(maxsize=65_536)
def _fold_char(char: str) -> str:
    return fold(char)


def _fold_mapped(text: str) -> tuple[str, list[int] | None]:
    """``text`` folded character by character, with the index in ``text`` of each folded
    character (close to :func:`fold`, which also composes across characters); None for
    the identity (ASCII text keeps its length)."""
    if text.isascii():
        return text.lower(), None
    parts: list[str] = []
    where: list[int] = []
    for i, char in enumerate(text):
        folded = _fold_char(char)
        parts.append(folded)
        where.extend([i] * len(folded))
    return "".join(parts), where


def locate(text: str, wanted: set[str] | frozenset[str]) -> tuple[int, int] | None:
    """Where in ``text`` (``start``, ``end``, raw character offsets) the first token in
    ``wanted`` is, or None. For snippets around a match."""
    if not wanted or not text:
        return None
    folded, where = _fold_mapped(text)

    def span(first: int, last: int) -> tuple[int, int]:
        return (first, last + 1) if where is None else (where[first], where[last] + 1)

    # A word or a pair first, wherever it is: a single character (a Thai mark, 的) is
    # everywhere, and a snippet around its first place missed the match (review).
    single = None
    for cjk, run, start in _runs(folded):
        if cjk:
            for i in range(len(run)):
                if i + 2 <= len(run) and run[i : i + 2] in wanted:
                    return span(start + i, start + i + 1)
                if single is None and run[i] in wanted:
                    single = span(start + i, start + i)
        elif _word(run) in wanted:
            return span(start, start + len(run) - 1)
    return single


def has_cjk(text: str) -> bool:
    return _CJK_CHAR.search(text) is not None
