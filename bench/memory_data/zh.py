# ruff: noqa: RUF001, RUF002, RUF003 (Chinese text: its full-width punctuation is meant)
"""中文：人名、词表、事实类型、闲聊。只有数据（见 ``shapes.py``）。

Written Chinese has no spaces between words; nothing here adds any.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from .shapes import FactType, Question, Step

LATIN = False

SPEAKERS = [
    ("李娜", "f"),
    ("王强", "m"),
    ("陈静", "f"),
    ("张伟", "m"),
    ("刘洋", "f"),
    ("赵敏", "f"),
    ("孙磊", "m"),
    ("周婷", "f"),
    ("吴昊", "m"),
    ("郑爽", "f"),
    ("黄蕾", "f"),
    ("徐峰", "m"),
]

PEOPLE = [
    "小雨", "阿杰", "晓琳", "子涵", "浩然", "思思", "明轩", "佳怡", "志强", "雨桐", "老周",
    "阿梅", "俊杰", "欣怡", "大鹏", "婉婷", "一凡", "诗涵",
]  # fmt: skip

_DIGITS = "零一二三四五六七八九"


def num(n: int) -> str:
    """Chinese numerals for 0-99 (两 for 2, as before a measure word)."""
    if n == 2:
        return "两"
    if n < 10:
        return _DIGITS[n]
    tens, ones = divmod(n, 10)
    head = "十" if tens == 1 else _DIGITS[tens] + "十"
    return head + (_DIGITS[ones] if ones else "")


def price(n: int) -> str:
    return f"{num(n) if n != 2 else '两'}万{'五' if n % 2 else ''}"


def duration(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    return f"{hours}小时{rest}分钟" if hours else f"{rest}分钟"


def month(i: int) -> str:
    return f"{i + 1}月"


def format_date(day: datetime) -> str:
    return f"{day.year}年{day.month}月{day.day}日"


WHEN = {
    "yesterday": "昨天",
    "this_morning": "今天早上",
    "last_weekend": "上周末",
    "last_week": "上周",
    "few_days": "前几天",
    "last_month": "上个月",
}


def when_answer(code: str, day: datetime) -> str:
    if code == "yesterday":
        return format_date(day - timedelta(days=1))
    if code == "this_morning":
        return format_date(day)
    if code == "last_month":
        first = day.replace(day=1) - timedelta(days=1)
        return f"{first.year}年{first.month}月"
    span = {"last_weekend": "之前的那个周末", "last_week": "的前一周", "few_days": "前几天"}
    return format_date(day) + span[code]


def pronouns(gender: str) -> dict[str, str]:
    return {"subj": "", "obj": "", "pos": "", "elder": ""}


VOCAB: dict[str, list[str] | list[dict[str, str]]] = {
    "place": [
        "成都", "大理", "厦门", "青岛", "西安", "桂林", "丽江", "三亚", "哈尔滨", "苏州", "重庆",
        "京都", "清迈", "张家界", "敦煌", "稻城",
    ],
    "relative": ["妹妹", "哥哥", "姐姐", "弟弟", "表姐", "妈妈", "爸爸", "闺蜜"],
    "sibling": ["妹妹", "哥哥", "姐姐", "弟弟", "表姐", "表哥"],
    "trip_activity": [
        "每天都在吃火锅",
        "爬山看了日出",
        "逛了好几个博物馆",
        "骑车绕着古城转了一圈",
        "在海边发了好几天呆",
        "天天逛夜市吃小吃",
        "去看了雪山",
        "泡了好几次温泉",
    ],
    "pet": [
        {"species": "狗", "breed": "柯基"},
        {"species": "狗", "breed": "金毛"},
        {"species": "狗", "breed": "柴犬"},
        {"species": "狗", "breed": "边牧"},
        {"species": "狗", "breed": "腊肠犬"},
        {"species": "猫", "breed": "布偶猫"},
        {"species": "猫", "breed": "英短"},
        {"species": "猫", "breed": "暹罗猫"},
        {"species": "兔子", "breed": "垂耳兔"},
    ],
    "pet_name": ["豆豆", "团子", "可乐", "年糕", "布丁", "元宝", "馒头", "花卷", "芝麻", "土豆"],
    "role": [
        "产品经理", "数据分析师", "儿科护士", "建筑师", "小学语文老师", "会计", "平面设计师",
        "软件工程师", "康复治疗师", "厨师长",
    ],
    "company": [
        "星河科技", "蓝鲸物流", "青禾教育", "远山设计", "华晟银行", "云杉医疗", "北辰汽车",
        "知味餐饮",
    ],
    "hobby": ["陶艺", "拉丁舞", "攀岩", "水彩画", "书法", "瑜伽", "游泳", "插花", "烘焙", "摄影"],
    "weekday": ["周一", "周二", "周三", "周四", "周五", "周六", "周日"],
    "race": [
        {"race": "半程马拉松", "time": "1小时58分钟"},
        {"race": "半程马拉松", "time": "2小时07分钟"},
        {"race": "十公里跑", "time": "52分钟"},
        {"race": "十公里跑", "time": "47分钟"},
        {"race": "全程马拉松", "time": "4小时21分钟"},
        {"race": "越野赛", "time": "3小时10分钟"},
    ],
    "dish": [
        "红烧肉", "麻婆豆腐", "小龙虾", "酸菜鱼", "牛肉面", "煎饼果子", "螺蛳粉", "糖醋排骨",
        "饺子", "火锅", "兰州拉面", "北京烤鸭",
    ],
    "disliked_food": ["香菜", "榴莲", "苦瓜", "折耳根", "臭豆腐", "肥肉", "芹菜", "茄子"],
    "book": [
        "《盐的果园》", "《安静河流的地图》", "《开往远方的夜车》", "《玻璃灯塔》", "《雪的重量》",
        "《山谷来信》", "《纸月亮》",
    ],
    "author": ["林晚秋", "周子墨", "沈若溪", "顾一鸣", "叶南星", "程砚"],
    "car": ["比亚迪秦", "丰田卡罗拉", "大众朗逸", "本田思域", "特斯拉Model3", "马自达3", "理想L6"],
    "body_part": ["脚踝", "手腕", "膝盖", "肩膀", "腰"],
    "sport": ["羽毛球", "篮球", "足球", "网球", "乒乓球", "排球"],
    "volunteer_place": [
        "流浪动物救助站", "社区图书馆", "食物银行", "儿童医院", "养老院", "社区菜园",
    ],
    "city": ["深圳", "杭州", "南京", "长沙", "武汉", "昆明", "天津", "合肥"],
    "instrument": ["吉他", "尤克里里", "钢琴", "古筝", "大提琴", "小提琴", "架子鼓"],
    "genre": ["民谣", "爵士", "古典", "流行", "摇滚"],
    "gift": [
        "黑胶唱片机", "天文望远镜", "真皮笔记本", "咖啡机", "登山鞋", "水彩颜料套装", "智能手表",
        "拍立得相机",
    ],
    "band": ["五月天", "陈奕迅", "新裤子", "落日飞车", "万能青年旅店", "周杰伦", "草东没有派对"],
    "venue": ["工人体育场", "奔驰文化中心", "一家很小的livehouse", "体育中心", "湖边的音乐节现场"],
    "plant": ["番茄", "向日葵", "月季", "薄荷", "草莓", "薰衣草"],
    "friend_activity": [
        "去湖上划了皮艇",
        "一起上了一节吹玻璃课",
        "去听了一场爵士乐演出",
        "包了一大桌饺子",
        "玩了密室逃脱",
        "开车沿着海边兜风",
    ],
    "baby": [
        {"baby": "小满", "babykind": "女儿"},
        {"baby": "糖糖", "babykind": "女儿"},
        {"baby": "朵朵", "babykind": "女儿"},
        {"baby": "乐乐", "babykind": "儿子"},
        {"baby": "安安", "babykind": "儿子"},
        {"baby": "一一", "babykind": "儿子"},
    ],
}  # fmt: skip

OWNER: Final = "owner"
PARTNER: Final = "partner"

FACTS: dict[str, FactType] = {
    "trip": FactType(
        slots={
            "place": "vocab:place",
            "rel": "vocab:relative",
            "days": "int:3:9",
            "activity": "vocab:trip_activity",
            "when": "when:last_week|last_weekend|few_days|last_month",
        },
        script=(
            Step(
                OWNER,
                (
                    "我们{when}刚从{place}回来！我和{rel}在那边待了{days}天，{activity}。",
                    "{when}有点失联，不好意思，我跟{rel}去{place}玩了{days}天，{activity}。",
                    "猜猜我{when}去哪儿了？{place}！就我和{rel}两个人，整整{days}天。",
                    "{when}终于和{rel}去了一趟{place}，住了{days}天，{activity}。",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "{place}？太羡慕了！吃的怎么样？",
                    "听起来像做梦一样，你们俩一路上没吵架吧？",
                    "哇，{days}天！我也好想休个这样的假。",
                ),
            ),
            Step(
                OWNER,
                (
                    "完美，说真的，我已经开始想念那里了。",
                    "就为看地图吵过一次，其他都很好。",
                    "太棒了，拍了一大堆照片回来。",
                ),
            ),
        ),
        questions={
            "where": Question(
                "single",
                ("{owner}和{rel}一起去哪里旅行了？", "{owner}跟{rel}结伴去了哪个地方？"),
                "{place}",
            ),
            "when": Question(
                "temporal",
                ("{owner}是什么时候去的{place}？", "{owner}的{place}之行是在什么时候？"),
                "{when_answer}",
            ),
            "who": Question(
                "single", ("谁陪{owner}去了{place}？", "{owner}去{place}是跟谁一起的？"), "{rel}"
            ),
            "days": Question(
                "single",
                ("{owner}在{place}待了多久？", "{owner}这次在{place}玩了几天？"),
                "{days}天",
            ),
        },
        distractors=(
            "我同事刚从{place}回来，晒得跟黑炭一样。",
            "最近朋友圈全是{place}的照片，看起来美得不真实。",
            "邻居一直劝我春天去{place}看看。",
            "昨晚看了一部讲{place}的纪录片，老街好漂亮。",
        ),
        short="去{place}旅行",
    ),
    "pet": FactType(
        slots={
            "pet": "vocab:pet",
            "petname": "vocab:pet_name",
            "when": "when:yesterday|last_weekend|few_days|last_week",
        },
        script=(
            Step(
                OWNER,
                (
                    "我们{when}领养了一只小{breed}！",
                    "给你介绍一下家里的新成员：{when}刚接回家的一只{breed}。",
                    "{when}我们本来只是去救助站看看，结果抱了一只{breed}回家。",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "真的假的，恭喜！它叫什么名字？",
                    "啊啊啊快发照片！起名字了吗？",
                    "好可爱，想好叫什么了吗？",
                ),
            ),
            Step(
                OWNER,
                (
                    "叫{petname}！全家投票定的。",
                    "我们叫它{petname}，感觉特别合适。",
                    "{petname}。为了这个名字我们商量了两天。",
                ),
                "d",
            ),
            Step(PARTNER, ("{petname}这名字太可爱了。", "喜欢！替我摸摸{petname}。")),
        ),
        questions={
            "name": Question(
                "single",
                (
                    "{owner}家的{species}叫什么名字？",
                    "{owner}给新养的{species}起了什么名？",
                    "{owner}领养的那只{breed}叫什么？",
                ),
                "{petname}",
                ("e", "d"),
            ),
            "breed": Question(
                "single",
                (
                    "{owner}养的{species}是什么品种？",
                    "{owner}家的{species}是哪一种？",
                    "{owner}接回家的是什么品种的{species}？",
                ),
                "{breed}",
            ),
            "when": Question(
                "temporal",
                ("{owner}是什么时候把{petname}接回家的？", "{petname}是哪天成为{owner}家一员的？"),
                "{when_answer}",
                ("e", "d"),
            ),
        },
        distractors=(
            "我姨妈家也有一只{breed}，被宠得无法无天。",
            "市中心的救助站下个月办领养日。",
            "我们小区也有人给{species}起名叫{petname}，好巧。",
        ),
        short="领养{petname}",
    ),
    "job": FactType(
        slots={
            "role": "vocab:role",
            "company": "vocab:company",
            "month": "month",
            "when": "when:yesterday|few_days|last_week",
        },
        script=(
            Step(
                OWNER,
                (
                    "大新闻：{when}{company}给了我{role}的offer，我已经答应了！",
                    "告诉你个好消息！{company}{when}录用我当{role}，我接受了。",
                    "面试总算没白忙，我要去{company}做{role}了，{when}他们给我打的电话。",
                ),
                "e",
            ),
            Step(PARTNER, ("恭喜恭喜！！什么时候入职？", "太厉害了，恭喜！第一天上班是哪天？")),
            Step(
                OWNER,
                (
                    "{month}。有点紧张，但更多的是兴奋。",
                    "{month}入职，所以还能喘口气。",
                    "{month}初。面试的时候感觉团队的人都挺好的。",
                ),
                "d",
            ),
        ),
        questions={
            "role": Question(
                "single",
                (
                    "{owner}接受了什么职位？",
                    "{owner}新工作的岗位是什么？",
                    "{company}给{owner}的offer是什么职位？",
                ),
                "{role}",
            ),
            "company": Question(
                "single",
                (
                    "哪家公司录用了{owner}？",
                    "{owner}接下来要去哪儿上班？",
                    "哪家公司给了{owner}offer？",
                ),
                "{company}",
            ),
            "start": Question(
                "temporal",
                ("{owner}什么时候开始新工作？", "{owner}几月份去{company}报到？"),
                "{month}",
                ("e", "d"),
            ),
        },
        distractors=(
            "{company}又在招人了，我一个朋友去年投过。",
            "我表哥做过一阵子{role}，说加班特别狠。",
            "你听说了吗，{company}要把办公室搬到城东去了。",
        ),
        short="拿到{company}的工作",
    ),
    "class": FactType(
        slots={
            "hobby": "vocab:hobby",
            "teacher": "person",
            "weekday": "vocab:weekday",
            "when": "when:last_week|few_days|last_month",
        },
        script=(
            Step(
                OWNER,
                (
                    "我{when}终于报了个{hobby}班，每个{weekday}晚上上课。",
                    "新爱好：我{when}开始学{hobby}了，{weekday}晚上雷打不动。",
                    "{when}去社区中心上了第一节{hobby}课，现在每个{weekday}都去。",
                ),
                "e",
            ),
            Step(PARTNER, ("哇，上得怎么样？", "好有意思！老师好吗？")),
            Step(
                OWNER,
                (
                    "超喜欢。老师叫{teacher}，对我们这些新手特别有耐心。",
                    "很好，主要是{teacher}教得好，从来不让人觉得尴尬。",
                ),
                "d",
            ),
        ),
        questions={
            "hobby": Question(
                "single",
                (
                    "{owner}最近培养了什么新爱好？",
                    "{owner}在上什么课？",
                    "{owner}每个{weekday}晚上去上什么课？",
                ),
                "{hobby}",
            ),
            "teacher": Question(
                "single",
                ("{owner}的{hobby}课是谁教的？", "{owner}的{hobby}老师叫什么？"),
                "{teacher}",
                ("e", "d"),
            ),
            "day": Question(
                "single",
                ("{owner}每周哪天去上{hobby}？", "{owner}的课安排在星期几？"),
                "{weekday}",
            ),
        },
        distractors=(
            "我妹妹学过一次{hobby}，两个星期就放弃了。",
            "社区中心暑假要给小朋友办{hobby}工作坊。",
            "到处都是{hobby}工作室的广告。",
        ),
        short="开始上{hobby}课",
    ),
    "race": FactType(
        slots={"race": "vocab:race", "when": "when:yesterday|last_weekend|this_morning"},
        script=(
            Step(
                OWNER,
                (
                    "{when}我跑完了人生第一个{race}！成绩是{time}。",
                    "我做到了：{when}冲过了{race}的终点，用时{time}，腿已经不是自己的了。",
                    "还记得我一直在练的{race}吗？{when}跑了，{time}！",
                ),
                "e",
            ),
            Step(PARTNER, ("太厉害了，你应该特别骄傲！", "哇！冲线的时候哭了没？换我肯定哭。")),
            Step(OWNER, ("哭了一点点，不瞒你说。", "我已经在看下一场了。")),
        ),
        questions={
            "when": Question(
                "temporal",
                ("{owner}是什么时候完成第一个{race}的？", "{owner}参加{race}是哪天？"),
                "{when_answer}",
            ),
            "time": Question(
                "single", ("{owner}的完赛成绩是多少？", "{owner}跑完{race}花了多长时间？"), "{time}"
            ),
        },
        distractors=(
            "市中心办{race}，封了半个城，堵死了。",
            "我哥一直劝我练{race}。",
            "看文章说大部分人第一次跑{race}都会走一段。",
        ),
        short="跑{race}",
    ),
    "favorite_food": FactType(
        slots={"dish": "vocab:dish"},
        script=(
            Step(
                PARTNER,
                (
                    "随便问问：你心里排第一的家常菜是什么？",
                    "如果这辈子只能吃一种东西，你选什么？",
                    "我周末要做饭，你最爱吃什么？",
                ),
            ),
            Step(
                OWNER,
                (
                    "{dish}，毫无悬念。我可以天天吃。",
                    "那肯定是{dish}，小时候外婆每个周日都做。",
                    "说实话？{dish}。别的都比不上。",
                ),
                "e",
            ),
            Step(PARTNER, ("好答案。", "记住了，下次你来我做{dish}。")),
        ),
        questions={
            "dish": Question(
                "single",
                (
                    "{owner}最喜欢吃的菜是什么？",
                    "{owner}最爱哪道菜？",
                    "{owner}说自己天天吃都不腻的是什么？",
                ),
                "{dish}",
            ),
        },
        distractors=(
            "我公司旁边新开了一家{dish}，味道一般。",
            "我照着视频做{dish}，结果全糊了。",
        ),
    ),
    "dislike": FactType(
        slots={"food": "vocab:disliked_food"},
        script=(
            Step(
                PARTNER,
                (
                    "要不要给你的面里加点{food}？",
                    "我拌了个{food}凉菜，要不要尝尝？",
                    "这家店今天的招牌菜里有{food}，要点吗？",
                ),
            ),
            Step(
                OWNER,
                (
                    "千万别！我受不了{food}，从小就讨厌。",
                    "呃，不用了谢谢。{food}是我这辈子都不会吃的东西。",
                    "算了吧！什么都行就是别放{food}，那个味道我真的不行。",
                ),
                "e",
            ),
            Step(PARTNER, ("哈哈，记住了，我多吃点。", "好吧，那就不加了。")),
        ),
        questions={
            "food": Question(
                "single",
                ("{owner}不吃什么东西？", "{owner}讨厌吃什么？", "{owner}受不了什么食物？"),
                "{food}",
            ),
        },
        distractors=("我妈做什么菜都放{food}，我倒无所谓。", "听说{food}其实挺有营养的。"),
    ),
    "baby": FactType(
        slots={
            "rel": "vocab:sibling",
            "relname": "person",
            "baby": "vocab:baby",
            "when": "when:yesterday|few_days|last_week",
        },
        script=(
            Step(
                OWNER,
                (
                    "我升级当长辈啦！我{rel}{relname}{when}生了个{babykind}。",
                    "{when}我{rel}{relname}家添了个{babykind}，全家都乐坏了。",
                ),
                "e",
            ),
            Step(PARTNER, ("恭喜恭喜！宝宝叫什么名字？", "太好的消息了！名字起好了吗？")),
            Step(OWNER, ("叫{baby}。我已经买了一堆小袜子。", "小名叫{baby}，是奶奶起的。"), "d"),
        ),
        questions={
            "name": Question(
                "single",
                ("{owner}的{rel}给孩子起了什么名字？", "{relname}家宝宝叫什么？"),
                "{baby}",
                ("e", "d"),
            ),
            "when": Question(
                "temporal",
                ("{relname}的孩子是什么时候出生的？", "{owner}是哪天当上长辈的？"),
                "{when_answer}",
            ),
            "who": Question("single", ("{owner}家里谁刚生了孩子？",), "{rel}{relname}"),
        },
        distractors=(
            "我{rel}天天催我生孩子，烦死了。",
            "{relname}又打电话来吐槽房东了。",
            "我一个朋友刚生了双胞胎，想想都累。",
        ),
        short="{relname}家宝宝出生",
    ),
    "book": FactType(
        slots={"book": "vocab:book", "author": "vocab:author"},
        script=(
            Step(
                OWNER,
                (
                    "我刚看完{author}的{book}，脑子里全是它。",
                    "昨晚熬夜把{author}写的{book}看完了。",
                    "最近迷上了{author}，三天就读完了{book}。",
                ),
                "e",
            ),
            Step(PARTNER, ("讲的是什么？", "是很虐的书吗？你听起来像刚看完一本很虐的。")),
            Step(
                OWNER,
                (
                    "讲两姐妹二十年不说话的故事，又美又伤感。",
                    "很难说清楚，但结局让我彻底破防了。",
                ),
            ),
        ),
        questions={
            "book": Question(
                "single",
                (
                    "{owner}最近读了哪本小说？",
                    "哪本书让{owner}熬到半夜？",
                    "{owner}看完了{author}的哪本书？",
                ),
                "{book}",
            ),
            "author": Question(
                "single",
                ("{owner}看完的那本书作者是谁？", "{owner}最近喜欢上了哪位作家？"),
                "{author}",
            ),
        },
        distractors=("我们读书会下个月选了{book}，我还没开始看。", "看到{author}要出新书了。"),
    ),
    "car": FactType(
        slots={
            "car": "vocab:car",
            "price": "price:9:32",
            "when": "when:yesterday|last_weekend|last_week",
        },
        script=(
            Step(
                OWNER,
                (
                    "终于把老车换掉了！{when}买了一辆二手{car}，花了{price}。",
                    "给你介绍我的新（二手）{car}，{when}提的车，砍了半天价，{price}拿下。",
                ),
                "e",
            ),
            Step(PARTNER, ("不错啊！开起来怎么样？", "哇，什么颜色的？")),
            Step(OWNER, ("很稳，而且空调终于是好的了。", "灰色，挺无聊的，但有座椅加热。")),
        ),
        questions={
            "car": Question(
                "single",
                (
                    "{owner}买了什么车？",
                    "{owner}现在开的是哪款车？",
                    "{owner}买的二手车是什么牌子？",
                ),
                "{car}",
            ),
            "price": Question(
                "single", ("{owner}的{car}花了多少钱？", "{owner}的车多少钱买的？"), "{price}"
            ),
            "when": Question("temporal", ("{owner}哪天买的{car}？",), "{when_answer}"),
        },
        distractors=("我哥在考虑买{car}，这车怎么样？", "今天停车场里一辆{car}差点倒车撞到我。"),
        short="买{car}",
    ),
    "injury": FactType(
        slots={
            "body": "vocab:body_part",
            "sport": "vocab:sport",
            "when": "when:yesterday|last_weekend|few_days",
        },
        script=(
            Step(
                OWNER,
                (
                    "我现在躺在沙发上冰敷{body}，{when}打{sport}扭到了。",
                    "{when}打{sport}的时候把{body}伤了，暂时不能跑步了。",
                ),
                "e",
            ),
            Step(PARTNER, ("天哪！严重吗？", "哎哟！去看医生了吗？")),
            Step(OWNER, ("医生说休息两周就好。", "还好只是扭伤。")),
        ),
        questions={
            "what": Question(
                "single",
                (
                    "{owner}伤到了哪里？",
                    "{owner}最近哪个部位受伤了？",
                    "{owner}打{sport}时伤了哪里？",
                ),
                "{body}",
            ),
            "sport": Question(
                "single", ("{owner}是做什么运动受的伤？", "{owner}受伤时在玩什么球？"), "{sport}"
            ),
            "when": Question("temporal", ("{owner}是什么时候伤到{body}的？",), "{when_answer}"),
        },
        distractors=(
            "自从在沙发上办公，我的{body}就一直不舒服。",
            "哪天一起打{sport}吧，周日公园有一帮人在打。",
            "我们办公室一半人午休都去打{sport}。",
        ),
        short="打{sport}受伤",
    ),
    "volunteer": FactType(
        slots={"org": "vocab:volunteer_place", "weekday": "vocab:weekday"},
        script=(
            Step(PARTNER, ("你最近好像比以前忙，在忙什么？", "你最近早上都在干嘛？")),
            Step(
                OWNER,
                (
                    "我每个{weekday}早上去{org}做志愿者，这是我一周里最开心的时候。",
                    "我开始在{org}帮忙了，{weekday}去，主要是整理捐赠物资、陪大家聊聊天。",
                ),
                "e",
            ),
            Step(PARTNER, ("真好。", "你怎么开始做这个的？")),
            Step(OWNER, ("朋友拉我去了一次，然后就一直去了。", "想做点不用盯着屏幕的事。")),
        ),
        questions={
            "where": Question(
                "single", ("{owner}在哪里当志愿者？", "{owner}在哪个机构做义工？"), "{org}"
            ),
            "day": Question(
                "single", ("{owner}星期几去做志愿服务？", "{owner}哪天早上会去{org}？"), "{weekday}"
            ),
        },
        distractors=("我家附近的{org}又在募捐了。", "看到篇文章说市中心的{org}特别缺人手。"),
    ),
    "move": FactType(
        slots={"city": "vocab:city", "month": "month", "rel": "vocab:relative"},
        script=(
            Step(
                OWNER,
                ("定下来了：我们{month}要搬去{city}。", "我们在{city}签了租房合同！{month}搬家。"),
                "e",
            ),
            Step(PARTNER, ("哇，为什么是{city}？", "变化好大！什么吸引你们去那儿？")),
            Step(
                OWNER,
                (
                    "我{rel}住在那边，想离家人近一点。",
                    "主要是想离我{rel}近点，而且房租也便宜一些。",
                ),
                "d",
            ),
        ),
        questions={
            "where": Question(
                "single",
                (
                    "{owner}要搬到哪个城市？",
                    "{owner}接下来会住在哪里？",
                    "{owner}{month}要搬去哪里？",
                ),
                "{city}",
            ),
            "why": Question(
                "single", ("{owner}为什么决定搬去{city}？",), "离{rel}近一点", ("e", "d")
            ),
            "when": Question("temporal", ("{owner}什么时候搬家？",), "{month}"),
        },
        distractors=("{city}在我们公司可能外派的名单上。", "听说{city}的冬天很难熬。"),
        short="决定搬去{city}",
    ),
    "instrument": FactType(
        slots={"instrument": "vocab:instrument", "months": "int:2:11", "genre": "vocab:genre"},
        script=(
            Step(
                OWNER,
                (
                    "坦白一下：我偷偷学{instrument}已经{months}个月了。",
                    "我练{instrument}差不多{months}个月了，主要练{genre}的曲子。",
                ),
                "e",
            ),
            Step(PARTNER, ("真的假的！下次表演给我听。", "你在练什么风格的？")),
            Step(
                OWNER,
                ("主要是{genre}。我邻居真的很有耐心。", "{genre}为主，慢慢没那么难听了。"),
                "d",
            ),
        ),
        questions={
            "instrument": Question(
                "single", ("{owner}在学什么乐器？", "{owner}最近一直在练哪种乐器？"), "{instrument}"
            ),
            "how_long": Question("single", ("{owner}学{instrument}多久了？",), "{months}个月"),
            "genre": Question(
                "single",
                (
                    "{owner}练的是什么类型的音乐？",
                    "{owner}用{instrument}主要练什么风格？",
                ),
                "{genre}",
                ("e", "d"),
            ),
        },
        distractors=(
            "我楼下邻居早上七点就开始练{instrument}，受不了。",
            "我一直想学{instrument}，就是没耐心。",
            "下个月公园有个{genre}音乐节。",
        ),
    ),
    "gift": FactType(
        slots={"gift": "vocab:gift", "rel": "vocab:relative"},
        script=(
            Step(
                OWNER,
                (
                    "我过生日，{rel}给了我一个惊喜：{gift}！",
                    "看我生日收到了什么：{rel}送的{gift}。",
                ),
                "e",
            ),
            Step(PARTNER, ("生日快乐，虽然晚了点！好贴心。", "哇，你{rel}眼光真好。")),
        ),
        questions={
            "gift": Question(
                "single", ("{owner}生日收到了什么礼物？", "{owner}过生日得到了什么？"), "{gift}"
            ),
            "who": Question("single", ("{owner}的{gift}是谁送的？",), "{rel}"),
        },
        distractors=(
            "同事要过生日了，有什么好主意吗？送{gift}怎么样？",
            "今天看到{gift}在打折，差点就买了。",
        ),
    ),
    "concert": FactType(
        slots={
            "band": "vocab:band",
            "venue": "vocab:venue",
            "when": "when:yesterday|last_weekend|last_week",
        },
        script=(
            Step(
                OWNER,
                (
                    "{when}我们去{venue}看了{band}的现场，耳朵到现在还在嗡嗡响。",
                    "终于看到{band}了！{when}在{venue}，唱了整整两个小时。",
                ),
                "e",
            ),
            Step(PARTNER, ("羡慕！唱老歌了吗？", "现场人多吗？")),
            Step(OWNER, ("老歌全唱了，我每句都在跟着吼。", "人挤人，但大家都特别开心。")),
        ),
        questions={
            "band": Question(
                "single", ("{owner}去看了谁的演出？", "{owner}看了哪位歌手或乐队的现场？"), "{band}"
            ),
            "venue": Question(
                "single", ("{band}那场演出在哪儿？", "{owner}是在哪个场馆看的{band}？"), "{venue}"
            ),
            "when": Question("temporal", ("{owner}什么时候去看的{band}演唱会？",), "{when_answer}"),
        },
        distractors=(
            "今天早上打车，电台里放的是{band}。",
            "听说{band}的票几分钟就卖光了。",
            "下周{venue}有一场演出，可惜我去不了。",
        ),
        short="看{band}的演出",
    ),
    "garden": FactType(
        slots={"plant": "vocab:plant", "count": "int:4:16"},
        script=(
            Step(
                OWNER,
                (
                    "今年春天我在后院种了{count}棵{plant}。",
                    "我的小菜园进展不错：种了{count}棵{plant}，目前都活着。",
                ),
                "e",
            ),
            Step(PARTNER, ("看不出来你还是个园艺高手！", "长得好吗？")),
            Step(OWNER, ("目前还行，兔子还没发现它们。", "还不错，我每天傍晚都浇水。")),
        ),
        questions={
            "plant": Question(
                "single",
                (
                    "{owner}的花园里种着什么？",
                    "{owner}在院子里栽了什么？",
                    "{owner}在后院种了什么？",
                ),
                "{plant}",
            ),
            "count": Question("single", ("{owner}种了多少棵{plant}？",), "{count}"),
        },
        distractors=("我妈给了我几棵{plant}苗，一个星期就全死了。", "花市的{plant}在打折。"),
    ),
    # 链：第二段放在之后的某次对话里，问题需要两段合起来。
    "sibling_job": FactType(
        slots={
            "rel": "vocab:sibling",
            "relname": "person",
            "city": "vocab:city",
            "role": "vocab:role",
            "when": "when:yesterday|few_days",
        },
        script=(
            Step(
                OWNER,
                (
                    "我{rel}{relname}刚搬去{city}，想换个环境重新开始。",
                    "{relname}，就是我{rel}，这个月收拾好东西搬去了{city}。",
                ),
                "e",
            ),
            Step(PARTNER, ("好勇敢！{relname}在那边还习惯吗？",)),
            Step(OWNER, ("还行，就是房子特别小。", "很喜欢，就是想念家里的饭菜。")),
        ),
        later=(
            Step(
                OWNER,
                (
                    "{relname}那边有好消息：{when}被录用当{role}了！",
                    "{relname}终于找到工作了，{when}开始当{role}。",
                ),
                "l",
            ),
            Step(PARTNER, ("太好了，替我恭喜{relname}！", "总算松了口气。")),
        ),
        questions={
            "job": Question(
                "multi",
                ("{owner}的{rel}搬家以后找了什么工作？", "{owner}在{city}的{rel}现在做什么工作？"),
                "{role}",
                ("e", "l"),
            ),
            "city": Question(
                "multi", ("{owner}那个当{role}的{rel}住在哪里？",), "{city}", ("e", "l")
            ),
        },
        distractors=("我一个朋友是做{role}的，很喜欢这份工作。", "听说{city}现在房价越来越贵了。"),
    ),
    "roommate": FactType(
        slots={"friend": "person", "activity": "vocab:friend_activity"},
        script=(
            Step(
                OWNER,
                (
                    "我大学室友{friend}过几个星期要来找我玩。",
                    "{friend}，我大学时候的室友，订了机票要来看我！",
                ),
                "e",
            ),
            Step(PARTNER, ("好玩！你们打算干什么？",)),
            Step(OWNER, ("还没想好，你有什么建议吗？", "大概就是吃吃吃吧。")),
        ),
        later=(
            Step(
                OWNER,
                (
                    "{friend}整个周末都在我这儿。我们{activity}，还聊到凌晨两点。",
                    "好久没过这么开心的周末了：{friend}和我{activity}。",
                ),
                "l",
            ),
            Step(PARTNER, ("听起来是完美的相聚。", "真好，你们俩一直这么要好。")),
        ),
        questions={
            "activity": Question(
                "multi",
                ("{owner}和大学室友一起做了什么？", "{owner}跟老室友的那个周末是怎么过的？"),
                "{activity}",
                ("e", "l"),
            ),
            "who": Question("single", ("{owner}的大学室友叫什么名字？",), "{friend}"),
        },
        distractors=("我大学室友以前会梦游，我到现在还记得。",),
    ),
}

ORDER_QUESTIONS = ("对{owner}来说，{a}和{b}哪个先发生？", "{a}和{b}，哪件事更早？")

GREETINGS = [
    ("嗨{name}！最近怎么样？", "{name}你好！挺好的，好久没聊了！"),
    ("{name}，好久不见！", "{name}！是啊，最近太忙了。"),
    ("早上好{name}！有空聊会儿吗？", "早！有空，我正在吃早饭。"),
    ("嘿！{name}周末过得怎么样？", "{name}！挺好的，很放松。"),
    ("{name}！我有好多事要跟你说。", "好事还是坏事？快跟我说说，{name}。"),
    ("{name}，周五快乐！", "周五快乐，{name}！终于熬到周末了。"),
    ("晚上好{name}！现在方便聊天吗？", "跟你聊什么时候都方便。怎么啦，{name}？"),
]

CLOSINGS = [
    ("我得走了，回头聊！", "拜拜{name}，照顾好自己！"),
    ("好了，饭做好了，我先撤了。", "慢慢吃！回头聊，{name}。"),
    ("不早了，晚安{name}！", "晚安！睡个好觉。"),
    ("谢谢你陪我聊天，{name}，很开心。", "随时！下次再聊。"),
    ("午休结束了，回去干活了，拜拜！", "加油，{name}！"),
]

FILLER = [
    (
        "{name}，这周过得怎么样？",
        ["好长的一周！工作一直没停，总算熬过来了。", "挺平静的，说实话我正需要这样。"],
    ),
    (
        "最近工作好忙，{weekday}有个大截止日期。",
        ["唉，截止日期。坚持住。", "你肯定没问题的，你一向可以。"],
    ),
    ("昨晚试着照新菜谱做了{dish}。", ["做得怎么样？", "哇，把菜谱发我！"]),
    ("这边天气一直阴沉沉的。", ["我这儿也是，天天穿毛衣。", "好想快点到春天。"]),
    ("最近有看什么好看的剧吗？", ["在看一个烘焙节目，很解压。", "没有，每次都在沙发上睡着。"]),
    (
        "我{relative}今天给我打电话，聊了一个小时。",
        ["真好，他们最近怎么样？", "我也喜欢这种长长的电话。"],
    ),
    ("我在想要不要找个暖和的地方度个假。", ["去吧！你值得休息一下。", "你想去哪儿？"]),
    ("朋友圈老是刷到{place}，看起来好美。", ["是真的美，总有一天要去！", "最近好像大家都去那儿。"]),
    ("我想重新养成早起的习惯。", ["进展怎么样？", "加油，早起太难了。"]),
    ("我们部门终于要来新领导了。", ["希望是个好领导！", "有变化也挺好。"]),
    ("整个周末都在打扫房间。", ["不过很有成就感吧？", "说真的我也该打扫了。"]),
    ("你现在还去健身房吗？", ["有空就去，但不常有空。", "一周三次，努力坚持中。"]),
    ("我自己把漏水的水龙头修好了！", ["哇，动手能力这么强！", "网上的教程真管用。"]),
    ("我家附近{weekday}开始有农贸市场了。", ["真好，我超爱逛农贸市场。", "有好吃的面包吗？"]),
    ("好累，昨晚几乎没睡。", ["怎么了，有心事吗？", "能补个觉就补一下。"]),
    ("看到有人说{sport}是现在增长最快的运动。", ["我信，身边好多人在玩。", "我从来没试过。"]),
    ("我{relative}想组织一次家庭聚会。", ["听起来很好玩，也会很乱。", "你会帮忙张罗吗？"]),
    ("今天堵车堵死了，一个小时才到家。", ["太惨了。", "至少可以听听播客。"]),
    ("我在考虑学一门新语言。", ["哪一门？", "好主意。"]),
    ("今天部门聚餐去吃了{dish}。", ["好吃吗？", "不错嘛，免费的午饭最好吃。"]),
    ("这周一直在循环{band}的歌。", ["品味不错。", "我得再去听听。"]),
    ("我想少刷手机多看书。", ["我也是这个目标，好难！", "有什么好书推荐吗？"]),
    ("隔壁小孩摆了个卖柠檬水的小摊。", ["好可爱，你买了吗？", "小小生意人！"]),
    ("我最近周日都会提前备好一周的饭。", ["真的省时间吗？", "我一直想试试。"]),
    ("我手机屏幕又摔碎了。", ["啊，又碎了？", "该换个结实点的壳了。"]),
    ("我把客厅重新布置了一下，感觉像换了个家。", ["我也喜欢这么折腾。", "发张照片给我看看！"]),
    ("你试过{hobby}吗？", ["试过一次，特别菜。", "没有，不过一直挺好奇的。"]),
    ("最近咖啡喝得太多了。", ["我也是，都成问题了。", "要不先换成茶？"]),
    ("我{relative}今年可能会来看我。", ["好呀！有什么安排吗？", "那挺好的。"]),
    ("昨晚看了一个介绍{city}的旅游节目。", ["好看吗？", "我一直想去那里。"]),
    ("我们公司{weekday}要办一个百家宴。", ["你带什么菜去？", "百家宴最好玩了。"]),
    ("我关注了一个{hobby}的公众号，现在每天推送十条。", ["赶紧取关。", "哈哈，我也遇到过。"]),
    ("我的绿植终于又开始长了。", ["太好了！你改了什么？", "养花达人！"]),
    ("今天没带伞被雨淋了。", ["经典。湿透了吗？", "那种感觉最难受了。"]),
    ("我家楼下新开了一家面包店。", ["危险！", "哪款最好吃？"]),
    ("我最近在努力早点睡。", ["有效果吗？", "很好啊。"]),
    ("今天开会开到一半电脑没电了。", ["噩梦啊。", "有没有丢什么文件？"]),
    ("我在考虑把卧室重新刷一遍。", ["刷什么颜色？", "好玩的项目！"]),
    ("{company}有人来找我聊工作机会。", ["有意思！你心动吗？", "现在猎头真是无处不在。"]),
    ("终于把衣柜清理了，捐了三大袋衣服。", ["一定很爽吧。", "我也该清一清了。"]),
    ("我最喜欢的剧{weekday}出新一季。", ["你要一口气追完吗？", "千万别剧透！"]),
    ("我做了一个自驾专用的歌单。", ["分享给我！", "里面都有什么歌？"]),
    ("好久没去电影院了。", ["哪天我们一起去吧。", "我也是，好想念。"]),
    ("坐了一整天，腰好疼。", ["换把好椅子吧！", "拉伸对我挺有用的。"]),
    ("我最近每天睡前写日记。", ["有帮助吗？", "我喜欢这个习惯。"]),
    ("假期有什么安排吗？", ["大概就是陪家人。", "还没有，你呢？"]),
    ("我老是忘记给花浇水。", ["在手机上设个提醒！", "朋友，养仙人掌吧。"]),
    ("今天散步看到一只超可爱的狗。", ["什么品种的？", "你摸到了吗？"]),
    ("我想开始存钱买房了。", ["明智，现在房子太贵了。", "加油，这是个大目标。"]),
    ("我最近尽量在家做饭。", ["目前做得最好的是什么？", "又省钱又健康，不错。"]),
    ("是我{relative}带我入坑{band}的。", ["好品味是会遗传的。", "我应该从哪张专辑开始听？"]),
    ("你最近在看什么书？", ["一本推理小说，没什么特别的。", "说实话只看工作邮件。"]),
    ("这周末市中心有个集市。", ["你去吗？", "我超爱那种集市，好多吃的。"]),
    ("我需要一个新爱好，最近太无聊了。", ["试试有创意的事？", "加个兴趣小组吧！认识新朋友。"]),
    ("同事带了自己做的{dish}来办公室。", ["你好有口福！", "有听起来那么好吃吗？"]),
    ("昨晚停电停了三个小时。", ["点蜡烛玩桌游？", "太烦了。"]),
    ("我最近走路上班，不开车了。", ["要走多久？", "很好啊，呼吸新鲜空气！"]),
    ("我下周终于要去查视力了。", ["早该去了！", "你戴眼镜肯定好看。"]),
    ("邻居在装修，吵得受不了。", ["降噪耳机！", "唉，太痛苦了。"]),
    ("翻到了高中时候的相册。", ["天哪，那些发型！", "肯定很搞笑。"]),
]

REACTIONS = [
    "哈哈，好好笑。",
    "真的吗？我都不知道。",
    "有意思！",
    "嗯，知道了。",
    "太离谱了。",
    "有道理。",
    "啊，真的假的？",
    "我也听说过。",
]

BRIDGES = [
    "哈哈，是啊。",
    "完全同意。",
    "对吧？",
    "我懂你的意思。",
    "嗯嗯。",
    "那当然。",
    "确实。",
    "嗯，然后呢？",
]

# 一句话前后的客套：前面的引子（所以一条消息的第一句不一定是重点），后面的收尾。
LEADS = [
    "跟你说个事。",
    "你绝对想不到。",
    "对了，差点忘了！",
    "近况汇报一下！",
    "不好意思，最近几周忙疯了。",
    "哎，问你个事。",
    "上次聊完之后发生了好多事。",
    "等等，我还没跟你说吗？",
]

TAILS = [
    "总之，你最近怎么样？",
    "这一周过得好漫长。",
    "回头发照片给你。",
    "等不及跟你细说了。",
    "时间过得真快。",
    "说来话长。",
    "说实话我到现在还没缓过来。",
    "总之，这就是我的近况。",
    "我们找时间好好聊聊吧。",
    "你那边有什么新鲜事也跟我说说。",
]
