"""`conductor gateway-key`: make an API key for the gateway. The key is printed once; only its digest goes into
the keys file (services/gateway/keys.py), so the file (a Kubernetes Secret, say) never holds a usable key."""

from __future__ import annotations

import argparse
import sys

import msgspec

from services.gateway.keys import NAME, entry_toml, new_key


def _cmd_gateway_key(args: argparse.Namespace) -> int:
    if not NAME.match(args.name):
        print("conductor gateway-key: --name must be 1-64 letters, digits, '.', '_' or '-'", file=sys.stderr)
        return 2
    if (args.rpm is not None and args.rpm < 1) or (
        args.spend_usd_per_day is not None and args.spend_usd_per_day <= 0
    ):
        print("conductor gateway-key: --rpm must be >= 1 and --spend-usd-per-day > 0", file=sys.stderr)
        return 2
    key, entry = new_key(args.name)
    entry = msgspec.structs.replace(entry, rpm=args.rpm, spend_usd_per_day=args.spend_usd_per_day)
    print(f"API key for {args.name} (shown once, store it now):\n  {key}\n", file=sys.stderr)
    print("# append to the gateway keys file ($CONDUCTOR_GATEWAY_KEYS_FILE):", file=sys.stderr)
    sys.stdout.write(entry_toml(entry))
    return 0


def add_gateway_key_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gateway-key", help="make an API key for the OpenAI-compatible gateway")
    p.add_argument("--name", required=True, help="the key's label in metrics and logs")
    p.add_argument("--rpm", type=int, help="requests per minute, deployment-wide")
    p.add_argument("--spend-usd-per-day", type=float, help="dollars per UTC day, deployment-wide")
    p.set_defaults(func=_cmd_gateway_key)
