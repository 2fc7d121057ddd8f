"""What a sentence carries: the kinds of fact, their points, and the cues that find them.

:func:`facts` gives the kinds of fact a sentence seems to carry (names, numbers, dates
and times, places, preferences, plans and decisions, facts about the speaker), or None
for filler; :func:`score` their points. English cues are set lookups over the
sentence's words; the Chinese ones a few regular expressions that start with a
literal, run only on text with CJK characters. Deterministic and linear in the text.
"""

from __future__ import annotations

import re
from itertools import pairwise

from .splitting import _CJK, _CJK_ENDS, _CLAUSE_MARKS, _CLOSERS, _HAN

DATE, NUMBER, PREFERENCE, PLAN, SELF, NAME, PLACE, PLACE_KIND = (
    "date",
    "number",
    "preference",
    "plan",
    "self",
    "name",
    "place",
    "place kind",
)
POINTS = {
    DATE: 3.0,
    NUMBER: 2.0,
    PREFERENCE: 3.0,
    PLAN: 2.0,
    SELF: 2.0,
    NAME: 2.0,  # and SECOND_NAME more for a second one
    PLACE: 2.0,
    PLACE_KIND: 1.0,
}
SECOND = "second name"  # a kind with no points of its own: a second name in the sentence
SECOND_NAME = 1.0
BASE_POINTS = 0.5  # any sentence that is not filler; more means it holds a fact
FIRST_POINTS = 1.0  # a fact in the first sentence of a message
RANK_DECAY = 0.25  # a message's second fact, its third …: room for other messages' best


def _kinds(kind: str, words: str) -> dict[str, str]:
    return dict.fromkeys(words.split(), kind)


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


def _pairs(kind: str, firsts: str, seconds: str) -> dict[tuple[str, str], str]:
    return {(a, b): kind for a in firsts.split() for b in seconds.split()}


_MONTHS = "january february march april june july august september october november december"
_DAYS = "monday tuesday wednesday thursday friday saturday sunday"
# English words that carry a fact alone.
_WORD_KIND: dict[str, str] = {
    **_kinds(
        DATE,
        f"{_MONTHS} {_DAYS} mondays tuesdays wednesdays thursdays fridays saturdays sundays "
        "today tonight tomorrow yesterday weekend weekends midnight noon o'clock ago birthday "
        "anniversary holiday holidays christmas easter",
    ),
    **_kinds(
        NUMBER,
        "two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty "
        "hundred thousand million billion dozen percent",
    ),
    **_kinds(
        PREFERENCE,
        "likes loves hates prefers enjoys dislikes adores favorite favourite favorites "
        "favourites allergic vegetarian vegan go-to",
    ),
    **_kinds(
        PLAN,
        "will won't shall gonna plan plans planned planning decide decided decides deciding "
        "decision let's book booked booking reserve reserved reservation schedule scheduled "
        "appointment meeting deadline remind reminder agreed promise promised intend intends "
        "register registered registration bought buy buying ordered trip flight travel "
        "traveling travelling interview wedding exam visit visited visiting",
    ),
    **_kinds(SELF, "named called"),
    **_kinds(
        PLACE_KIND,
        "street avenue road airport station hotel restaurant café cafe park museum university "
        "college school hospital clinic office city town village country beach lake mountain "
        "island",
    ),
}
_KIN = _set(
    "name wife husband partner girlfriend boyfriend fiance fiancee fiancé fiancée son daughter "
    "kid kids children baby mom mum mother dad father parents sister brother sibling siblings "
    "grandma grandmother grandpa grandfather aunt uncle cousin friend boss colleague coworker "
    "manager team dog cat pet job company address phone number email birthday home flat "
    "apartment house car doctor hobby favorite favourite"
)
# Two words that carry a fact together.
_PAIR_KIND: dict[tuple[str, str], str] = {
    **_pairs(
        DATE,
        "next last this coming",
        f"week month year spring summer autumn fall winter morning afternoon evening night {_DAYS}",
    ),
    **_pairs(DATE, "new", "year"),
    **_pairs(PREFERENCE, "can't cannot", "stand"),
    **_pairs(PREFERENCE, "i'd would", "rather"),
    **_pairs(PREFERENCE, "fan", "of"),
    **_pairs(PLAN, "going move moved moving", "to"),
    **_pairs(PLAN, "sign signed", "up"),
    **_pairs(SELF, "my our", " ".join(_KIN)),
    **_pairs(SELF, "i we", "work live grew study studied teach moved"),
    **_pairs(SELF, "i'm am", "a an from"),
    **_pairs(SELF, "was", "born"),
    **_pairs(SELF, "call", "me"),
}
_LIKE_VERBS = _set("like love hate prefer enjoy dislike adore loathe detest miss")
_SUBJECTS = _set("i we he she they i'd we'd")
_ADVERBS = _set(
    "really also absolutely just totally do don't does doesn't would never always still"
)
_MONTH_SHORT = _set("jan feb mar apr jun jul aug sep sept oct nov dec")
_DAY_SHORT = _set("mon tue wed thu fri sat sun")
_DATE_TAILS = _MONTH_SHORT | {"am", "pm", "may"}  # words that make a date after a number
# Words whose cue depends on a neighbour.
_NEEDS_NEIGHBOUR = _LIKE_VERBS | _DATE_TAILS
_BEFORE_MAY = _set("in on by since until early late")
_PLACE_PREPOSITIONS = _set(
    "in at to from near into via around toward towards visit visited visiting"
)
_YEAR_OR_TIME = re.compile(r"(?:19|20)\d\d|\d{1,2}(?:st|nd|rd|th|am|pm)")
_WORD = re.compile(r"\w")
_CLOCK = re.compile(r":\d\d")  # after a digit: 7:30 (a leading literal: a fast search)
_DIGIT_OR_MONEY = re.compile(r"[\d$\u20ac\u00a3\u00a5%]")

_FILLER_WORDS = _set(
    "ok okay k sure thanks thank thx ty hi hello hey yes yeah yep yup no nope cool great nice "
    "good awesome perfect alright all right got it sounds sound lol lmao bye goodbye see you "
    "please welcome you're np problem wow oh ah hmm um uh well fine indeed exactly absolutely "
    "of course cheers morning night evening me too same agree agreed true so very really much "
    "a lot that this is was that's it's amazing wonderful interesting totally definitely "
    "haha hahaha hehe congrats congratulations there to glad meet hear how are doing been have "
    "what's up talk soon later take care again back"
)
# Chinese filler, removed from a run of Han characters to see whether anything is left.
_FILLER_ZH = re.compile(
    "好的|好吧|好啊|好呀|最近怎么样|怎么样|我很好|很好|还好|还行|挺好|嗯+|哈+|呵+|嘿+|嘻+|谢谢你?|谢了|多谢|感谢|你好|您好|嗨|再见|拜拜"
    "|没问题|对的|对啊|是的|是啊|哦+|噢|喔|啊|呀|吧|呢|嘛|啦|收到|明白了?|了解|知道了|不客气"
    "|哇|太好了|太棒了|真棒|晚安|早安|早上好|不错|确实|没错|就是|可以|好|对|是|行|了|真|很"
)
# Japanese and Korean filler, removed the same way.
_FILLER_JA_KO = re.compile(
    "ありがとうございます|ありがとう|どうもありがとう|どうも|こんにちは|こんばんは"
    "|おはようございます|おはよう|おやすみなさい|おやすみ|さようなら|またね|よろしくお願いします"
    "|よろしく|そうですね|そうですか|そうだね|そうなんだ|そうなんですね|なるほど|いいですね|いいね"
    "|すごいですね|すごい|本当に|本当|ほんと|はい|うん|ええ|えっ|あっ|わあ|笑|です|ね|よ"
    "|감사합니다|고맙습니다|고마워요|고마워|안녕하세요|안녕|네|예|응|그렇군요|그래요|그래|맞아요"
    "|맞아|좋네요|대박|ㅋ+|ㅎ+"
)

# Chinese cues: each pattern starts with a literal (or a small set), so a search is fast.
_ZH_DIGITS = "零〇一二三四五六七八九十两"
_ZH_COUNTERS = "岁|块|元|人|位|本|张|瓶|杯|只|份|倍|公里|千米|米|公斤|斤|分钟|小时|周|年|天|层|号"
_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程苏"
    "魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦方白邹孟熊秦邱江尹薛段雷侯龙史陶黎贺顾毛郝龚邵万钱严武戴莫孔汤"
)
_CUES_ZH: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        DATE,
        re.compile(
            rf"[0-9{_ZH_DIGITS}]+\s*[年月日号]|[0-9]+\s*[点時时]"
            rf"|[{_ZH_DIGITS}]+点(?:半|钟|[{_ZH_DIGITS}]+分?)"
            r"|(?:星期|礼拜)[一二三四五六日天]|周[一二三四五六日末]"
            r"|[今明后昨前]天|今晚|明早|明晚|[上下这本]个?(?:周|星期|礼拜|月)|[今明去前]年"
            r"|早上|上午|中午|下午|晚上|凌晨|傍晚|半夜|生日|周年|纪念日|春节|国庆|中秋|元旦"
        ),
    ),
    (
        NUMBER,
        re.compile(
            rf"[二三四五六七八九十两百千万亿零〇][{_ZH_DIGITS}百千万亿]*(?:个|次|{_ZH_COUNTERS})"
            rf"|一[{_ZH_DIGITS}百千万亿]+(?:个|次|{_ZH_COUNTERS})|一(?:{_ZH_COUNTERS})"
        ),
    ),
    (
        PREFERENCE,
        re.compile(
            "喜欢|爱吃|爱喝|爱看|爱玩|最爱|我爱|热爱|讨厌|偏好|偏爱|宁愿|受不了|过敏|忌口|吃素|不吃|不喝"
        ),
    ),
    (
        PLAN,
        re.compile(
            "打算|计划|决定|准备|要去|将要|会去|约了|约好|预约|预订|预定|订了|订好|安排|提醒|截止"
            "|开会|会议|答应|报名|搬家|搬到|出差|旅行|旅游|航班|机票|车票|买了|下单|考试|面试|婚礼"
            "|参加"
        ),
    ),
    (
        NAME,  # there are no capitals: cues
        re.compile(
            rf"我叫|叫做|名叫|名字[是叫]|[小老阿][{_SURNAMES}]"
            r"|先生|女士|小姐|老师|医生|大夫|教授|经理|主任|师傅"
            r"|妈妈|爸爸|母亲|父亲|老婆|老公|妻子|丈夫|太太|儿子|女儿|哥哥|姐姐|弟弟|妹妹"
            r"|朋友|同事|老板|领导|室友|邻居|奶奶|爷爷|外婆|外公|同学"
        ),
    ),
    (SELF, re.compile("我是|我在|我住|我家|我们家")),
    (
        PLACE,
        re.compile(
            "机场|酒店|宾馆|餐厅|饭店|公园|大学|学院|医院|公司|广场|大厦|商场|博物馆|车站"
            "|北京|上海|广州|深圳|杭州|成都|南京|武汉|西安|重庆|天津|苏州|厦门|青岛|大连|长沙|昆明"
            "|香港|澳门|台北|东京|大阪|京都|首尔|纽约|伦敦|巴黎|柏林|悉尼|新加坡|曼谷"
            "|住在|来自|飞往|搬到"
            # a one-character place word that ends a word: 杭州市, 西湖区, 中山路 (not 市场, 区别)
            rf"|[市省县区镇村路街州岛湾寺](?:[^{_HAN}]|\Z|的|里|附近)"
        ),
    ),
)
# Japanese and Korean cues, run on text with kana or Hangul (the Chinese ones run too: a
# date written 3月5日, a place in kanji). Japanese marks names with honorifics and
# writes most foreign names in katakana, the nearest thing to a capital.
_KANA_OR_HANGUL = re.compile(r"[\u3040-\u30ff\uac00-\ud7af]")
_CUES_JA_KO: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        DATE,
        re.compile(
            "来週|先週|今週|来月|先月|今月|来年|去年|今年|明日|昨日|今日|今夜|週末|曜日|午前|午後"
            "|다음 주|지난주|이번 주|다음 달|지난달|내일|어제|오늘|주말|요일|오전|오후|생일"
        ),
    ),
    (
        NUMBER,
        re.compile(
            rf"[{_ZH_DIGITS}百千万]+(?:歳|才|人|つ|個|回|匹|冊|枚|本|円|時間|分)"
            r"|(?:한|두|세|네|다섯|여섯|일곱|여덟|아홉|열) ?(?:살|명|개|번|마리|권|시간)"
        ),
    ),
    (PREFERENCE, re.compile("好き|嫌い|苦手|好物|좋아|싫어|싫다")),
    (
        PLAN,
        re.compile(
            "予定|つもり|予約|決めた|決めま|約束|引っ越|出張|試験|面接|結婚式|申し込"
            "|예정|계획|예약|약속|이사|출장|시험|면접|결혼식|거예요|할 거|갈 거"
        ),
    ),
    (
        NAME,
        re.compile(
            "名前|と申します|といいます|と言います|さん|ちゃん|くん|先生|友達|彼氏|彼女|息子|娘"
            "|[\u30a1-\u30fa][\u30a1-\u30fa\u30fc]+"  # a katakana word: ミケ, ジョン
            "|이름|씨|엄마|아빠|친구|언니|오빠|누나|남편|아내|아들|딸|선생님"
        ),
    ),
    (SELF, re.compile("私は|僕は|俺は|わたしは|私の|僕の|住んで|저는|나는|제가|내가|살아|살고")),
    (
        PLACE,
        re.compile(
            "駅|空港|ホテル|病院|会社|東京|大阪|京都|名古屋|福岡|札幌|横浜|神戸|沖縄"
            rf"|[都道府県](?:[^{_HAN}]|\Z)"
            "|서울|부산|제주|인천|대구|공항|병원|대학교|회사|호텔"
        ),
    ),
)
# A bracketed number that numbers or refers, and tells no fact: (2), [1], 【3】, (写真1).
_ENUMERATOR = re.compile(r"[(\[\uff08\u3010][^\d\s)\]\uff09\u3011]{0,4}\d{1,2}\s*[)\]\uff09\u3011]")
_BRACKETS = re.compile(r"[(\[\uff08\u3010]")
# Capitalised words (Latin capitals, accented ones included).
_NOT_NAMES = frozenset(
    {"I", "OK", "Ok", "A"}
    | {f"I{quote}{end}" for quote in "'\u2019" for end in ("m", "ll", "ve", "d")}
    | {word.capitalize() for word in f"{_MONTHS} {_DAYS}".split()}
)
# Cut off the ends of a word: punctuation, quotes, brackets (Latin and full-width).
_PUNCTUATION = (
    _CLOSERS + _CJK_ENDS + _CLAUSE_MARKS + ".!?\u201c\u2018([{<>}\u00ab\u00bb\u2026*_~`#|/\\-"
    "\u2013\u2014\u300c\u300e\uff08\u3010\u3011"
)
# Punctuation to white space (not the apostrophe and the hyphen inside words: "don't",
# "go-to"); the typographic apostrophe to the plain one.
_TO_SPACE = str.maketrans(
    {char: " " for char in _PUNCTUATION if char not in "'-"} | {"\u2019": "'"}
)
_ASCII_MARKS = "".join(c for c in _PUNCTUATION if c.isascii() and c not in "'-")
_ASCII_TO_SPACE = bytes.maketrans(_ASCII_MARKS.encode(), b" " * len(_ASCII_MARKS))
_CUE_WORDS = frozenset(_WORD_KIND)
_PAIR_KEYS = frozenset(_PAIR_KIND)
_PAIR_FIRSTS = frozenset(first for first, _ in _PAIR_KIND)
# A greeting (or thanks, or assent) and the name of whom it greets, opening a sentence.
_GREETING_NAME = re.compile(
    r"(?i:(?:hey|hi|hiya|hello|thanks|thank you|thx|bye|goodbye|see you|dear|congrats"
    r"|congratulations|wow|oh|yes|yeah|yep|ok|okay|sure|good (?:morning|night|evening)"
    r"|morning|night)[\s,!.]+)+[A-ZÀ-ÖØ-Þ][a-zß-ÿ][\w'\u2019-]*(?:\s+[A-ZÀ-ÖØ-Þ][a-zß-ÿ][\w'\u2019-]*)?"
)
_CAPITAL_AFTER_HAN = re.compile(rf"[{_HAN}][A-ZÀ-ÖØ-Þ]")


def _dated(word: str, previous: str) -> bool:
    """``2019``, ``21st``, ``7pm``, ``Fri 3``, ``3 Dec``, ``5 pm``, ``in May``: a date or a time
    that the word lists miss (month abbreviations and ``may`` need a number or a cue)."""
    if word[0].isdigit():
        return bool(
            _YEAR_OR_TIME.fullmatch(word) or previous in _MONTH_SHORT or previous in _DAY_SHORT
        )
    if word in _DATE_TAILS:
        return previous[:1].isdigit() or (word == "may" and previous in _BEFORE_MAY)
    return False


def score(sentence: str) -> float:
    """The points of the facts ``sentence`` carries (see :func:`facts`): 0 for filler,
    ``BASE_POINTS`` for a sentence that holds no fact, more for one that does."""
    found = facts(sentence)
    if found is None:
        return 0.0
    points = BASE_POINTS + sum(POINTS[kind] for kind in found if kind in POINTS)
    return points + (SECOND_NAME if SECOND in found else 0.0)


def without_vocatives(sentence: str) -> str:
    """``sentence`` without the names it only addresses: ``Hey Mel!``, ``Thanks, Caroline!``,
    ``That's cool, Caroline!`` (a name is a fact; calling someone by it is not). A last
    ``, Name`` after a capitalised word stays: ``in Austin, Texas``."""
    greeting = _GREETING_NAME.match(sentence)
    if greeting:
        sentence = sentence[greeting.end() :]
    head, comma, tail = sentence.rpartition(",")
    before = head.split()[-1:]
    if comma and before:
        names = tail.strip().rstrip("!.?\u2026 ").split()
        if (
            0 < len(names) <= 2
            and all(word[0].isupper() and word.isalpha() for word in names)
            and not before[0][0].isupper()
        ):
            sentence = head + tail[len(tail.rstrip("!.?\u2026 ")) :]
    return sentence


def facts(sentence: str) -> set[str] | None:
    """The kinds of fact ``sentence`` seems to carry, or None when it is only filler
    (greetings, thanks, assent, laughter, emoji, punctuation).

    Its words (punctuation made white space) are looked up in sets, most of it in C: the
    cue words, the cue pairs of neighbours, a capital not on the first word; the few
    cues that need a neighbour (``I really like``, ``3 May``, ``in May``, ``5 pm``) only
    when a word that needs one is there; then, for text with Han characters, the
    Chinese cues.
    """
    sentence = without_vocatives(sentence)
    if sentence.isascii():  # bytes.translate is many times faster than str.translate
        spaced = sentence.encode("ascii").translate(_ASCII_TO_SPACE).decode("ascii")
    else:
        spaced = sentence.translate(_TO_SPACE)
    words = f"{spaced.lower()} ".replace("'s ", " ").split()
    if _only_filler(words):
        return None
    digits = _DIGIT_OR_MONEY.search(
        _ENUMERATOR.sub(" ", sentence) if _BRACKETS.search(sentence) else sentence
    )
    hits = _CUE_WORDS.intersection(words)
    found = {_WORD_KIND[word] for word in hits} if hits else set()
    if not _PAIR_FIRSTS.isdisjoint(words):
        found.update(_PAIR_KIND[pair] for pair in _PAIR_KEYS.intersection(pairwise(words)))
    if "'ll" in spaced:
        found.add(PLAN)
    if digits or not _NEEDS_NEIGHBOUR.isdisjoint(words):
        found.update(_neighbour_cues(words, digits=digits is not None))
    if digits:
        found.add(NUMBER)
        clock = _CLOCK.search(sentence)
        if clock and clock.start() > 0 and sentence[clock.start() - 1].isdigit():
            found.add(DATE)
    names: list[int] = []
    if not spaced[1:].islower():  # a capital after the first letter (or no Latin letter)
        cased = spaced.split()
        names = [
            at
            for at in range(1, min(len(cased), len(words)))
            if cased[at][0].isupper() and cased[at] not in _NOT_NAMES
        ]
    if names:
        found.add(NAME)
        if len(names) > 1:
            found.add(SECOND)
        for at in names:
            before = words[max(0, at - 2) : at]
            if before[-1] in _PLACE_PREPOSITIONS or (
                before[-1] == "the" and before[0] in _PLACE_PREPOSITIONS
            ):
                found.add(PLACE)
                break
    if not sentence.isascii() and _CJK.search(sentence):
        if _CAPITAL_AFTER_HAN.search(sentence):
            found.add(NAME)  # 我住在Berlin: a capital right after a Han character
        for kind, pattern in _CUES_ZH:
            if kind not in found and pattern.search(sentence):
                found.add(kind)
        if _KANA_OR_HANGUL.search(sentence):
            for kind, pattern in _CUES_JA_KO:
                if kind not in found and pattern.search(sentence):
                    found.add(kind)
    return found


def _only_filler(words: list[str]) -> bool:
    """No word but filler (or none with a letter or digit: punctuation, emoji)."""
    for word in words:
        if word in _FILLER_WORDS:
            continue
        if word.isascii():
            if _WORD.search(word):
                return False
        elif _WORD.search(_FILLER_JA_KO.sub("", _FILLER_ZH.sub("", word))):
            return False
    return True


def _neighbour_cues(words: list[str], *, digits: bool) -> set[str]:
    """The cues of words that need a neighbour: a like-verb its subject (``I really
    like``), a number or a month abbreviation the other (``3 May``, ``Fri 3``, ``5 pm``)."""
    found: set[str] = set()
    if not _LIKE_VERBS.isdisjoint(words):
        for at, word in enumerate(words):
            if word in _LIKE_VERBS:
                back = at - 1
                while back >= 0 and words[back] in _ADVERBS:
                    back -= 1
                if back >= 0 and words[back] in _SUBJECTS:
                    found.add(PREFERENCE)
                    break
    if digits or not _DATE_TAILS.isdisjoint(words):
        previous = ""
        for word in words:
            if (word[0].isdigit() or word in _DATE_TAILS) and _dated(word, previous):
                found.add(DATE)
                break
            previous = word
    return found
