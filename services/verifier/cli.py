"""``conductor verify [FILE|-]``: VerifyRequest JSON lines in, Verdict JSON lines out (as they complete)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from typing import IO

import msgspec

from schemas.errors import ErrorCode, ErrorInfo
from schemas.verify import Outcome, Verdict, VerifyRequest
from services.verifier.config import Settings
from services.verifier.core import Verifier


def add_verify_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verify",
        help="verify responses locally: VerifyRequest JSON lines in, Verdict JSON lines out",
        description=__doc__,
    )
    parser.add_argument(
        "file", nargs="?", default="-", help="JSON lines of VerifyRequest, or - for stdin (default)"
    )
    parser.add_argument(
        "--ordered", action="store_true", help="write verdicts in input order instead of as they finish"
    )
    parser.add_argument(
        "--layers", action="store_true", help="print which sandbox isolation layers are active, then exit"
    )
    parser.set_defaults(func=run_verify)
    return parser


def parse_lines(stream: IO[str]) -> Iterator[VerifyRequest | Verdict]:
    """Each line is a request, or (when it does not decode) an error verdict naming the line."""
    decoder = msgspec.json.Decoder(VerifyRequest)
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            yield decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            info = ErrorInfo(code=ErrorCode.BAD_REQUEST, message=str(exc), field=f"line {n}")
            yield Verdict(
                id=f"line-{n}", outcome=Outcome.ERROR, reason=f"line {n} is not a VerifyRequest", error=info
            )


async def verify_stream(stream: IO[str], out: IO[str], settings: Settings, ordered: bool) -> int:
    items = list(parse_lines(stream))
    requests = [i for i in items if isinstance(i, VerifyRequest)]
    encoder = msgspec.json.Encoder()

    def emit(verdict: Verdict) -> None:
        out.write(encoder.encode(verdict).decode() + "\n")
        out.flush()

    for bad in (i for i in items if isinstance(i, Verdict)):
        emit(bad)
    async with Verifier(settings) as verifier:
        print(f"sandbox: {verifier.sandbox.layers.describe()}", file=sys.stderr)
        size = (
            settings.max_batch_items
        )  # a local file is one requester: verified in batches of the service's limit
        for chunk in (requests[i : i + size] for i in range(0, len(requests), size)):
            if ordered:
                for verdict in await verifier.verify_batch(chunk, requester="cli"):
                    emit(verdict)
            else:
                async for verdict in verifier.stream(chunk, requester="cli"):
                    emit(verdict)
    return 0 if len(requests) == len(items) else 1


async def show_layers(settings: Settings) -> int:
    async with Verifier(settings) as verifier:
        print(verifier.sandbox.layers.describe())
        return 1 if verifier.sandbox.refusal else 0


def run_verify(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if args.layers:
        return asyncio.run(show_layers(settings))
    if args.file == "-":
        return asyncio.run(verify_stream(sys.stdin, sys.stdout, settings, args.ordered))
    with open(args.file, encoding="utf-8") as fh:
        return asyncio.run(verify_stream(fh, sys.stdout, settings, args.ordered))
