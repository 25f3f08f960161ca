"""The CLI's argument types: a number on the command line is checked as the same value in a params file is
(a positive count, a finite number of seconds, an integer as written), in argparse's one-line error."""
from __future__ import annotations

import argparse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


MAX_THREADS = 1024  # torch's thread pools crash far above any machine's cores (100,000 segfaulted)


def _threads(text: str) -> int:
    import os

    value = _positive_int(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"{value} threads: at most {MAX_THREADS} (this machine has "
                                         f"{os.cpu_count()} CPUs)")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value >= 0 and value < float("inf")):  # NaN fails both
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds >= 0")
    return value


def _positive_seconds(text: str) -> float:
    """A duration that must buy something (advise's and device-check's --seconds): finite and above 0."""
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} seconds: a duration above 0 is needed")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
