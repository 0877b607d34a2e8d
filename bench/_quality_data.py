"""The notes and questions of bench/search_quality.py, generated from templates and word lists
(seeded, so every run and every store gets the same text, and the cached vectors stay valid).

A note says that a person does something with a thing in some circumstance:
"Maria is a big fan of the couch in the lounge". Every concept, thing and circumstance has
two wordings of one meaning (couch/sofa, lounge/living room); notes take either, and the
targets take the first. A paraphrase question takes the second wording throughout and the
question's own phrasing, and names no person: it shares the target's meaning, not its words,
while its words are in thousands of other notes (the RRF trap: a note that shares words but
not meaning tops the full-text list). The targets' things are in no other note but two near
duplicates made on purpose for each target (the same concept and thing, another
circumstance; the same concept and circumstance, another thing) and the other targets';
the bulk says the same concepts and circumstances of other things.

Two harder sets ask for a rare word that is in the note: a code ("the alarm code ... is
qx4417") or a surname; the near duplicates there differ only by that word, so meaning
cannot tell them apart and full text must put the note first.

The first 5,000 notes of the 100,000 are the 5,000 set: the vectors cached for one serve both.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

VERSION = 2  # bump when the text changes: the cached vectors are keyed by it
CALLERS = 100
NAMESPACES = [*(f"caller:user{n}" for n in range(CALLERS)), "owner", "shared"]
TARGETS = 50  # paraphrase questions; as many code and surname questions in all
RARE = 25  # code questions, and as many surname questions

# (the note's wordings, the question's wording): one meaning each.
Concept = tuple[list[str], str, list[tuple[str, str]], list[tuple[str, str]]]
CONCEPTS: list[Concept] = [
    (
        ["is a big fan of", "really enjoys"],
        "who loves",
        [
            ("the couch", "the sofa"),
            ("the film club", "the movie society"),
            ("the bicycle", "the bike"),
            ("the biscuits", "the cookies"),
            ("the allotment", "the vegetable garden"),
            ("the motorway drive", "the highway trip"),
        ],
        [
            ("in the lounge", "in the living room"),
            ("in autumn", "in the fall"),
            ("at the weekend", "on saturdays and sundays"),
            ("after supper", "following dinner"),
            ("with the kids", "with the children"),
        ],
    ),
    (
        ["has an appointment with", "is booked to see"],
        "who has a meeting scheduled with",
        [
            ("the physician", "the doctor"),
            ("the attorney", "the lawyer"),
            ("the dentist", "the tooth specialist"),
            ("the accountant", "the tax advisor"),
            ("the landlord", "the property owner"),
            ("the vet", "the animal doctor"),
        ],
        [
            ("on monday morning", "at the start of the week"),
            ("next month", "in a few weeks"),
            ("before the holiday", "ahead of the vacation"),
            ("at noon", "at midday"),
            ("downtown", "in the city centre"),
        ],
    ),
    (
        ["lost", "misplaced"],
        "who cannot find",
        [
            ("the mobile", "the cell phone"),
            ("the car keys", "the automobile keys"),
            ("the wallet", "the purse"),
            ("the spectacles", "the glasses"),
            ("the passport", "the travel document"),
            ("the umbrella", "the parasol"),
        ],
        [
            ("on the train", "while commuting by rail"),
            ("at the airport", "in the terminal"),
            ("in the lift", "in the elevator"),
            ("at the cinema", "at the movie theater"),
            ("in the taxi", "in the cab"),
        ],
    ),
    (
        ["is allergic to", "reacts badly to"],
        "who gets sick from",
        [
            ("peanuts", "groundnuts"),
            ("shellfish", "prawns and crab"),
            ("cat hair", "feline fur"),
            ("pollen", "flower dust"),
            ("penicillin", "that antibiotic"),
            ("dairy", "milk products"),
        ],
        [
            ("since childhood", "from a young age"),
            ("quite severely", "very seriously"),
            ("in springtime", "during the spring months"),
            ("according to the doctor", "as the physician said"),
            ("at restaurants", "when eating out"),
        ],
    ),
    (
        ["wants to buy", "is saving up for"],
        "who hopes to purchase",
        [
            ("a flat", "an apartment"),
            ("a new automobile", "a new car"),
            ("a sailing boat", "a yacht"),
            ("a laptop", "a notebook computer"),
            ("a piano", "a keyboard instrument"),
            ("a puppy", "a young dog"),
        ],
        [
            ("this year", "within the next twelve months"),
            ("near the sea", "by the coast"),
            ("second hand", "used"),
            ("for the family", "for the household"),
            ("after the promotion", "once the raise comes"),
        ],
    ),
    (
        ["is afraid of", "is frightened by"],
        "who fears",
        [
            ("spiders", "arachnids"),
            ("flying", "air travel"),
            ("deep water", "the open sea"),
            ("thunderstorms", "lightning"),
            ("heights", "tall places"),
            ("large dogs", "big hounds"),
        ],
        [
            ("at night", "after dark"),
            ("ever since the accident", "since the crash"),
            ("on holiday", "while on vacation"),
            ("a little", "slightly"),
            ("more than anything", "above all else"),
        ],
    ),
    (
        ["is learning", "takes lessons in"],
        "who is studying",
        [
            ("the violin", "the fiddle"),
            ("spanish", "the language of spain"),
            ("carpentry", "woodwork"),
            ("photography", "taking pictures"),
            ("the guitar", "a six string instrument"),
            ("cooking", "making meals"),
        ],
        [
            ("online", "over the internet"),
            ("twice a week", "two times weekly"),
            ("with a tutor", "with a private teacher"),
            ("at the community centre", "at the local hall"),
            ("for fun", "as a hobby"),
        ],
    ),
    (
        ["repaired", "fixed"],
        "who mended",
        [
            ("the boiler", "the water heater"),
            ("the fridge", "the refrigerator"),
            ("the roof", "the tiles on top of the house"),
            ("the tap", "the faucet"),
            ("the fence", "the garden barrier"),
            ("the dishwasher", "the machine that washes plates"),
        ],
        [
            ("last week", "seven days ago"),
            ("without help", "alone"),
            ("in the rain", "during a downpour"),
            ("cheaply", "for very little money"),
            ("in the basement", "in the cellar"),
        ],
    ),
]
NAMES = [
    "maria", "james", "aisha", "tom", "lena", "raj", "sofia", "ben", "chloe", "omar",
    "nina", "pedro", "yuki", "liam", "eva", "kofi", "mei", "sam", "ines", "hugo",
]  # fmt: skip
FILLERS = [
    "",
    " as mentioned yesterday",
    " according to the last chat",
    " which came up in conversation",
    " noted for later",
    " good to remember",
]
QUESTION_STARTS = ["", "tell me ", "do you know "]
LOCKS = [
    ("the alarm code for", "the security code of"),
    ("the wifi password at", "the wireless key of"),
    ("the locker number at", "the storage locker of"),
]
PLACES = ["the office", "the cabin", "the studio", "the garage", "the warehouse"]
# Surnames made of syllables (no digit that a rule could spot): rare words of plain letters.
SYLLABLES = ["ok", "af", "lind", "qvist", "pet", "rak", "naka", "mur", "oye", "lar", "bran", "nig"]


@dataclass(frozen=True)
class Note:
    namespace: str
    key: str
    content: str


@dataclass(frozen=True)
class Question:
    kind: str  # paraphrase, code, surname
    text: str
    key: str  # the target note's key
    namespace: str  # the target's namespace: a caller's search asks it and shared


def _statement(rng: random.Random, c: int, t: int, m: int, first: bool) -> str:
    verbs, _, things, circumstances = CONCEPTS[c]
    side = 0 if first else rng.randint(0, 1)
    name = rng.choice(NAMES)
    thing = things[t][side if first else rng.randint(0, 1)]
    circumstance = circumstances[m][side if first else rng.randint(0, 1)]
    return f"{name} {rng.choice(verbs)} {thing} {circumstance}{rng.choice(FILLERS)}"


def _paraphrase(rng: random.Random, c: int, t: int, m: int) -> str:
    _, asked, things, circumstances = CONCEPTS[c]
    return f"{rng.choice(QUESTION_STARTS)}{asked} {things[t][1]} {circumstances[m][1]}"


def _code(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjkmnpqrstvwxz") for _ in range(2)) + str(
        rng.randint(1000, 9999)
    )


def generate(size: int, seed: int) -> tuple[list[Note], list[Question]]:
    """`size` notes (at least 5,000) and the questions whose targets are among them; the
    first 5,000 notes, and the questions, are the same for every size of one seed."""
    if size < 5000:
        raise ValueError("the smallest set is 5,000 notes")
    rng = random.Random(seed)
    triples = [
        (c, t, m)
        for c, (_, _, things, circumstances) in enumerate(CONCEPTS)
        for t in range(len(things))
        for m in range(len(circumstances))
    ]
    # A target's thing (every other one of a concept's) is in no note of the bulk: only in
    # the targets and their near duplicates; the bulk has the concept and circumstances.
    targets = rng.sample([x for x in triples if x[1] % 2 == 0], TARGETS)
    bulk = [x for x in triples if x[1] % 2 == 1]
    taken = set(targets)
    texts: dict[int, str] = {}  # slot in the first 5,000 -> a placed note's text
    questions: list[Question] = []
    slots = iter(rng.sample(range(5000), 5000))

    def place(kind: str, note: str, question: str) -> None:
        slot = next(slots)
        # Targets only in callers' namespaces: a caller's search asks its own and shared.
        while slot % len(NAMESPACES) >= CALLERS:
            slot = next(slots)
        texts[slot] = note
        questions.append(Question(kind, question, f"note-{slot}", NAMESPACES[slot % 102]))

    for c, t, m in targets:
        place("paraphrase", _statement(rng, c, t, m, first=True), _paraphrase(rng, c, t, m))
        # Near duplicates: the same concept and thing elsewhere, the same concept and place
        # with another thing, in the question's own wording.
        _, _, things, circumstances = CONCEPTS[c]
        for other in ((c, t, (m + 1) % len(circumstances)), (c, (t + 1) % len(things), m)):
            if other not in taken:
                texts[next(slots)] = _statement(rng, *other, first=False)
    named = random.Random(seed + 1)
    surnames = list(dict.fromkeys("".join(named.sample(SYLLABLES, 3)) for _ in range(200)))[:30]
    rng.shuffle(surnames)
    for n in range(RARE):
        lock, lock_asked = LOCKS[n % len(LOCKS)]
        place_name = PLACES[n % len(PLACES)]
        code = _code(rng)
        place("code", f"{lock} {place_name} is {code}", f"{lock_asked} {place_name} {code}")
        for _ in range(4):  # the same sentence, another code: meaning cannot choose
            texts[next(slots)] = f"{lock} {place_name} is {_code(rng)}"
        c, t, m = rng.choice(triples)
        surname = surnames[n]
        said = _statement(rng, c, t, m, first=True).split(" ", 1)[1]
        place("surname", f"mrs {surname} {said}", f"what about mrs {surname}")
        for _ in range(4):
            texts[next(slots)] = f"mrs {rng.choice(surnames[RARE:])} {said}"
    notes = []
    for n in range(size):
        text = texts.get(n)
        if text is None:
            text = _statement(rng, *rng.choice(bulk), first=False)
        notes.append(Note(NAMESPACES[n % len(NAMESPACES)], f"note-{n}", text))
    return notes, questions
