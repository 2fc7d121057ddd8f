"""English: names, vocabulary, fact types, filler. Data only (see ``shapes.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from .shapes import FactType, Question, Step

LATIN = True

SPEAKERS = [
    ("Nora", "f"),
    ("Daniel", "m"),
    ("Priya", "f"),
    ("Marcus", "m"),
    ("Elena", "f"),
    ("Tomás", "m"),
    ("Grace", "f"),
    ("Owen", "m"),
    ("Leila", "f"),
    ("Samuel", "m"),
    ("Chloé", "f"),
    ("Jonas", "m"),
    ("Maya", "f"),
    ("Ethan", "m"),
    ("Zoë", "f"),
    ("Rafael", "m"),
]

PEOPLE = [
    "Anna", "Leo", "Ruth", "Felix", "Iris", "Jake", "Mila", "Theo", "Clara", "Victor",
    "Lucy", "Omar", "Bea", "Hugo", "Nina", "Arthur", "Inès", "Mateo", "Carl", "Josie",
    "Wendy", "Malik", "Greta", "Pablo",
]  # fmt: skip

_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
]  # fmt: skip
_NUMBERS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
]  # fmt: skip


def num(n: int) -> str:
    return _NUMBERS[n] if 0 <= n < len(_NUMBERS) else str(n)


def price(n: int) -> str:
    return f"${n * 1000 + 500 * (n % 2):,}"


def duration(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    if not hours:
        return f"{rest} minutes"
    return f"{hours} hour{'s' if hours > 1 else ''} {rest} minutes"


def month(i: int) -> str:
    return _MONTHS[i]


def format_date(day: datetime) -> str:
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


WHEN = {
    "yesterday": "yesterday",
    "this_morning": "this morning",
    "last_weekend": "last weekend",
    "last_week": "last week",
    "few_days": "a few days ago",
    "last_month": "last month",
}


def when_answer(code: str, day: datetime) -> str:
    if code == "yesterday":
        return format_date(day - timedelta(days=1))
    if code == "this_morning":
        return format_date(day)
    if code == "last_month":
        first = day.replace(day=1) - timedelta(days=1)
        return f"{_MONTHS[first.month - 1]} {first.year}"
    span = {"last_weekend": "the weekend", "last_week": "the week", "few_days": "a few days"}
    return f"{span[code]} before {format_date(day)}"


def pronouns(gender: str) -> dict[str, str]:
    if gender == "f":
        return {"subj": "she", "obj": "her", "pos": "her", "elder": "aunt"}
    return {"subj": "he", "obj": "him", "pos": "his", "elder": "uncle"}


VOCAB: dict[str, list[str] | list[dict[str, str]]] = {
    "place": [
        "Lisbon", "Kyoto", "Vancouver", "Reykjavík", "Málaga", "Edinburgh", "Montréal",
        "Cape Town", "Kraków", "Zürich", "Hanoi", "Buenos Aires", "Porto", "Oaxaca",
        "Savannah", "Santa Fe",
    ],
    "relative": [
        "sister", "brother", "mom", "dad", "cousin", "aunt", "best friend", "grandma",
    ],
    "sibling": ["sister", "brother", "cousin", "older sister", "younger brother"],
    "trip_activity": [
        "hiking along the coast",
        "eating our way through the markets",
        "visiting every museum we could find",
        "biking around the old town",
        "taking cooking classes",
        "swimming and doing absolutely nothing",
        "chasing waterfalls",
        "wandering around flea markets",
    ],
    "pet": [
        {"species": "dog", "young": "puppy", "breed": "beagle"},
        {"species": "dog", "young": "puppy", "breed": "golden retriever"},
        {"species": "dog", "young": "puppy", "breed": "corgi"},
        {"species": "dog", "young": "puppy", "breed": "border collie"},
        {"species": "dog", "young": "puppy", "breed": "dachshund"},
        {"species": "cat", "young": "kitten", "breed": "Maine Coon"},
        {"species": "cat", "young": "kitten", "breed": "Siamese"},
        {"species": "cat", "young": "kitten", "breed": "ragdoll"},
        {"species": "rabbit", "young": "bunny", "breed": "Holland Lop"},
    ],
    "pet_name": [
        "Biscuit", "Pepper", "Mochi", "Luna", "Waffles", "Ziggy", "Olive", "Bean",
        "Pickles", "Maple",
    ],
    "role": [
        "product designer", "data analyst", "pediatric nurse", "sous chef", "project manager",
        "chemistry teacher", "physical therapist", "UX researcher", "civil engineer",
        "accountant",
    ],
    "company": [
        "Brightline Health", "Northwind Logistics", "Harbor & Pine", "Lumen Labs",
        "Cedar Street Bakery", "Bluewave Energy", "Atlas Robotics", "Greenfield Schools",
    ],
    "hobby": [
        "pottery", "salsa dancing", "rock climbing", "watercolor painting", "improv comedy",
        "woodworking", "Italian cooking", "photography", "calligraphy", "yoga",
    ],
    "weekday": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "race": [
        {"race": "half marathon", "time": "1 hour 58 minutes"},
        {"race": "half marathon", "time": "2 hours 7 minutes"},
        {"race": "10K", "time": "52 minutes"},
        {"race": "10K", "time": "47 minutes"},
        {"race": "marathon", "time": "4 hours 21 minutes"},
        {"race": "trail race", "time": "3 hours 10 minutes"},
        {"race": "sprint triathlon", "time": "1 hour 29 minutes"},
    ],
    "dish": [
        "lasagna", "pad thai", "ramen", "shakshuka", "chicken tikka masala", "mac and cheese",
        "pho", "fish tacos", "mushroom risotto", "paella", "dumplings", "enchiladas",
    ],
    "disliked_food": [
        "olives", "cilantro", "mushrooms", "blue cheese", "licorice", "oysters", "eggplant",
        "raisins",
    ],
    "book": [
        "The Salt Orchard", "A Map of Quiet Rivers", "Night Trains to Nowhere",
        "The Glass Lighthouse", "Small Fires", "The Weight of Snow", "Letters from the Valley",
        "Paper Moons",
    ],
    "author": [
        "Helen Marsh", "Julian Okafor", "Rosa Lindqvist", "Peter Anand", "Mara Quinn",
        "Ivan Holt", "Sofía Ibarra",
    ],
    "car": [
        "Subaru Outback", "Honda Civic", "Toyota RAV4", "Volkswagen Golf", "Mazda 3",
        "Ford Ranger", "Kia Niro",
    ],
    "body_part": ["ankle", "wrist", "knee", "shoulder", "lower back"],
    "sport": ["soccer", "basketball", "volleyball", "tennis", "pickleball", "ultimate frisbee"],
    "volunteer_place": [
        "animal shelter", "food bank", "public library", "community garden",
        "children's hospital", "senior center",
    ],
    "city": [
        "Denver", "Portland", "Austin", "Boston", "Minneapolis", "Seattle", "Toronto",
        "Melbourne",
    ],
    "instrument": ["guitar", "piano", "cello", "ukulele", "violin", "drums", "saxophone"],
    "genre": ["jazz", "folk", "classical", "pop", "blues"],
    "gift": [
        "vintage record player", "telescope", "leather journal", "espresso machine",
        "pair of hiking boots", "watercolor set", "smartwatch", "film camera",
    ],
    "band": [
        "The Lumineers", "Arctic Monkeys", "Hozier", "Coldplay", "Mumford & Sons", "Norah Jones",
        "Tame Impala",
    ],
    "venue": [
        "the Greek Theatre", "Red Rocks", "the Fox Theater", "the arena downtown",
        "a tiny bar on Fifth Street", "the park bandshell",
    ],
    "plant": [
        "tomato plants", "sunflowers", "rose bushes", "basil plants", "strawberry plants",
        "lavender bushes",
    ],
    "friend_activity": [
        "went kayaking on the lake",
        "took a glassblowing class together",
        "went to a jazz club",
        "cooked a huge dumpling dinner",
        "did an escape room",
        "drove up the coast",
    ],
    "baby": [
        {"baby": "Ivy", "babykind": "girl", "babyobj": "her"},
        {"baby": "Rosie", "babykind": "girl", "babyobj": "her"},
        {"baby": "June", "babykind": "girl", "babyobj": "her"},
        {"baby": "Milo", "babykind": "boy", "babyobj": "him"},
        {"baby": "Ezra", "babykind": "boy", "babyobj": "him"},
        {"baby": "Finn", "babykind": "boy", "babyobj": "him"},
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
                    "We got back from {place} {when}! My {rel} and I spent {days} days there "
                    "{activity}.",
                    "Sorry I went quiet {when}, my {rel} and I were in {place} for {days} days, "
                    "{activity}.",
                    "Guess where I was {when}? {place}! Just me and my {rel}, {days} days of "
                    "{activity}.",
                    "{when_cap} my {rel} and I finally did that trip to {place}. We stayed {days} "
                    "days and spent most of it {activity}.",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "{place}? I'm so jealous. How was the food?",
                    "That sounds like a dream. Did you two get along the whole time?",
                    "Wow, {days} days! I need a vacation like that.",
                ),
            ),
            Step(
                OWNER,
                (
                    "It was perfect, honestly. I already miss it.",
                    "We argued about maps once, but otherwise it was great.",
                    "Amazing. I came back with way too many photos.",
                ),
            ),
        ),
        questions={
            "where": Question(
                "single",
                (
                    "Where did {owner} travel with {pos} {rel}?",
                    "Which place did {owner} and {pos} {rel} visit together?",
                ),
                "{place}",
            ),
            "when": Question(
                "temporal",
                ("When did {owner} go to {place}?", "When was {owner}'s trip to {place}?"),
                "{when_answer}",
            ),
            "who": Question(
                "single",
                ("Who went to {place} with {owner}?", "Who was {owner}'s companion in {place}?"),
                "{pos} {rel}",
            ),
            "days": Question(
                "single",
                (
                    "How long did {owner} stay in {place}?",
                    "How many days was {owner}'s vacation in {place}?",
                ),
                "{days} days",
            ),
        },
        distractors=(
            "A coworker of mine just came back from {place} with the worst sunburn.",
            "Have you seen the photos from {place} that everyone keeps posting? It looks unreal.",
            "My neighbor keeps telling me I should visit {place} in the spring.",
            "I watched a documentary about {place} last night, the old streets looked beautiful.",
        ),
        short="the trip to {place}",
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
                    "We adopted a little {breed} {young} {when}!",
                    "Meet the newest member of the family: a {breed} {young} we brought home "
                    "{when}.",
                    "So, {when} we went to the shelter just to look and came home with a {breed} "
                    "{young}.",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "No way, congrats! What's the {young}'s name?",
                    "Aww, I need pictures! What did you call it?",
                    "That's adorable. Did you pick a name yet?",
                ),
            ),
            Step(
                OWNER,
                (
                    "{petname}! The whole family voted and it stuck.",
                    "We went with {petname}, it just fits.",
                    "{petname}. It took us two days to agree on it.",
                ),
                "d",
            ),
            Step(
                PARTNER,
                ("{petname} is a perfect name.", "Love it. Give {petname} a scratch from me."),
            ),
        ),
        questions={
            "name": Question(
                "single",
                (
                    "What is the name of {owner}'s {species}?",
                    "What did {owner} call the new {species}?",
                    "What is the name of the {breed} {owner} adopted?",
                ),
                "{petname}",
                ("e", "d"),
            ),
            "breed": Question(
                "single",
                (
                    "What breed is {owner}'s {species}?",
                    "What kind of {species} does {owner} have?",
                    "What breed is the {young} {owner} brought home?",
                ),
                "{breed}",
            ),
            "when": Question(
                "temporal",
                (
                    "When did {owner} get {pos} {species} {petname}?",
                    "When did {petname} join {owner}'s family?",
                ),
                "{when_answer}",
                ("e", "d"),
            ),
        },
        distractors=(
            "My aunt has a {breed} that is spoiled rotten.",
            "The shelter downtown is running an adoption day next month.",
            "Someone on my street named their {species} {petname} too, funny coincidence.",
        ),
        short="adopting {petname}",
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
                    "Big news: {when} I got an offer to be a {role} at {company}, and I said yes!",
                    "I have news! {company} offered me a {role} position {when}. I accepted.",
                    "So the interviews paid off: I'm going to be a {role} at {company}, they "
                    "called me {when}.",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "Congratulations!! When do you start?",
                    "That's huge, congrats! When's your first day?",
                ),
            ),
            Step(
                OWNER,
                (
                    "In {month}. I'm nervous but mostly excited.",
                    "My first day is in {month}, so I have a few weeks to breathe.",
                    "Early {month}. The team seemed really kind during the interviews.",
                ),
                "d",
            ),
        ),
        questions={
            "role": Question(
                "single",
                (
                    "What position did {owner} accept?",
                    "What will {owner}'s new job title be?",
                    "What role did {company} offer {owner}?",
                ),
                "{role}",
            ),
            "company": Question(
                "single",
                (
                    "Which company hired {owner}?",
                    "Where is {owner} going to work next?",
                    "Which company made {owner} a job offer?",
                ),
                "{company}",
            ),
            "start": Question(
                "temporal",
                (
                    "When does {owner} begin the new job?",
                    "In which month is {owner}'s first day at {company}?",
                ),
                "{month}",
                ("e", "d"),
            ),
        },
        distractors=(
            "{company} is hiring again, a friend of mine applied there last year.",
            "My cousin worked as a {role} for a while and said the hours were brutal.",
            "Did you hear {company} is moving its office across town?",
        ),
        short="getting the job at {company}",
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
                    "I finally signed up for a {hobby} class {when}, it meets every {weekday} "
                    "evening.",
                    "New thing: I started {hobby} lessons {when}. {weekday} nights are now sacred.",
                    "{when_cap} I went to my first {hobby} class at the community center, and now "
                    "I go every {weekday}.",
                ),
                "e",
            ),
            Step(
                PARTNER, ("Ooh, how do you like it so far?", "That's so fun! Is the teacher good?")
            ),
            Step(
                OWNER,
                (
                    "I love it. The instructor, {teacher}, is incredibly patient with beginners "
                    "like me.",
                    "It's great, mostly thanks to {teacher}, who runs it and never makes anyone "
                    "feel silly.",
                ),
                "d",
            ),
        ),
        questions={
            "hobby": Question(
                "single",
                (
                    "What hobby did {owner} take up recently?",
                    "What kind of lessons is {owner} taking?",
                    "What class does {owner} go to on {weekday} evenings?",
                ),
                "{hobby}",
            ),
            "teacher": Question(
                "single",
                (
                    "Who teaches {owner}'s {hobby} class?",
                    "What is the name of {owner}'s {hobby} instructor?",
                ),
                "{teacher}",
                ("e", "d"),
            ),
            "day": Question(
                "single",
                (
                    "On which day of the week does {owner} go to {hobby}?",
                    "What night does {owner} have {hobby}?",
                ),
                "{weekday}",
            ),
        },
        distractors=(
            "My sister tried {hobby} once and quit after two weeks.",
            "The community center is offering a {hobby} workshop for kids this summer.",
            "I keep seeing ads for {hobby} studios everywhere.",
        ),
        short="starting the {hobby} class",
    ),
    "race": FactType(
        slots={"race": "vocab:race", "when": "when:yesterday|last_weekend|this_morning"},
        script=(
            Step(
                OWNER,
                (
                    "{when_cap} I ran my first {race}! I finished in {time}.",
                    "I did it: {when} I crossed the finish line of a {race} in {time}. My legs "
                    "are jelly.",
                    "Remember the {race} I was training for? I ran it {when}, {time}!",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "That's incredible, you should be so proud!",
                    "Wow! Did you cry at the finish? I would have.",
                ),
            ),
            Step(OWNER, ("A little, not gonna lie.", "I'm already looking at the next one.")),
        ),
        questions={
            "when": Question(
                "temporal",
                ("When did {owner} complete {pos} first {race}?", "When was {owner}'s {race}?"),
                "{when_answer}",
            ),
            "time": Question(
                "single",
                (
                    "What was {owner}'s finishing time?",
                    "How long did it take {owner} to finish the {race}?",
                ),
                "{time}",
            ),
        },
        distractors=(
            "The {race} downtown closed half the streets, traffic was a mess.",
            "My brother keeps trying to convince me to train for a {race}.",
            "I read that most people walk part of their first {race}.",
        ),
        short="running the {race}",
    ),
    "favorite_food": FactType(
        slots={"dish": "vocab:dish"},
        script=(
            Step(
                PARTNER,
                (
                    "Random question: what's your ultimate comfort food?",
                    "If you could only eat one thing forever, what would it be?",
                    "I'm cooking this weekend, what's your favorite thing to eat?",
                ),
            ),
            Step(
                OWNER,
                (
                    "{dish_cap}, no contest. I could eat it every single day.",
                    "Easy, {dish}. My grandma made it every Sunday when I was little.",
                    "Honestly? {dish_cap}. Nothing else even comes close.",
                ),
                "e",
            ),
            Step(PARTNER, ("Good answer.", "Noted, I'll make {dish} next time you're over.")),
        ),
        questions={
            "dish": Question(
                "single",
                (
                    "What is {owner}'s favorite dish?",
                    "What food does {owner} love most?",
                    "What is {owner}'s favorite comfort food?",
                    "Which dish could {owner} eat every day?",
                ),
                "{dish}",
            ),
        },
        distractors=(
            "There's a new place near my office that does {dish}, it was only okay.",
            "I tried to make {dish} from a video and burned the whole thing.",
        ),
    ),
    "dislike": FactType(
        slots={"food": "vocab:disliked_food"},
        script=(
            Step(
                PARTNER,
                (
                    "Want me to add {food} to the pizza?",
                    "I made a salad with {food}, want some?",
                    "The restaurant's special tonight comes with {food}, should I order it?",
                ),
            ),
            Step(
                OWNER,
                (
                    "Please no! I can't stand {food}, I've hated it since I was a kid.",
                    "Ugh, no thank you. {food_cap} is the one thing I will never eat.",
                    "Pass! Anything but {food}, the taste makes me gag.",
                ),
                "e",
            ),
            Step(PARTNER, ("Haha, noted. More for me.", "Fair enough, I'll leave it off.")),
        ),
        questions={
            "food": Question(
                "single",
                (
                    "What food does {owner} refuse to eat?",
                    "What does {owner} hate eating?",
                    "What food can't {owner} stand?",
                    "What would {owner} never eat?",
                ),
                "{food}",
            ),
        },
        distractors=(
            "My mom puts {food} in everything, I don't mind it.",
            "Apparently {food} is really good for you.",
        ),
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
                    "I'm officially an {elder} now! My {rel} {relname} had a baby {babykind} "
                    "{when}.",
                    "{when_cap} my {rel} {relname} had a healthy baby {babykind}, we're all over "
                    "the moon.",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "Congratulations! What's the baby's name?",
                    "Oh that's wonderful news! Did they pick a name?",
                ),
            ),
            Step(
                OWNER,
                (
                    "{baby}. I've already bought way too many tiny socks.",
                    "They named {babyobj} {baby}, after our grandmother.",
                ),
                "d",
            ),
        ),
        questions={
            "name": Question(
                "single",
                (
                    "What did {owner}'s {rel} name the baby?",
                    "What is the name of {relname}'s newborn?",
                ),
                "{baby}",
                ("e", "d"),
            ),
            "when": Question(
                "temporal",
                ("When was {relname}'s baby born?", "When did {owner} become an {elder}?"),
                "{when_answer}",
            ),
            "who": Question(
                "single",
                ("Who in {owner}'s family just had a baby?",),
                "{pos} {rel} {relname}",
            ),
        },
        distractors=(
            "My {rel} keeps asking when I'm going to have kids, it's exhausting.",
            "{relname} called me to complain about their landlord again.",
            "A friend of mine just had twins, I can't imagine.",
        ),
        short="the birth of {relname}'s baby",
    ),
    "book": FactType(
        slots={"book": "vocab:book", "author": "vocab:author"},
        script=(
            Step(
                OWNER,
                (
                    "I just finished '{book}' by {author} and I can't stop thinking about it.",
                    "I stayed up way too late finishing '{book}' by {author}.",
                    "Currently obsessed with {author}. I read '{book}' in three days.",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "What's it about?",
                    "Is it sad? You sound like you read something sad.",
                ),
            ),
            Step(
                OWNER,
                (
                    "Two sisters who stop speaking for twenty years. Beautiful and sad.",
                    "Hard to explain, but the ending wrecked me.",
                ),
            ),
        ),
        questions={
            "book": Question(
                "single",
                (
                    "Which novel did {owner} read recently?",
                    "What book kept {owner} up at night?",
                    "What book by {author} did {owner} finish?",
                ),
                "{book}",
            ),
            "author": Question(
                "single",
                ("Who wrote the book {owner} finished?", "Which writer is {owner} into lately?"),
                "{author}",
            ),
        },
        distractors=(
            "My book club picked '{book}' for next month, I haven't started it.",
            "I saw that {author} has a new novel coming out.",
        ),
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
                    "We finally replaced the old car! {when_cap} we bought a used {car} for "
                    "{price}.",
                    "Say hello to my new-to-me {car}. Got it {when} for {price}, after a lot of "
                    "haggling.",
                ),
                "e",
            ),
            Step(PARTNER, ("Nice! How does it drive?", "Ooh, what color?")),
            Step(
                OWNER,
                (
                    "Smooth, and it actually has working air conditioning.",
                    "Gray. Boring, but it has heated seats.",
                ),
            ),
        ),
        questions={
            "car": Question(
                "single",
                (
                    "What vehicle did {owner} buy?",
                    "Which car model does {owner} drive now?",
                    "What used car did {owner} buy?",
                ),
                "{car}",
            ),
            "price": Question(
                "single",
                ("How much did {owner} pay for the {car}?", "What did {owner}'s car cost?"),
                "{price}",
            ),
            "when": Question("temporal", ("When did {owner} get the {car}?",), "{when_answer}"),
        },
        distractors=(
            "My brother is thinking about getting a {car}, is that a good car?",
            "A {car} almost backed into me in the parking lot today.",
        ),
        short="buying the {car}",
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
                    "I'm on the couch with ice on my {body}. I twisted it playing {sport} {when}.",
                    "{when_cap} I hurt my {body} during a {sport} game, so no running for a while.",
                ),
                "e",
            ),
            Step(PARTNER, ("Oh no! Is it bad?", "Ouch! Did you see a doctor?")),
            Step(
                OWNER,
                (
                    "The doctor says rest for two weeks and it'll be fine.",
                    "Just a sprain, thankfully.",
                ),
            ),
        ),
        questions={
            "what": Question(
                "single",
                (
                    "What part of {pos} body did {owner} injure?",
                    "What did {owner} hurt recently?",
                    "What did {owner} hurt playing {sport}?",
                ),
                "{pos} {body}",
            ),
            "sport": Question(
                "single",
                (
                    "What sport was {owner} playing when {subj} got hurt?",
                    "Which game led to {owner}'s injury?",
                ),
                "{sport}",
            ),
            "when": Question("temporal", ("When did {owner} hurt {pos} {body}?",), "{when_answer}"),
        },
        distractors=(
            "My {body} has been acting up since I started working from the couch.",
            "We should play {sport} sometime, a group meets at the park on Sundays.",
            "Half my office plays {sport} at lunch now.",
        ),
        short="the {sport} injury",
    ),
    "volunteer": FactType(
        slots={"org": "vocab:volunteer_place", "weekday": "vocab:weekday"},
        script=(
            Step(
                PARTNER,
                (
                    "You seem busier than usual, what's new?",
                    "What have you been up to in the mornings lately?",
                ),
            ),
            Step(
                OWNER,
                (
                    "I've been volunteering at the {org} every {weekday} morning. It's the best "
                    "part of my week.",
                    "I started helping out at the {org} every {weekday}, mostly sorting donations "
                    "and chatting with people.",
                ),
                "e",
            ),
            Step(PARTNER, ("That's really lovely.", "How did you get into that?")),
            Step(
                OWNER,
                (
                    "A friend dragged me along once and I kept going.",
                    "I wanted to do something that isn't staring at a screen.",
                ),
            ),
        ),
        questions={
            "where": Question(
                "single",
                (
                    "Where does {owner} do volunteer work?",
                    "Which organization does {owner} give time to?",
                    "Where does {owner} spend {weekday} mornings helping out?",
                ),
                "the {org}",
            ),
            "day": Question(
                "single",
                ("On what day does {owner} volunteer?", "Which morning does {owner} give away?"),
                "{weekday}",
            ),
        },
        distractors=(
            "The {org} near me is asking for donations again.",
            "I read an article about how the {org} downtown is short on staff.",
        ),
    ),
    "move": FactType(
        slots={"city": "vocab:city", "month": "month", "rel": "vocab:relative"},
        script=(
            Step(
                OWNER,
                (
                    "Big decision made: we're moving to {city} in {month}.",
                    "So we signed a lease in {city}! The move is in {month}.",
                ),
                "e",
            ),
            Step(PARTNER, ("Whoa, why {city}?", "That's a big change! What's pulling you there?")),
            Step(
                OWNER,
                (
                    "My {rel} lives there and we want to be closer to family.",
                    "Mostly to be near my {rel}, and rent is a bit cheaper.",
                ),
                "d",
            ),
        ),
        questions={
            "where": Question(
                "single",
                (
                    "Where is {owner} relocating to?",
                    "Which city will {owner} live in next?",
                    "Where is {owner} moving in {month}?",
                ),
                "{city}",
            ),
            "why": Question(
                "single",
                ("Why did {owner} decide to move to {city}?",),
                "to be closer to {pos} {rel}",
                ("e", "d"),
            ),
            "when": Question("temporal", ("When is {owner}'s move happening?",), "{month}"),
        },
        distractors=(
            "{city} is on the list of places my company might send me.",
            "I've heard winters in {city} are rough.",
        ),
        short="deciding to move to {city}",
    ),
    "instrument": FactType(
        slots={"instrument": "vocab:instrument", "months": "int:2:11", "genre": "vocab:genre"},
        script=(
            Step(
                OWNER,
                (
                    "Confession: I've been secretly learning the {instrument} for {months} months.",
                    "I've been practicing {instrument} for about {months} months now, mostly "
                    "{genre} stuff.",
                ),
                "e",
            ),
            Step(
                PARTNER,
                ("No way! Play something for me next time.", "What kind of music are you playing?"),
            ),
            Step(
                OWNER,
                (
                    "Mostly {genre}. My neighbors are very patient people.",
                    "{genre_cap}, mostly. Slowly getting less terrible.",
                ),
                "d",
            ),
        ),
        questions={
            "instrument": Question(
                "single",
                (
                    "What instrument is {owner} learning to play?",
                    "Which instrument has {owner} been working on?",
                ),
                "{instrument}",
            ),
            "how_long": Question(
                "single",
                ("How long has {owner} been playing the {instrument}?",),
                "{months} months",
            ),
            "genre": Question(
                "single",
                (
                    "What style of music does {owner} play?",
                    "What kind of songs does {owner} practice on the {instrument}?",
                ),
                "{genre}",
                ("e", "d"),
            ),
        },
        distractors=(
            "My downstairs neighbor practices {instrument} at 7 a.m., it's a lot.",
            "I always wanted to learn {instrument} but never had the patience.",
            "There's a {genre} festival in the park next month.",
        ),
    ),
    "gift": FactType(
        slots={"gift": "vocab:gift", "rel": "vocab:relative"},
        script=(
            Step(
                OWNER,
                (
                    "My {rel} surprised me with a {gift} for my birthday!",
                    "Look what I got for my birthday: a {gift}, from my {rel}.",
                ),
                "e",
            ),
            Step(
                PARTNER,
                (
                    "Happy belated birthday! That's so thoughtful.",
                    "Oh wow, your {rel} has great taste.",
                ),
            ),
        ),
        questions={
            "gift": Question(
                "single",
                (
                    "What present did {owner} receive for {pos} birthday?",
                    "What did {owner} get when {subj} turned a year older?",
                ),
                "a {gift}",
            ),
            "who": Question("single", ("Who gave {owner} the {gift}?",), "{pos} {rel}"),
        },
        distractors=(
            "I need a birthday present for my coworker, any ideas? Maybe a {gift}?",
            "I saw a {gift} on sale today and almost bought it.",
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
                    "{when_cap} we saw {band} live at {venue}. My ears are still ringing.",
                    "I finally got to see {band}! It was {when} at {venue}, and they played for "
                    "two hours.",
                ),
                "e",
            ),
            Step(PARTNER, ("Jealous! Did they play the old stuff?", "How was the crowd?")),
            Step(
                OWNER,
                ("All the old songs, I screamed every word.", "Packed, but everyone was so happy."),
            ),
        ),
        questions={
            "band": Question(
                "single",
                ("Which band did {owner} see perform?", "Who did {owner} watch in concert?"),
                "{band}",
            ),
            "venue": Question(
                "single",
                ("Where was the {band} show?", "At which venue did {owner} see {band}?"),
                "{venue}",
            ),
            "when": Question(
                "temporal", ("When did {owner} go to the {band} concert?",), "{when_answer}"
            ),
        },
        distractors=(
            "{band} came on the radio in the cab this morning.",
            "Tickets for {band} sold out in minutes, apparently.",
            "There's a show at {venue} next week, but I can't go.",
        ),
        short="the {band} concert",
    ),
    "garden": FactType(
        slots={"plant": "vocab:plant", "count": "int:4:16"},
        script=(
            Step(
                OWNER,
                (
                    "I planted {count} {plant} in the backyard this spring.",
                    "My garden project is going well: {count} {plant} so far, all still alive.",
                ),
                "e",
            ),
            Step(PARTNER, ("Look at you with the green thumb!", "Are they growing okay?")),
            Step(
                OWNER,
                (
                    "So far so good, the rabbits haven't found them yet.",
                    "Mostly, I'm watering them every evening.",
                ),
            ),
        ),
        questions={
            "plant": Question(
                "single",
                ("What is {owner} growing in {pos} garden?", "What did {owner} put in the yard?"),
                "{plant}",
            ),
            "count": Question("single", ("How many {plant} did {owner} plant?",), "{count}"),
        },
        distractors=(
            "My mom gave me some {plant} seedlings but they died within a week.",
            "The garden center had {plant} on sale.",
        ),
    ),
    # Chains: the second script goes in a later session; their questions need both.
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
                    "My {rel} {relname} just moved to {city} for a fresh start.",
                    "{relname}, my {rel}, packed up everything and moved to {city} this month.",
                ),
                "e",
            ),
            Step(PARTNER, ("That's brave! Does {relname} like it there?",)),
            Step(
                OWNER, ("So far, though the apartment is tiny.", "Loves it, misses the food here.")
            ),
        ),
        later=(
            Step(
                OWNER,
                (
                    "Good news from {relname}: {when} they got hired as a {role}!",
                    "{relname} finally found work, {when} they started as a {role}.",
                ),
                "l",
            ),
            Step(PARTNER, ("Amazing, tell {relname} congrats from me!", "That's such a relief.")),
        ),
        questions={
            "job": Question(
                "multi",
                (
                    "What job did {owner}'s {rel} get after the move?",
                    "What does {owner}'s {rel} in {city} do for work now?",
                ),
                "{role}",
                ("e", "l"),
            ),
            "city": Question(
                "multi",
                ("Where does {owner}'s {rel} who works as a {role} live?",),
                "{city}",
                ("e", "l"),
            ),
        },
        distractors=(
            "A friend of mine works as a {role} and loves it.",
            "{city} is getting so expensive, I heard.",
        ),
    ),
    "roommate": FactType(
        slots={"friend": "person", "activity": "vocab:friend_activity"},
        script=(
            Step(
                OWNER,
                (
                    "My old college roommate {friend} is coming to visit in a couple of weeks.",
                    "{friend}, my roommate from college, booked a flight to come see me!",
                ),
                "e",
            ),
            Step(PARTNER, ("Fun! What are you two going to do?",)),
            Step(OWNER, ("No idea yet, any suggestions?", "Eat a lot, probably.")),
        ),
        later=(
            Step(
                OWNER,
                (
                    "{friend} was here all weekend. We {activity} and talked until 2 a.m.",
                    "Best weekend in ages: {friend} and I {activity}.",
                ),
                "l",
            ),
            Step(
                PARTNER, ("That sounds like the perfect visit.", "I love that you two stay close.")
            ),
        ),
        questions={
            "activity": Question(
                "multi",
                (
                    "What did {owner} do with {pos} college roommate?",
                    "How did {owner} spend the weekend with {pos} old roommate?",
                ),
                "{activity}",
                ("e", "l"),
            ),
            "who": Question(
                "single",
                ("What is the name of {owner}'s college roommate?",),
                "{friend}",
            ),
        },
        distractors=("My roommate in college used to sleepwalk, I still think about it.",),
    ),
}

ORDER_QUESTIONS = (
    "Which happened first for {owner}: {a} or {b}?",
    "What came earlier, {a} or {b}?",
)

GREETINGS = [
    ("Hey {name}! How's it going?", "Hi {name}! Good, good. It's been a while!"),
    ("Hi {name}, long time no talk!", "Hey {name}! I know, life has been busy."),
    ("Good morning, {name}! Got a minute to chat?", "Morning! Sure, I'm just having breakfast."),
    ("Hey there! How was your weekend, {name}?", "Hi {name}! It was nice, pretty relaxed."),
    ("{name}! I have so much to tell you.", "Oh no, or oh yes? Tell me everything, {name}."),
    ("Hi {name}, happy Friday!", "Happy Friday, {name}! Finally."),
    ("Evening, {name}! Are you free to talk?", "Always for you. What's up, {name}?"),
]

CLOSINGS = [
    ("I should get going, talk soon!", "Bye {name}, take care!"),
    ("Okay, dinner's ready, I have to run.", "Enjoy! Talk later, {name}."),
    ("It's getting late, good night {name}!", "Night! Sleep well."),
    ("Thanks for the chat, {name}. This was nice.", "Always! Talk soon."),
    ("My break is over, back to work. Bye!", "Good luck, {name}!"),
]

FILLER = [
    ("How was your week, {name}?", ["Long! Work has been nonstop, but I survived.",
                                    "Pretty quiet, honestly. I needed that."]),
    ("Work has been hectic, we have a big deadline on {weekday}.",
     ["Ugh, deadlines. Hang in there.", "You'll get through it, you always do."]),
    ("I tried a new recipe for {dish} last night.",
     ["How did it turn out?", "Ooh, send me the recipe!"]),
    ("The weather has been so gloomy here.",
     ["Same here, I've been living in sweaters.", "I can't wait for spring."]),
    ("Have you watched anything good lately?",
     ["I started a baking show, very relaxing.", "Nothing, I keep falling asleep on the couch."]),
    ("My {relative} called me today, we talked for an hour.",
     ["That's sweet. How are they doing?", "I love those long calls."]),
    ("I've been thinking about taking a trip somewhere warm.",
     ["Do it! You deserve a break.", "Where would you go?"]),
    ("I keep seeing posts about {place}, it looks beautiful.",
     ["It really does, someday!", "Everyone seems to be going there lately."]),
    ("I'm trying to get back into a morning routine.",
     ["How's that going?", "Good luck, mornings are hard."]),
    ("Our team at work is finally getting a new manager.",
     ["Hopefully a good one!", "Change can be good."]),
    ("I spent the whole weekend cleaning the apartment.",
     ["Satisfying though, right?", "I should do that too, honestly."]),
    ("Do you still go to the gym?",
     ["When I can, which is not often.", "Three times a week, trying to keep it up."]),
    ("I finally fixed the leaky faucet myself!",
     ["Look at you, so handy!", "Online tutorials for the win."]),
    ("There's a farmers market near me on {weekday}s now.",
     ["Lucky, I love farmers markets.", "Do they have good bread?"]),
    ("I'm so tired, I barely slept last night.",
     ["Oh no, was something on your mind?", "Take a nap if you can."]),
    ("I read somewhere that {sport} is the fastest growing sport.",
     ["I believe it, everyone plays it now.", "I've never even tried it."]),
    ("My {relative} wants to plan a family reunion.",
     ["That sounds fun and also chaotic.", "Will you help organize?"]),
    ("Traffic was awful today, it took me an hour to get home.",
     ["That's the worst.", "Podcasts help, at least."]),
    ("I'm thinking of learning a new language.", ["Which one?", "That's a great idea."]),
    ("We had a team lunch at a {dish} place today.",
     ["Was it any good?", "Nice, free lunch is the best lunch."]),
    ("I've been listening to {band} nonstop this week.",
     ["Great choice.", "I need to give them another listen."]),
    ("I'm trying to read more instead of scrolling.",
     ["Same goal here. It's hard!", "Any good recommendations?"]),
    ("The kids next door started a lemonade stand.",
     ["Adorable. Did you buy some?", "Little entrepreneurs!"]),
    ("I've been meal prepping on Sundays.",
     ["Does it actually save time?", "I keep meaning to try that."]),
    ("My phone screen cracked again.", ["Oh no, again?", "Time for a sturdier case."]),
    ("I rearranged my living room and it feels like a new place.",
     ["I love doing that.", "Send me a picture!"]),
    ("Have you ever tried {hobby}?",
     ["Once, and I was terrible at it.", "No, but I've always been curious."]),
    ("I've been drinking way too much coffee lately.",
     ["Same, it's a problem.", "Maybe switch to tea for a bit?"]),
    ("My {relative} might visit sometime this year.", ["Fun! Any plans?", "That'll be nice."]),
    ("I watched a travel show about {city} last night.",
     ["Was it good?", "I've always wanted to go there."]),
    ("We're having a potluck at work on {weekday}.",
     ["What are you bringing?", "Potlucks are the best."]),
    ("I signed up for a newsletter about {hobby} and now I get ten emails a day.",
     ["Unsubscribe immediately.", "Ha, that happens to me too."]),
    ("My plants are finally growing again.", ["Yay! What did you change?", "Plant parent win."]),
    ("I got caught in the rain without an umbrella today.",
     ["Classic. Did you get soaked?", "That's the worst feeling."]),
    ("There's a new bakery on my street.", ["Dangerous!", "What's their best thing?"]),
    ("I've been trying to go to bed earlier.", ["Is it working?", "Good for you."]),
    ("My laptop died in the middle of a meeting today.",
     ["Nightmare.", "Did you lose anything?"]),
    ("I'm thinking about repainting my bedroom.", ["What color?", "Fun project!"]),
    ("Someone at {company} reached out to me about a job.",
     ["Interesting! Are you curious?", "Recruiters are everywhere these days."]),
    ("I finally cleaned out my closet and donated three bags of clothes.",
     ["That must feel great.", "I need to do that."]),
    ("The new season of my favorite show comes out on {weekday}.",
     ["Are you going to binge it?", "No spoilers please!"]),
    ("I made a playlist for long drives.", ["Share it with me!", "What's on it?"]),
    ("It's been so long since I went to the movies.",
     ["We should go together sometime.", "Same, I miss it."]),
    ("My back hurts from sitting all day.",
     ["Get a better chair!", "Stretching helps me a lot."]),
    ("I've been journaling every night before bed.", ["Does it help?", "I love that."]),
    ("Do you have any plans for the holidays?", ["Probably just family stuff.", "Not yet, you?"]),
    ("I keep forgetting to water my plants.",
     ["Set a reminder on your phone!", "Cacti, my friend. Get cacti."]),
    ("I saw the cutest dog on my walk today.", ["What kind?", "Did you get to pet it?"]),
    ("I want to start saving for a house.",
     ["Smart. It's so expensive now.", "Good luck, that's a big goal."]),
    ("I've been trying to cook more at home.",
     ["What's been your best dish so far?", "Cheaper and healthier, nice."]),
    ("My {relative} got me into {band}.",
     ["Good taste runs in the family.", "Which album should I start with?"]),
    ("What are you reading these days?",
     ["A mystery novel, nothing fancy.", "Honestly just work emails."]),
    ("There's a street fair downtown this weekend.",
     ["Are you going?", "I love those, so much food."]),
    ("I need a new hobby, I've been so bored lately.",
     ["Maybe something creative?", "Join a club! Meet people."]),
    ("My coworker brought homemade {dish} to the office.",
     ["Lucky you!", "Was it as good as it sounds?"]),
    ("The power went out for three hours last night.",
     ["Candles and board games?", "That's so annoying."]),
    ("I've been walking to work instead of driving.",
     ["How long does it take?", "Good for you, fresh air!"]),
    ("I'm finally getting my eyes checked next week.",
     ["About time!", "Glasses would look great on you."]),
    ("The neighbors are renovating and the noise is unbearable.",
     ["Noise-canceling headphones!", "Ugh, that's the worst."]),
    ("I found my old photo albums from high school.",
     ["Oh no, the haircuts!", "Those must be hilarious."]),
]  # fmt: skip

REACTIONS = [
    "Ha, that's funny.",
    "Oh really? I didn't know that.",
    "Interesting!",
    "Hm, good to know.",
    "That's wild.",
    "Makes sense.",
    "Oh no, really?",
    "I've heard that too.",
]

BRIDGES = [
    "Haha, true.",
    "Totally.",
    "Right?",
    "I know what you mean.",
    "Yeah.",
    "For sure.",
    "Oh definitely.",
    "Mm-hm, go on.",
]

# Sentences said around a line: a lead before what matters (so a message's first
# sentence is not always its point), a tail after it.
LEADS = [
    "Okay, so.",
    "You won't believe this.",
    "Oh, before I forget!",
    "Life update!",
    "Sorry, it's been a crazy few weeks.",
    "Hey, quick thing.",
    "So much has happened since we last talked.",
    "Wait, I haven't told you yet?",
]

TAILS = [
    "Anyway, how have you been?",
    "It's been a long week.",
    "I'll send you pictures later.",
    "Can't wait to tell you more.",
    "Time flies, honestly.",
    "Long story.",
    "I'm still processing it, to be honest.",
    "Anyway, that's my news.",
    "We should catch up properly soon.",
    "Tell me what's new with you too.",
]
