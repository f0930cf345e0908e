"""Nearest questions by TF-IDF cosine, in plain Python: the kNN router's memory of the train questions.

Words are lower-cased runs of letters and digits (LaTeX commands count as words: ``\\frac`` -> ``frac``). Term
weights are sublinear (1 + log tf) × smoothed idf (log((1 + n) / (1 + df)) + 1, scikit-learn's default) and each
vector is L2-normalised, so a dot product is the cosine. An inverted index keeps a query at the cost of the train
questions that share a word with it; no dense matrix, no new dependency.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class TfidfIndex:
    """The train texts, indexed; ``nearest(text, k)`` -> positions of the ``k`` most similar (ties: earlier)."""

    def __init__(self, texts: Sequence[str]) -> None:
        counts = [Counter(words(t)) for t in texts]
        df: Counter[str] = Counter(w for c in counts for w in c)
        n = len(texts)
        self.size = n
        self.idf = {w: math.log((1 + n) / (1 + d)) + 1 for w, d in df.items()}
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for i, c in enumerate(counts):
            for w, weight in self._vector(c).items():
                self.postings[w].append((i, weight))

    def _vector(self, counts: Counter[str]) -> dict[str, float]:
        raw = {w: (1 + math.log(tf)) * self.idf[w] for w, tf in counts.items() if w in self.idf}
        norm = math.sqrt(sum(v * v for v in raw.values())) or 1.0
        return {w: v / norm for w, v in raw.items()}

    def similarities(self, text: str) -> dict[int, float]:
        """Cosine with every train text sharing a word with ``text`` (the rest are 0)."""
        scores: dict[int, float] = defaultdict(float)
        for w, q in self._vector(Counter(words(text))).items():
            for i, weight in self.postings[w]:
                scores[i] += q * weight
        return scores

    def nearest(self, text: str, k: int) -> list[int]:
        """The ``k`` most similar train texts; those sharing no word rank last, in train order."""
        scores = self.similarities(text)
        return heapq.nsmallest(min(k, self.size), range(self.size), key=lambda i: (-scores.get(i, 0.0), i))
