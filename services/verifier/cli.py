"""``conductor verify [FILE|-]``: VerifyRequest JSON lines in, Verdict JSON lines out (as they complete)."""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec

from schemas.errors import ErrorCode, ErrorInfo
from schemas.verify import Outcome, Verdict, VerifyRequest
from services.verifier import libraries
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
        print(libraries.describe())
        return 1 if verifier.sandbox.refusal else 0


class InputError(ValueError):
    """The input cannot be read, or is not text; the message names it."""


def read_input(name: str) -> str:
    """All of ``name`` (``-``: stdin) as text. Verdicts are written only once every line is read, so reading it
    first changes nothing; an unreadable file or bytes that are not UTF-8 (JSON lines are) are one ``InputError``
    naming the input, not a traceback."""
    where = "stdin" if name == "-" else name
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {where}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{where} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); expected "
            "JSON lines of VerifyRequest"
        ) from None


def run_verify(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if args.layers:
        return asyncio.run(show_layers(settings))
    try:
        text = read_input(args.file)
    except InputError as exc:
        print(f"conductor verify: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(verify_stream(io.StringIO(text), sys.stdout, settings, args.ordered))
