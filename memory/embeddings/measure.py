"""How well and how fast an embedder works, in English and Chinese.

``python -m memory.embeddings.measure [--settings]`` prints three tables (Markdown):

1. cosine similarities of a few paraphrase pairs against an unrelated sentence,
   English, Chinese, and English to Chinese;
2. paraphrase retrieval: for each of 20 English and 20 Chinese sentences, the rank
   of its paraphrase among the 20 candidates of its language (recall@1, MRR), and
   English sentences finding their Chinese translation;
3. speed: load time, texts per second over 2,000 short texts (one ``embed_texts``
   call, in the embedder's batches), one query's latency (median of 200).

By default it measures the offline embedder. ``--settings`` measures the embedder
the Django settings choose (``DJANGO_SETTINGS_MODULE``; e.g. an OpenAI-compatible
server by ``FORGE_EMBEDDING_MODEL``). Timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from .base import Embedder
from .registry import embed_texts

# (language, anchor, paraphrase, unrelated)
PAIRS = [
    (
        "en",
        "I drank coffee yesterday morning",
        "Yesterday I had a cup of coffee before work",
        "The train to Berlin was cancelled",
    ),
    (
        "en",
        "My daughter starts school in September",
        "Our kid begins her first school year this autumn",
        "The database migration failed on PostgreSQL",
    ),
    (
        "en",
        "We decided to use PostgreSQL for the backend",
        "The team picked Postgres as the server database",
        "She likes painting landscapes in watercolor",
    ),
    (
        "en",
        "I am allergic to peanuts",
        "Peanuts give me an allergic reaction",
        "The stock market closed higher today",
    ),
    ("zh", "我昨天早上喝了咖啡", "昨天上班前我喝了一杯咖啡", "去柏林的火车取消了"),
    ("zh", "我女儿九月开始上学", "我们的孩子今年秋天开始上小学", "数据库迁移在服务器上失败了"),
    (
        "zh",
        "我们决定后端使用PostgreSQL",
        "团队选择了Postgres作为服务器数据库",
        "她喜欢用水彩画风景",
    ),
    ("zh", "我对花生过敏", "吃花生会让我过敏", "今天股市收盘上涨"),
    ("en→zh", "I am allergic to peanuts", "我对花生过敏", "今天股市收盘上涨"),
    ("en→zh", "I drank coffee yesterday morning", "我昨天早上喝了咖啡", "去柏林的火车取消了"),
]

# Index i of EN and ZH say the same thing.
EN = [
    ("I drank coffee yesterday morning", "Yesterday I had a cup of coffee before work"),
    ("My daughter starts school in September", "Our kid begins her first school year this autumn"),
    (
        "We decided to use PostgreSQL for the backend",
        "The team picked Postgres as the server database",
    ),
    ("I am allergic to peanuts", "Peanuts give me an allergic reaction"),
    ("My flight to Tokyo leaves on Friday", "I'm flying to Japan at the end of the week"),
    ("The dog chewed my new shoes", "My puppy destroyed the sneakers I just bought"),
    ("I moved to a new apartment last month", "A few weeks ago I relocated to another flat"),
    (
        "My car broke down on the highway",
        "The vehicle stopped working while I was driving on the motorway",
    ),
    ("I started learning to play the guitar", "I've begun taking guitar lessons"),
    ("My sister is getting married in June", "My sibling's wedding is this summer"),
    ("I lost my wallet at the train station", "My wallet went missing at the railway station"),
    (
        "The meeting was moved to Thursday afternoon",
        "We rescheduled the meeting for Thursday after lunch",
    ),
    ("I prefer tea over coffee", "I like tea more than coffee"),
    ("My laptop battery dies after an hour", "The notebook runs out of power very quickly"),
    ("We adopted a cat from the shelter", "We took home a kitten from the animal rescue"),
    ("I have a dentist appointment tomorrow", "Tomorrow I'm seeing the dentist"),
    (
        "The server crashed because the disk was full",
        "No space left on the disk took the machine down",
    ),
    ("I run five kilometers every morning", "Each day I go jogging for 5 km before breakfast"),
    ("My grandmother turns ninety next week", "Grandma's 90th birthday is coming up soon"),
    ("I'm vegetarian and don't eat meat", "I follow a meat-free diet"),
]
ZH = [
    ("我昨天早上喝了咖啡", "昨天上班前我喝了一杯咖啡"),
    ("我女儿九月开始上学", "我们的孩子今年秋天开始上小学"),
    ("我们决定后端使用PostgreSQL", "团队选择了Postgres作为服务器数据库"),
    ("我对花生过敏", "吃花生会让我过敏"),
    ("我周五飞往东京", "这周末我要坐飞机去日本"),
    ("狗把我的新鞋咬坏了", "我的小狗把我刚买的运动鞋弄坏了"),
    ("我上个月搬进了新公寓", "几周前我搬到了另一套房子"),
    ("我的车在高速公路上抛锚了", "开车在高速上的时候汽车坏了"),
    ("我开始学弹吉他了", "我报名参加了吉他课"),
    ("我姐姐六月结婚", "我姐姐的婚礼在今年夏天"),
    ("我在火车站丢了钱包", "我的钱包在火车站不见了"),
    ("会议改到了星期四下午", "我们把会议改期到周四午饭后"),
    ("比起咖啡我更喜欢喝茶", "我喜欢茶胜过咖啡"),
    ("我的笔记本电脑电池一个小时就没电了", "这台电脑的电量用得很快"),
    ("我们从收容所领养了一只猫", "我们从动物救助站带回了一只小猫"),
    ("我明天要去看牙医", "明天我有一个牙科预约"),
    ("服务器因为磁盘满了而崩溃", "硬盘空间不足导致机器宕机"),
    ("我每天早上跑五公里", "我每天早饭前慢跑五千米"),
    ("我奶奶下周就九十岁了", "奶奶的九十大寿快到了"),
    ("我吃素，不吃肉", "我是素食者"),  # noqa: RUF001  (a Chinese comma)
]


def ranks(embedder: Embedder, queries: Sequence[str], candidates: Sequence[str]) -> list[int]:
    """The rank (1 = best) of candidate i for query i."""
    scores = embed_texts(queries, embedder=embedder) @ embed_texts(candidates, embedder=embedder).T
    return [int((scores[i] > scores[i, i]).sum()) + 1 for i in range(len(queries))]


def report(embedder: Embedder) -> str:
    lines: list[str] = []
    started = time.perf_counter()
    embed_texts(["warm up"], embedder=embedder)
    load = time.perf_counter() - started
    lines += [f"## {embedder.name} ({embedder.dim} dimensions)", ""]
    lines += ["| language | paraphrase | unrelated | margin |", "|---|---:|---:|---:|"]
    for lang, anchor, paraphrase, unrelated in PAIRS:
        a, p, u = embed_texts([anchor, paraphrase, unrelated], embedder=embedder)
        lines.append(f"| {lang} | {a @ p:.3f} | {a @ u:.3f} | {a @ p - a @ u:+.3f} |")
    lines += ["", "| paraphrase retrieval | recall@1 | MRR |", "|---|---:|---:|"]
    cases = [
        ("English (20 pairs)", [a for a, _ in EN], [b for _, b in EN]),
        ("Chinese (20 pairs)", [a for a, _ in ZH], [b for _, b in ZH]),
        ("English → Chinese translation", [a for a, _ in EN], [a for a, _ in ZH]),
    ]
    for label, queries, candidates in cases:
        r = ranks(embedder, queries, candidates)
        recall = sum(x == 1 for x in r) / len(r)
        lines.append(f"| {label} | {recall:.2f} | {statistics.fmean(1 / x for x in r):.2f} |")
    texts = [f"{text} ({n})" for n in range(50) for _, text in (*EN, *ZH)]  # 2,000
    started = time.perf_counter()
    embed_texts(texts, embedder=embedder)
    rate = len(texts) / (time.perf_counter() - started)
    latencies = []
    for i in range(200):
        started = time.perf_counter()
        embed_texts([EN[i % len(EN)][1]], embedder=embedder)
        latencies.append(time.perf_counter() - started)
    lines += ["", "| speed | |", "|---|---:|"]
    lines.append(f"| load and first text | {load * 1000:,.0f} ms |")
    lines.append(f"| 2,000 short texts (EN and ZH) | {rate:,.0f} texts/s |")
    lines.append(f"| one query (median of 200) | {statistics.median(latencies) * 1000:.2f} ms |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--settings",
        action="store_true",
        help="measure the embedder the Django settings choose (DJANGO_SETTINGS_MODULE)",
    )
    args = parser.parse_args(argv)
    embedder: Embedder
    if args.settings:
        import django

        django.setup()
        from .registry import get_embedder

        embedder = get_embedder()
    else:
        from .offline import OfflineEmbedder

        embedder = OfflineEmbedder()
    print(report(embedder))


if __name__ == "__main__":
    main()
