"""The command line's argument types and the options several commands share (one definition
each): a bad value is a usage error naming the option, never a traceback."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from retrieval.errors import InvalidInput
from retrieval.models import Strategy
from retrieval.validation import check_instant, check_namespace

STRATEGY_CHOICES = [s.value for s in Strategy]


def iso_time(value: str) -> datetime:
    """An ISO 8601 instant with an offset, 1900-2200."""
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from exc
    try:
        check_instant(dt)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value}: {exc}") from None
    return dt


def namespace(value: str) -> str:
    """A namespace, by the service's one rule."""
    try:
        check_namespace(value)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc.errors[0]['reason']}") from None
    return value


def positive(value: str) -> int:
    """A whole number of at least 1."""
    try:
        n = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from exc
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def port(value: str) -> int:
    """A TCP port, 1-65535."""
    n = positive(value)
    if n > 65535:
        raise argparse.ArgumentTypeError("a TCP port is at most 65535")
    return n


@dataclass(frozen=True)
class Arg:
    """One argument of a command: its flags and argparse's keywords."""

    flags: tuple[str, ...]
    kw: dict[str, Any] = field(default_factory=dict)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **self.kw)


def arg(*flags: str, **kw: Any) -> Arg:
    return Arg(flags, kw)


# Options several commands share.
NAMESPACE = arg(
    "--namespace",
    type=namespace,
    default="default",
    help="the namespace (tenant), default 'default'",
)
ONLY_NAMESPACE = arg("--namespace", type=namespace, help="only this namespace (default: all)")
JSON = arg("--json", action="store_true", help="print JSON")
NOW = arg("--now", type=iso_time, help="resolve time words against this ISO 8601 instant")
NO_EXPAND = arg(
    "--no-expand", action="store_true", help="turn multi-hop expansion off (options.expand=false)"
)
EVAL_STRATEGY = arg(
    "--strategy",
    default="auto",
    choices=["auto", *STRATEGY_CHOICES],
    help="auto (the selector's choice) or a forced strategy",
)
EVAL_LIMIT = arg("--limit", type=positive, default=100, help="results per question (default 100)")


def batch(default: int, what: str) -> Arg:
    return arg("--batch", type=positive, default=default, help=f"{what} per transaction")


__all__ = [
    "EVAL_LIMIT",
    "EVAL_STRATEGY",
    "JSON",
    "NAMESPACE",
    "NOW",
    "NO_EXPAND",
    "ONLY_NAMESPACE",
    "STRATEGY_CHOICES",
    "Arg",
    "arg",
    "batch",
    "iso_time",
    "namespace",
    "port",
    "positive",
]
