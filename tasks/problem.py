"""One task as training and evaluation see it: the question, the reference it is scored against, its domain."""

from __future__ import annotations

import msgspec

from schemas.verify import Reference, VerifyRequest


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    benchmark: str  # the registry entry (or eval label) it came from
    question: str  # what the solver is asked; for multiple choice the options are rendered in letter order
    reference: Reference
    domain: str
    subject: str = ""
    level: str = ""

    def request(self, response: str, request_id: str | None = None) -> VerifyRequest:
        return VerifyRequest(
            id=request_id or self.id,
            response=response,
            reference=self.reference,
            question=self.question,
            domain=self.domain,
        )
