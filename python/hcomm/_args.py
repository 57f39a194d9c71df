"""Argument checks at the package's boundary: every bad argument of a
public function is an hcomm.InvalidArgument (a ValueError) naming it,
before anything reaches ctypes (which would raise TypeError,
ctypes.ArgumentError or OverflowError, or truncate an integer silently to
the C type's width)."""

import math
import operator
import os
import threading

from .errors import InvalidArgument

U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
I64 = (1 << 63) - 1
MAX_MS = (1 << 31) - 1  # the C ABI's timeouts are int milliseconds


def integer(v, what, lo=0, hi=U64):
    """v as an int in lo..hi (anything with __index__: not a float, not a
    string)."""
    try:
        n = operator.index(v)
    except TypeError:
        raise InvalidArgument(f"hcomm: {what} {v!r}: want an integer") from None
    if not lo <= n <= hi:
        raise InvalidArgument(f"hcomm: {what} {n}: want {lo}..{hi}")
    return n


def timeout_ms(t, what="timeout"):
    """A timeout in seconds (None: forever) as the C ABI's milliseconds
    (-1 forever; negative seconds are 0; more than 24 days is the
    largest)."""
    if t is None:
        return -1
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise InvalidArgument(f"hcomm: {what} {t!r}: want seconds (a number) or None")
    if math.isnan(t):
        raise InvalidArgument(f"hcomm: {what} nan: want seconds or None")
    if t <= 0:
        return 0
    return MAX_MS if t * 1000 >= MAX_MS else int(t * 1000)


def seconds(t, what="timeout"):
    """A timeout in seconds for a Python wait (None: forever, as is one
    longer than threading can wait)."""
    timeout_ms(t, what)
    if t is not None and t >= min(threading.TIMEOUT_MAX, 1e9):
        return None
    return t


def path(p, what="path"):
    """A file path or address (str, bytes or os.PathLike) as bytes for C;
    a NUL byte, which C would cut the string at, is refused."""
    try:
        b = os.fsencode(p)
    except (TypeError, UnicodeError) as e:
        raise InvalidArgument(f"hcomm: {what} {p!r}: want a str, bytes or path ({e})") from None
    if b"\0" in b:
        raise InvalidArgument(f"hcomm: {what} {p!r}: contains a NUL byte")
    return b


def callback(cb, what="callback"):
    if cb is not None and not callable(cb):
        raise InvalidArgument(f"hcomm: {what} {cb!r}: want a callable or None")
    return cb


def choice(v, options, what):
    """v, one of options (a dict's keys or a tuple), hashable or not."""
    try:
        ok = v in options
    except TypeError:
        ok = False
    if not ok or isinstance(v, bool):
        raise InvalidArgument(f"hcomm: {what} {v!r}: want one of {sorted(options)}")
    return v
