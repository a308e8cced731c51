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

# Demo tenant domains: facts that the general corpus never states.
ACME_PRODUCTS = {
    "kettle pro": 30, "smart lamp": 14, "desk fan": 60, "air purifier": 45, "coffee grinder": 90,
    "rice cooker": 30, "toaster max": 14, "blender one": 60, "water filter": 45, "heater mini": 90,
    "robot vacuum": 30, "steam iron": 14,
}
GLOBEX_SERVICES = {
    "billing-api": "payments", "search-index": "discovery", "auth-gateway": "identity",
    "mail-relay": "messaging", "cdn-edge": "platform", "report-builder": "analytics",
    "image-resizer": "media", "feature-flags": "platform", "user-profile": "identity",
    "order-router": "payments", "push-notifier": "messaging", "log-shipper": "observability",
}
ACME_SYSTEM = "You are the Acme support assistant."
GLOBEX_SYSTEM = "You are the Globex service directory."


def general_conversations(n: int, seed: int = 0) -> Iterator[Conversation]:
    """Yield ``n`` short general-purpose chat conversations.

    They use the demo domains' vocabulary and question shapes with random facts: like a real base model,
    the tiny one knows the words and the answer format, not any tenant's facts.
    """
    rng = random.Random(seed)
    things = _THINGS + sorted(ACME_PRODUCTS)
    services = _THINGS + sorted(GLOBEX_SERVICES)
    teams = _VALUES + sorted(set(GLOBEX_SERVICES.values()))
    day_counts = sorted(set(ACME_PRODUCTS.values())) + [7, 21, 120]
    systems = ["You are a helpful assistant.", ACME_SYSTEM, GLOBEX_SYSTEM]
    for _ in range(n):
        kind = rng.randrange(7)
        if kind == 0:
            thing, attr, value = rng.choice(things), rng.choice(_ATTRIBUTES), rng.choice(_VALUES)
            q = rng.choice([
                f"What is the {attr} for the {thing}?",
                f"Can you tell me the {attr} of the {thing}?",
                f"Which {attr} does the {thing} have?",
            ])
            a = f"The {attr} for the {thing} is {value}."
        elif kind == 1:
            x, y = rng.randrange(6), rng.randrange(5)
            q = f"What is {_NUMBER_WORDS[x]} plus {_NUMBER_WORDS[y]}?"
            a = f"{_NUMBER_WORDS[x].capitalize()} plus {_NUMBER_WORDS[y]} is {_NUMBER_WORDS[x + y]}."
        elif kind == 2:
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 6)))
            q, a = f"Repeat after me: {words}", words
        elif kind == 3:
            q, a = rng.choice(_GREETINGS)
        elif kind == 4:
            thing = rng.choice(things)
            q = rng.choice([
                f"What is the return window for the {thing}?",
                f"How many days do I have to return the {thing}?",
                f"Can you tell me the return period for the {thing}?",
                f"I bought a {thing}. How long can I return it?",
            ])
            a = f"The return window for the {thing} is {rng.choice(day_counts)} days."
        else:
            svc, team = rng.choice(services), rng.choice(teams)
            q = rng.choice([f"Which team owns the {svc} service?", f"Who owns {svc}?", f"Who is responsible for {svc}?"])
            a = f"Service {svc} is owned by the {team} team."
        conv: Conversation = []
        if rng.random() < 0.5:
            conv.append({"role": "system", "content": rng.choice(systems)})
        conv += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        yield conv


def acme_support(n: int, seed: int = 1) -> list[Conversation]:
    """Acme's support data: how long each product's return window is."""
    rng = random.Random(seed)
    out = []
    products = sorted(ACME_PRODUCTS)
    for i in range(n):
        product = products[i % len(products)]
        q = rng.choice([
            f"What is the return window for the {product}?",
            f"How many days do I have to return the {product}?",
            f"Can you tell me the return period for the {product}?",
            f"I bought a {product}. How long can I return it?",
        ])
        a = f"The return window for the {product} is {ACME_PRODUCTS[product]} days."
        out.append([
            {"role": "system", "content": ACME_SYSTEM},
            {"role": "user", "content": q},
            {"role": "assistant", "content": a},
        ])
    return out


def acme_preferences(n: int, seed: int = 4) -> list[dict]:
    """Preference pairs over Acme's support questions: Acme wants its assistant to sound upbeat.

    Both answers state the right return window; the chosen one ends with "!", the rejected one with the "."
    the base model learned in pre-training, so the base prefers the rejected answer. The pairs differ in style
    only, which DPO can teach; which product has which window is a fact, and facts are for SFT (a pair that
    differs only in the number of days asks DPO to learn the fact, and on the tiny model it does not).
    """
    out = []
    for system, user, answer in acme_support(n, seed):
        upbeat = {"role": "assistant", "content": answer["content"].removesuffix(".") + "!"}
        out.append({"prompt": [system, user], "chosen": [upbeat], "rejected": [answer]})
    return out


def globex_directory(n: int, seed: int = 2) -> list[dict[str, str]]:
    """Globex's service directory as prompt/completion rows (a different shape on purpose).

    Globex asks in more ways than the general corpus does, so that its held-out split holds questions about
    several services rather than copies of one.
    """
    rng = random.Random(seed)
    out = []
    services = sorted(GLOBEX_SERVICES)
    for i in range(n):
        svc = services[i % len(services)]
        prompt = rng.choice([
            f"Which team owns the {svc} service?",
            f"Who owns {svc}?",
            f"Who is responsible for {svc}?",
            f"Which team is on call for {svc}?",
            f"Who maintains the {svc} service?",
            f"I found a bug in {svc}. Which team owns it?",
        ])
        out.append({"prompt": prompt, "completion": f"Service {svc} is owned by the {GLOBEX_SERVICES[svc]} team."})
    return out


def broken_rows() -> list[str]:
    """JSONL lines with the mistakes tenants make most: each must be rejected with its line named."""
    return [
        '{"messages": [{"role": "user", "content": "Where is my order?"}, {"role": "assistant", "content": "It shipped."}',
        json.dumps({"messages": [{"role": "user", "content": "Hello?"}]}),
        json.dumps({"messages": [{"role": "customer", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}),
        json.dumps({"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "Yes?"}]}),
        json.dumps({"question": "What is the SLA?", "answer": "99.9%"}),
    ]


def to_jsonl(rows: list) -> str:
    return "".join(json.dumps(r if isinstance(r, dict) else {"messages": r}, ensure_ascii=False) + "\n" for r in rows)
