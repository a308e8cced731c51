"""Deterministic synthetic text: the general pre-training corpus and the demo tenants' datasets.

The general corpus teaches the tiny base model the chat format and a few answer templates with *random*
facts, so that a tenant's fine-tune has something real to learn: the base model answers in the right shape
but with the wrong facts, and the tuned adapter learns the tenant's facts.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

Conversation = list[dict[str, str]]

_THINGS = [
    "lamp", "river", "garden", "bridge", "engine", "window", "mountain", "library", "kettle", "harbor",
    "violin", "tower", "meadow", "compass", "ladder", "lantern", "canyon", "market", "station", "orchard",
]
_ATTRIBUTES = ["color", "height", "age", "price", "size", "weight", "code", "owner"]
_VALUES = [
    "red", "blue", "green", "tall", "small", "seven", "twelve", "old", "new", "heavy", "light", "gold",
    "silver", "north", "south", "alpha", "beta", "gamma", "delta", "omega",
]
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_GREETINGS = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi there.", "Hi! What can I do for you?"),
    ("Thanks for the help.", "You are welcome."),
    ("Good morning.", "Good morning! How can I help?"),
]
_WORDS = _THINGS + _VALUES + ["quick", "brown", "fox", "jumps", "over", "lazy", "dog", "sun", "moon", "star"]

# Demo tenant domains: facts that the general corpus never states. Each tenant has several facts about each of
# many items and asks about each fact in several ways, so that its data holds hundreds of distinct examples and
# its held-out split asks, in new words, about facts that the training split states.
ACME_PRODUCTS = {  # product: (return window in days, warranty in years)
    "kettle pro": (30, 2), "smart lamp": (14, 1), "desk fan": (60, 3), "air purifier": (45, 5),
    "coffee grinder": (90, 2), "rice cooker": (30, 3), "toaster max": (14, 1), "blender one": (60, 5),
    "water filter": (45, 1), "heater mini": (90, 3), "robot vacuum": (30, 5), "steam iron": (14, 2),
    "laptop stand": (60, 1), "tea maker": (45, 2), "hair dryer": (90, 1), "bread maker": (30, 5),
    "night light": (14, 3), "wall clock": (60, 2), "door bell": (45, 3), "ice maker": (90, 5),
}
GLOBEX_SERVICES = {  # service: (owning team, region it runs in)
    "billing-api": ("payments", "north"), "search-index": ("discovery", "south"),
    "auth-gateway": ("identity", "east"), "mail-relay": ("messaging", "west"), "cdn-edge": ("platform", "north"),
    "report-builder": ("analytics", "south"), "image-resizer": ("media", "east"), "feature-flags": ("platform", "west"),
    "user-profile": ("identity", "north"), "order-router": ("payments", "south"),
    "push-notifier": ("messaging", "east"),
    "log-shipper": ("observability", "west"), "rate-limiter": ("platform", "south"), "tax-engine": ("payments", "east"),
    "media-store": ("media", "north"), "audit-trail": ("observability", "south"),
    "cart-api": ("payments", "west"), "geo-lookup": ("discovery", "east"), "sms-gateway": ("messaging", "north"),
    "metrics-api": ("observability", "east"),
}
ACME_SYSTEM = "You are the Acme support assistant."
GLOBEX_SYSTEM = "You are the Globex service directory."
_REGIONS = ["north", "south", "east", "west"]
# Years in digits: as number words they taught a fine-tune that "two" and "five" are answers, and it then
# answered the golden set's sums with them.
_WARRANTY_YEARS = [1, 2, 3, 5]

# The ways each fact is asked. The general corpus uses the first few of each list (with random facts), so the
# base model knows the question and answer shapes; the tenants use all of them, so that some of their
# questions are worded in ways the base model never saw.
RETURN_QUESTIONS = [
    "What is the return window for the {}?", "How many days do I have to return the {}?",
    "Can you tell me the return period for the {}?", "I bought a {}. How long can I return it?",
    "How long is the return window on the {}?", "For how many days will you take back the {}?",
    "Until when can I send back the {}?", "I want to return my {}. How many days do I have?",
]
WARRANTY_QUESTIONS = [
    "How long is the warranty on the {}?", "What warranty does the {} come with?",
    "How many years of warranty does the {} have?", "My {} broke. How long is its warranty?",
    "What is the warranty period for the {}?", "Is the {} under warranty, and for how long?",
]
OWNER_QUESTIONS = [
    "Which team owns the {} service?", "Who owns {}?", "Who is responsible for {}?",
    "Which team is on call for {}?", "Who maintains the {} service?", "I found a bug in {}. Which team owns it?",
    "Which team should I ask about {}?", "Who runs the {} service?",
]
REGION_QUESTIONS = [
    "Where does {} run?", "Which region is {} deployed in?", "In which region does the {} service run?",
    "Where is the {} service hosted?", "Which region hosts {}?", "I need the region of {}. Where is it?",
]
BASE_PHRASINGS = 3
"""How many of each question list the general corpus uses."""


def return_answer(product: str, days: int) -> str:
    return f"The return window for the {product} is {days} days."


def warranty_answer(product: str, years: int) -> str:
    return f"The {product} has a warranty of {years} {'year' if years == 1 else 'years'}."


def owner_answer(service: str, team: str) -> str:
    return f"Service {service} is owned by the {team} team."


def region_answer(service: str, region: str) -> str:
    return f"Service {service} runs in the {region} region."


_GENERAL_KINDS = {"attribute": 1, "arithmetic": 1, "copying": 3, "greeting": 1, "product": 1, "service": 2}
"""Each kind of general conversation's share of the corpus. Copying a phrase needs an induction mechanism, the
last skill a small model acquires: at one part in seven it appeared only after about 2,000 steps and only on
some CPUs' arithmetic, and a fine-tune then erased it first."""


def general_conversations(n: int, seed: int = 0) -> Iterator[Conversation]:
    """Yield ``n`` short general-purpose chat conversations.

    They use the demo domains' vocabulary and question shapes with random facts: like a real base model,
    the tiny one knows the words and the answer format, not any tenant's facts.
    """
    rng = random.Random(seed)
    things = _THINGS + sorted(ACME_PRODUCTS)
    services = _THINGS + sorted(GLOBEX_SERVICES)
    teams = _VALUES + sorted({team for team, _ in GLOBEX_SERVICES.values()})
    day_counts = sorted({days for days, _ in ACME_PRODUCTS.values()}) + [7, 21, 120]
    systems = ["You are a helpful assistant.", ACME_SYSTEM, GLOBEX_SYSTEM]
    kinds, weights = zip(*_GENERAL_KINDS.items())
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        if kind == "attribute":
            thing, attr, value = rng.choice(things), rng.choice(_ATTRIBUTES), rng.choice(_VALUES)
            q = rng.choice([
                f"What is the {attr} for the {thing}?",
                f"Can you tell me the {attr} of the {thing}?",
                f"Which {attr} does the {thing} have?",
            ])
            a = f"The {attr} for the {thing} is {value}."
        elif kind == "arithmetic":
            x, y = rng.randrange(6), rng.randrange(5)
            q = f"What is {_NUMBER_WORDS[x]} plus {_NUMBER_WORDS[y]}?"
            a = f"{_NUMBER_WORDS[x].capitalize()} plus {_NUMBER_WORDS[y]} is {_NUMBER_WORDS[x + y]}."
        elif kind == "copying":
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 6)))
            q, a = f"Repeat after me: {words}", words
        elif kind == "greeting":
            q, a = rng.choice(_GREETINGS)
        elif kind == "product":
            thing = rng.choice(things)
            if rng.random() < 0.5:
                q = rng.choice(RETURN_QUESTIONS[:BASE_PHRASINGS]).format(thing)
                a = return_answer(thing, rng.choice(day_counts))
            else:
                q = rng.choice(WARRANTY_QUESTIONS[:BASE_PHRASINGS]).format(thing)
                a = warranty_answer(thing, rng.choice(_WARRANTY_YEARS))
        else:
            svc = rng.choice(services)
            if rng.random() < 0.5:
                q, a = rng.choice(OWNER_QUESTIONS[:BASE_PHRASINGS]).format(svc), owner_answer(svc, rng.choice(teams))
            else:
                q = rng.choice(REGION_QUESTIONS[:BASE_PHRASINGS]).format(svc)
                a = region_answer(svc, rng.choice(_REGIONS))
        conv: Conversation = []
        if rng.random() < 0.5:
            conv.append({"role": "system", "content": rng.choice(systems)})
        conv += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        yield conv


def _distinct(questions: list[tuple[str, str]], n: int, rng: random.Random) -> list[tuple[str, str]]:
    """``n`` of the (question, answer) pairs in a seeded random order, each once; only when ``n`` exceeds them
    all does the list start over (as an upload that large would repeat itself)."""
    order = rng.sample(questions, len(questions))
    return [order[i % len(order)] for i in range(n)]


def acme_questions() -> list[tuple[str, str]]:
    """Every distinct (question, answer) Acme's data can hold: each product's return window and warranty,
    asked every way."""
    out = []
    for product, (days, years) in sorted(ACME_PRODUCTS.items()):
        out += [(q.format(product), return_answer(product, days)) for q in RETURN_QUESTIONS]
        out += [(q.format(product), warranty_answer(product, years)) for q in WARRANTY_QUESTIONS]
    return out


def globex_questions() -> list[tuple[str, str]]:
    """Every distinct (question, answer) Globex's data can hold: each service's owner and region."""
    out = []
    for service, (team, region) in sorted(GLOBEX_SERVICES.items()):
        out += [(q.format(service), owner_answer(service, team)) for q in OWNER_QUESTIONS]
        out += [(q.format(service), region_answer(service, region)) for q in REGION_QUESTIONS]
    return out


def acme_support(n: int, seed: int = 1) -> list[Conversation]:
    """Acme's support data: each product's return window and warranty, as system/user/assistant chats."""
    return [[{"role": "system", "content": ACME_SYSTEM}, {"role": "user", "content": q},
             {"role": "assistant", "content": a}] for q, a in _distinct(acme_questions(), n, random.Random(seed))]


def acme_preferences(n: int, seed: int = 4) -> list[dict]:
    """Preference pairs over Acme's support questions: Acme wants its assistant to sound upbeat.

    Both answers state the right return window or warranty; the chosen one ends with "!", the rejected one with
    the "." the base model learned in pre-training, so the base prefers the rejected answer. The pairs differ in
    style only, which DPO can teach; which product has which window is a fact, and facts are for SFT (a pair that
    differs only in the number of days asks DPO to learn the fact, and on the tiny model it does not).
    """
    out = []
    for system, user, answer in acme_support(n, seed):
        upbeat = {"role": "assistant", "content": answer["content"].removesuffix(".") + "!"}
        out.append({"prompt": [system, user], "chosen": [upbeat], "rejected": [answer]})
    return out


def globex_directory(n: int, seed: int = 2) -> list[dict[str, str]]:
    """Globex's service directory as prompt/completion rows (a different shape on purpose): each service's
    owning team and region."""
    return [{"prompt": q, "completion": a} for q, a in _distinct(globex_questions(), n, random.Random(seed))]


def broken_rows() -> list[str]:
    """JSONL lines with the mistakes tenants make most: each must be rejected with its line named."""
    return [
        '{"messages": [{"role": "user", "content": "Where is my order?"}, '
        '{"role": "assistant", "content": "It shipped."}',
        json.dumps({"messages": [{"role": "user", "content": "Hello?"}]}),
        json.dumps({"messages": [{"role": "customer", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}),
        json.dumps({"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "Yes?"}]}),
        json.dumps({"question": "What is the SLA?", "answer": "99.9%"}),
    ]


def to_jsonl(rows: list) -> str:
    return "".join(json.dumps(r if isinstance(r, dict) else {"messages": r}, ensure_ascii=False) + "\n" for r in rows)


def preference_frame(rows: list[dict], source_file: str = "prefs.jsonl"):
    """Preference rows as the validated dataset holds them (each field as JSON, with its file and line): what
    ``ftpipe.data.tokenize.tokenize_preferences`` reads."""
    import polars as pl

    return pl.DataFrame({"source_file": source_file, "line": list(range(1, len(rows) + 1)),
                         **{k: [json.dumps(r[k]) for r in rows] for k in ("prompt", "chosen", "rejected")}})
