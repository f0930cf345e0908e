"""Generated four-option multiple-choice questions whose gold letter is computed, not remembered.

Facts come from small built-in tables (capitals, element symbols) or are computed (primality, weekdays, binary,
magnitudes), so every gold letter is right by construction. Options are shuffled per question under the family's
seed; the stored answer is the gold letter and the wrong answers are the other three letters.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator

from schemas.verify import TextReference
from tasks.sim.draft import MCQ_FORMAT, Draft

LETTERS = "ABCD"
PER_GENERATOR = 170

CAPITALS = {
    "Australia": "Canberra",
    "Canada": "Ottawa",
    "Brazil": "Brasilia",
    "Turkey": "Ankara",
    "Nigeria": "Abuja",
    "Switzerland": "Bern",
    "New Zealand": "Wellington",
    "Morocco": "Rabat",
    "Vietnam": "Hanoi",
    "Pakistan": "Islamabad",
    "Kazakhstan": "Astana",
    "Myanmar": "Naypyidaw",
    "Tanzania": "Dodoma",
    "Bolivia": "Sucre",
    "Ecuador": "Quito",
    "Peru": "Lima",
    "Chile": "Santiago",
    "Colombia": "Bogota",
    "Kenya": "Nairobi",
    "Ghana": "Accra",
    "Egypt": "Cairo",
    "Norway": "Oslo",
    "Finland": "Helsinki",
    "Portugal": "Lisbon",
    "Hungary": "Budapest",
    "Poland": "Warsaw",
    "Romania": "Bucharest",
    "Greece": "Athens",
    "Ireland": "Dublin",
    "Iceland": "Reykjavik",
    "Japan": "Tokyo",
    "South Korea": "Seoul",
    "Thailand": "Bangkok",
    "Indonesia": "Jakarta",
    "Philippines": "Manila",
    "Mongolia": "Ulaanbaatar",
    "Nepal": "Kathmandu",
    "Iran": "Tehran",
    "Iraq": "Baghdad",
    "Jordan": "Amman",
    "Ethiopia": "Addis Ababa",
    "Uganda": "Kampala",
    "Senegal": "Dakar",
    "Argentina": "Buenos Aires",
    "Uruguay": "Montevideo",
    "Paraguay": "Asuncion",
    "Venezuela": "Caracas",
    "Cuba": "Havana",
    "Jamaica": "Kingston",
    "Austria": "Vienna",
    "Belgium": "Brussels",
    "Denmark": "Copenhagen",
    "Sweden": "Stockholm",
    "Czechia": "Prague",
    "Slovakia": "Bratislava",
    "Croatia": "Zagreb",
    "Serbia": "Belgrade",
    "Bulgaria": "Sofia",
    "Ukraine": "Kyiv",
    "Georgia": "Tbilisi",
    "Armenia": "Yerevan",
    "Azerbaijan": "Baku",
    "Uzbekistan": "Tashkent",
    "Sri Lanka": "Sri Jayawardenepura Kotte",
    "Bangladesh": "Dhaka",
    "Malaysia": "Kuala Lumpur",
    "Laos": "Vientiane",
    "Cambodia": "Phnom Penh",
    "Zimbabwe": "Harare",
    "Zambia": "Lusaka",
    "Angola": "Luanda",
    "Mozambique": "Maputo",
    "Madagascar": "Antananarivo",
}

ELEMENTS = {
    "H": "Hydrogen",
    "He": "Helium",
    "Li": "Lithium",
    "Be": "Beryllium",
    "B": "Boron",
    "C": "Carbon",
    "N": "Nitrogen",
    "O": "Oxygen",
    "F": "Fluorine",
    "Ne": "Neon",
    "Na": "Sodium",
    "Mg": "Magnesium",
    "Al": "Aluminium",
    "Si": "Silicon",
    "P": "Phosphorus",
    "S": "Sulfur",
    "Cl": "Chlorine",
    "Ar": "Argon",
    "K": "Potassium",
    "Ca": "Calcium",
    "Ti": "Titanium",
    "Cr": "Chromium",
    "Mn": "Manganese",
    "Fe": "Iron",
    "Co": "Cobalt",
    "Ni": "Nickel",
    "Cu": "Copper",
    "Zn": "Zinc",
    "As": "Arsenic",
    "Se": "Selenium",
    "Br": "Bromine",
    "Kr": "Krypton",
    "Ag": "Silver",
    "Sn": "Tin",
    "Sb": "Antimony",
    "I": "Iodine",
    "Xe": "Xenon",
    "W": "Tungsten",
    "Pt": "Platinum",
    "Au": "Gold",
    "Hg": "Mercury",
    "Pb": "Lead",
    "U": "Uranium",
    "Rn": "Radon",
    "Sr": "Strontium",
    "Ba": "Barium",
    "Cs": "Caesium",
    "Ga": "Gallium",
}


def _draft(key: str, subject: str, stem: str, correct: str, others: list[str], rng: random.Random) -> Draft:
    options = [correct, *others[:3]]
    rng.shuffle(options)
    gold = LETTERS[options.index(correct)]
    body = "\n".join(f"{LETTERS[i]}) {o}" for i, o in enumerate(options))
    return Draft(
        key=f"{subject}/{key}",
        domain="mcq",
        subject=subject,
        question=f"{stem}\n\n{body}\n\n{MCQ_FORMAT}",
        answer=gold,
        wrong=[x for x in LETTERS if x != gold],
        reference=TextReference(answer=gold, kind="mcq", choices=options),
    )


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def prime(rng: random.Random) -> Iterator[Draft]:
    primes = [n for n in range(101, 3000) if _is_prime(n)]
    # Composites with no factor 2, 3 or 5, so none is ruled out at a glance.
    hard = [n for n in range(101, 3000) if not _is_prime(n) and all(n % p for p in (2, 3, 5))]
    for p in rng.sample(primes, PER_GENERATOR):
        others = [str(n) for n in rng.sample(hard, 3)]
        yield _draft(str(p), "prime", "Which of the following numbers is prime?", str(p), others, rng)


def capital(rng: random.Random) -> Iterator[Draft]:
    cities = sorted(CAPITALS.values())
    for country, city in CAPITALS.items():
        others = rng.sample([c for c in cities if c != city], 3)
        yield _draft(country, "capital", f"What is the capital city of {country}?", city, others, rng)


def element(rng: random.Random) -> Iterator[Draft]:
    names = sorted(ELEMENTS.values())
    for symbol, name in ELEMENTS.items():
        others = rng.sample([n for n in names if n != name], 3)
        stem = f"Which chemical element has the symbol {symbol}?"
        yield _draft(symbol, "element", stem, name, others, rng)


def weekday(rng: random.Random) -> Iterator[Draft]:
    names = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    start = dt.date(1900, 1, 1).toordinal()
    for ordinal in rng.sample(range(start, start + 200 * 365), PER_GENERATOR):
        day = dt.date.fromordinal(ordinal)
        right = names[day.weekday()]
        others = rng.sample([n for n in names if n != right], 3)
        stem = f"On which day of the week did {day.strftime('%B')} {day.day}, {day.year} fall?"
        yield _draft(day.isoformat(), "weekday", stem, right, others, rng)


def binary(rng: random.Random) -> Iterator[Draft]:
    for n in rng.sample(range(40, 4096), PER_GENERATOR):
        right = bin(n)[2:]
        flips = {right[:i] + ("1" if right[i] == "0" else "0") + right[i + 1 :] for i in range(1, len(right))}
        others = rng.sample(sorted(flips), 3)
        yield _draft(str(n), "binary", f"What is the binary representation of {n}?", right, others, rng)


def largest(rng: random.Random) -> Iterator[Draft]:
    seen: set[tuple] = set()
    while len(seen) < PER_GENERATOR:
        terms = tuple(sorted({(rng.randint(2, 12), rng.randint(2, 15)) for _ in range(4)}))
        values = [b**e for b, e in terms]
        if len(terms) != 4 or len(set(values)) != 4 or terms in seen:
            continue
        seen.add(terms)
        texts = [f"{b}^{e}" for b, e in terms]
        best = texts[values.index(max(values))]
        others = [t for t in texts if t != best]
        yield _draft(
            "_".join(texts), "largest", "Which of the following numbers is the largest?", best, others, rng
        )


GENERATORS = (prime, capital, element, weekday, binary, largest)
