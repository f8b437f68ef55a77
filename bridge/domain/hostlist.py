"""Slurm hostlist expressions (``gpu-[01-04,7]``), expanded and compressed as Slurm 22.05 does.

A pure re-implementation of ``src/common/hostlist.c`` for one-dimensional clusters, checked
against ``scontrol show hostnames`` and ``scontrol show hostlistsorted`` by the integration
tests. Slurm's quirks are kept on purpose, so the bridge never disagrees with slurmctld:

* tokens split on comma, space and tab, except inside ``[...]``; empty tokens are skipped;
* duplicates are kept and order is preserved; several bracket groups form a product in Slurm's
  order (last group fastest, then the first, the second, ... up to the one before the last);
* zero padding is the length of the low bound as written (``[01-100]``; ``[1-010]`` is unpadded);
  numbers are read like C ``strtoul`` (``[+1-3]`` gives ``01`` to ``03``; huge values saturate).

Limits from hostlist.c: 65536 hosts per ``lo-hi`` item (:data:`MAX_RANGE`), 65536 items per
bracket (:data:`MAX_RANGES`), 65536 values per bracket group before the last
(:data:`MAX_PREFIX_CNT`). Slurm has no total limit; the others are ours, so that a typo or a
hostile caller cannot exhaust the bridge's memory or time: :data:`MAX_HOSTS` names in all,
:data:`MAX_EXPRESSION` characters of expression, :data:`MAX_EXPANDED_CHARS` characters of names
in all, and :data:`MAX_DIGITS` digits in one number (past 20 a number exceeds 2**64 anyway, and
Python refuses to read more than 4300 digits).

Where Slurm is plainly broken we part from it. A bad range in the third-from-last or an earlier
bracket only makes Slurm log an error and drop the token (``a[3-1]b[1]c[1]`` is an empty list),
and past 65536 values there it keeps a partial list: we raise. On ``a[0-18446744073709551615]``
scontrol prints nothing (we raise); on ``a[18446744073709551615]b[1]`` it loops forever (we
expand). compress() sorts numbers of 2**31 and more correctly, where Slurm's sort drops hosts.

Brackets must pair, one level deep, and a range must have its upper bound. A ``[`` never closed
(``cpu-[0-``) is refused as Slurm 24.11 and newer refuse it; 22.05 tacks a ``]`` on instead
(``cpu-]``). Slurm of every series takes a ``]`` without ``[`` (``a]b``) and a ``[`` inside another
(``a[b[1-2]``) as characters of a host name, and ``a[0-]`` as ``a0``: we refuse those too. Each is
a typo, not a node: no name the bridge can serve holds a bracket (see ``node_names``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from bridge.errors import HostlistError

MAX_RANGE = 64 * 1024
MAX_RANGES = 64 * 1024
MAX_PREFIX_CNT = 64 * 1024
MAX_HOSTS = 100_000
MAX_EXPRESSION = 1024 * 1024
MAX_EXPANDED_CHARS = 16 * 1024 * 1024
MAX_DIGITS = 20

_SEPARATORS = "\t, "
#: One plain host name: no bracket, separator or space, and a number of at most 19 digits, which
#: never saturates (10**19 - 1 < 2**64). It is its own expansion; the usual single node of a
#: resume file's job is one (parsing each of a 1,000-job file's was a third of its check).
_PLAIN_HOST = re.compile(r"(?:[a-z0-9-]*[a-z-])?[0-9]{0,19}")
_DIGITS = "0123456789"
_ULONG_MAX = 2**64 - 1
# Sizes saturate here: a token of many bracket groups would otherwise multiply huge integers.
_SIZE_CAP = 2**64


@dataclass(frozen=True)
class _Range:
    lo: int
    hi: int
    width: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    @property
    def longest(self) -> int:
        """Length of the longest number this range prints."""
        return max(self.width, len(str(self.hi)))

    def names(self, suffix: str = "") -> list[str]:
        return [f"{n:0{self.width}d}{suffix}" for n in range(self.lo, self.hi + 1)]


@dataclass(frozen=True)
class _Token:
    """``head`` + one value of each prefix group (each followed by its text) + the last group."""

    head: str
    groups: tuple[tuple[tuple[_Range, ...], str], ...] = ()
    last: tuple[_Range, ...] | None = None  # None: ``head`` is the whole host name

    @property
    def size(self) -> int:
        """Number of names, saturating at ``2**64``."""
        size = 1 if self.last is None else sum(r.size for r in self.last)
        for ranges, _ in self.groups:
            size = min(size * sum(r.size for r in ranges), _SIZE_CAP)
        return size

    @property
    def longest(self) -> int:
        """Length of the longest name, an upper bound of the average."""
        length = len(self.head)
        if self.last is not None:
            length += max(r.longest for r in self.last)
        for ranges, tail in self.groups:
            length += max(r.longest for r in ranges) + len(tail)
        return length

    def names(self) -> list[str]:
        if self.last is None:
            return [self.head]
        # Slurm recurses outwards from the group before the last; the last group is innermost.
        axes = [[n for r in rs for n in r.names(suffix=tail)] for rs, tail in self.groups[::-1]]
        lasts = [n for r in self.last for n in r.names()]
        return [
            self.head + "".join(combo[-2::-1]) + combo[-1]
            for combo in itertools.product(*axes, lasts)
        ]


def expand(expression: str, *, max_hosts: int = MAX_HOSTS) -> list[str]:
    """Return the host names of ``expression`` in Slurm's order, duplicates kept.

    ``""`` gives ``[]``. Raises :class:`HostlistError`, naming the bad part, wherever
    ``scontrol show hostnames`` reports an error, beyond ``max_hosts`` names, and past the
    module's other limits (expression length, total length of the names, digits per number).
    """
    if len(expression) > MAX_EXPRESSION:
        raise HostlistError(
            f"hostlist {_short(expression)} is {len(expression)} characters long; "
            f"the limit is {MAX_EXPRESSION}"
        )
    if expression and max_hosts >= 1 and _PLAIN_HOST.fullmatch(expression):
        return [expression]
    tokens = [_parse_token(text, expression) for text in _split(expression)]
    if sum(token.size for token in tokens) > max_hosts:
        raise HostlistError(f"hostlist {_short(expression)} has more than {max_hosts} hosts")
    # Few names can still be huge: a 1 MiB prefix times 65536 numbers is 64 GiB.
    if sum(token.size * token.longest for token in tokens) > MAX_EXPANDED_CHARS:
        raise HostlistError(
            f"hostlist {_short(expression)} expands to more than {MAX_EXPANDED_CHARS} characters"
        )
    return [name for token in tokens for name in token.names()]


def _split(expression: str) -> list[str]:
    """Tokens as hostlist.c ``_next_tok`` cuts them: separators inside ``[...]`` do not cut.

    Linear: every ``find`` starts where the previous one of its kind stopped. The first ``]``
    at or after ``parse`` is remembered, since ``parse`` only grows; ``-1`` once none is left.
    """
    tokens: list[str] = []
    i, end = 0, len(expression)
    next_closing = expression.find("]")  # the first ']' at or after ``parse``; -1: none left
    while True:
        while i < end and expression[i] in _SEPARATORS:
            i += 1
        if i == end:
            return tokens
        start = parse = i
        while True:
            while i < end and expression[i] not in _SEPARATORS:
                i += 1
            opening = expression.find("[", parse, i)
            if opening < 0:
                break
            if 0 <= next_closing < parse:
                next_closing = expression.find("]", parse)
            closing = next_closing
            if closing < opening:
                break
            if closing < i:
                parse = closing + 1
            else:
                i = closing  # the bracket pair spans a separator: keep scanning after it
        tokens.append(expression[start:i])


def _parse_token(token: str, expression: str) -> _Token:
    opening = token.rfind("[")
    if opening < 0:
        if "]" in token:
            raise _unpaired_brackets(token, expression)
        return _host(token)
    closing = token.find("]", opening)
    if closing < 0:
        raise _unpaired_brackets(token, expression)
    if closing != len(token) - 1:
        raise HostlistError(f"text after ']' in {_short(token)}")
    last = _parse_ranges(token[opening + 1 : closing], token)
    end = opening  # the prefix is token[:end]; indices, not slices, keep this linear
    groups: list[tuple[tuple[_Range, ...], str]] = []
    # Earlier groups hide in the prefix: its last '[' and the last ']' after it, repeatedly.
    while (opening := token.rfind("[", 0, end)) >= 0 and (
        closing := token.rfind("]", opening, end)
    ) >= 0:
        ranges = _parse_ranges(token[opening + 1 : closing], token)
        if (count := sum(r.size for r in ranges)) > MAX_PREFIX_CNT:
            raise HostlistError(
                f"{_short(token[opening : closing + 1])} in {_short(token)} gives {count} "
                f"values; Slurm allows {MAX_PREFIX_CNT} in a bracket before the last"
            )
        groups.append((ranges, token[closing + 1 : end]))
        end = opening
    # The groups peeled off above pair; a bracket left in the head pairs with none of them.
    if "[" in token[:end] or "]" in token[:end]:
        raise _unpaired_brackets(token, expression)
    return _Token(token[:end], tuple(groups[::-1]), last)


def _unpaired_brackets(token: str, expression: str) -> HostlistError:
    """The error for a token whose brackets do not pair, naming the first bracket at fault."""
    where = f"in {_short(token)}"
    if token != expression:
        where += f" of hostlist {_short(expression)}"
    opened = -1  # index of the '[' not closed yet
    for index, char in enumerate(token):
        if char == "[" and opened >= 0:
            return HostlistError(f"'[' at {index} is inside another '[' {where}")
        if char == "[":
            opened = index
        elif char == "]" and opened < 0:
            return HostlistError(f"']' at {index} without '[' {where}")
        elif char == "]":
            opened = -1
    if opened >= 0:
        return HostlistError(f"'[' at {opened} never closed {where}")
    return HostlistError(f"brackets do not pair {where}")  # unreachable when called as above


def _parse_ranges(text: str, token: str) -> tuple[_Range, ...]:
    items = text.split(",")
    if len(items) > MAX_RANGES:
        raise HostlistError(f"more than {MAX_RANGES} ranges in {_short(token)}")
    return tuple(_parse_range(item, token) for item in items)


def _parse_range(item: str, token: str) -> _Range:
    """One ``lo`` or ``lo-hi``, with hostlist.c ``_parse_single_range``'s exact leniency."""
    low, dash, high = item.partition("-")
    lo, lo_end = _strtoul(low, token)
    hi, hi_end = _strtoul(high, token) if high else (lo, lo_end)
    # Slurm checks the end of the last number read only: garbage after lo passes when hi exists.
    bad = "x" in item or high.startswith("-") or lo_end == 0 or hi_end != len(high or low)
    if bad or lo > hi:
        raise HostlistError(f"invalid range {item!r} in {_short(token)}")
    if dash and not high:
        # Slurm reads lo- as lo; here it is a truncated range, not a single host.
        raise HostlistError(f"invalid range {item!r} in {_short(token)}: no upper bound")
    if hi - lo + 1 > MAX_RANGE:
        raise HostlistError(f"range {item!r} in {_short(token)} has more than {MAX_RANGE} hosts")
    return _Range(lo, hi, _c_length(low))


def _c_length(text: str) -> int:
    """Bytes of ``text`` as the C string Slurm reads (padding is counted in bytes)."""
    try:
        # Undecodable bytes of argv or a file arrive as lone surrogates U+DC80..U+DCFF.
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        # Other lone surrogates (JSON's "\ud800") have no bytes of their own; never fail on them.
        return len(text.encode("utf-8", "surrogatepass"))


def _number(digits: str, where: str) -> int:
    """``int(digits)``, refused past :data:`MAX_DIGITS` (Python raises ValueError past 4300)."""
    if len(digits) > MAX_DIGITS:
        raise HostlistError(
            f"number {_short(digits, 30)} in {_short(where)} has more than {MAX_DIGITS} digits"
        )
    return int(digits)


def _strtoul(text: str, token: str) -> tuple[int, int]:
    """C ``strtoul(text, &end, 10)`` as ``(value, end)``; ``end`` is 0 when no digit was read."""
    stripped = text.lstrip(" \t\n\v\f\r")
    sign = stripped[:1] if stripped[:1] in ("+", "-") else ""
    body = stripped[len(sign) :]
    digits = body[: len(body) - len(body.lstrip(_DIGITS))]
    if not digits:
        return 0, 0
    value = _number(digits, token)
    if value > _ULONG_MAX:
        value = _ULONG_MAX  # C saturates, whatever the sign
    elif sign == "-":
        value = -value % 2**64
    return value, len(text) - len(body) + len(digits)


def _host(name: str) -> _Token:
    """A plain host; Slurm re-prints its numeric suffix, which only changes past 2**64."""
    stem = name.rstrip(_DIGITS)
    if stem == name:
        return _Token(name)
    number = min(_number(name[len(stem) :], name), _ULONG_MAX)
    return _Token(stem, (), (_Range(number, number, len(name) - len(stem)),))


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


# ---- compress: hostlist_create + hostlist_sort + hostlist_ranged_string ----------------------


class _HostRange:
    """hostlist.c's mutable ``hostrange``: comparing two may change a width (_width_equiv)."""

    def __init__(self, name: str) -> None:
        stem = name.rstrip(_DIGITS)
        self.single = stem == name
        self.prefix = stem
        self.lo = self.hi = 0 if self.single else int(name[len(stem) :])
        self.width = len(name) - len(stem)

    def numbers(self) -> str:
        if self.single:
            return ""
        lo = f"{self.lo:0{self.width}d}"
        return lo if self.hi == self.lo else f"{lo}-{self.hi:0{self.width}d}"


def compress(names: Iterable[str]) -> str:
    """Return the shortest Slurm hostlist for ``names``: deduplicated, sorted as Slurm sorts.

    The result is what ``scontrol show hostlistsorted`` prints for the deduplicated names, and
    ``expand(compress(names))`` gives each name once, in that order. A name with a bracket,
    comma, whitespace, non-ASCII, or a numeric suffix of 2**64 or more or of more than
    :data:`MAX_DIGITS` digits cannot round-trip, so it raises :class:`HostlistError`.
    """
    return _render(_sorted_ranges(names))


def compress_within(names: Iterable[str], max_chars: int) -> list[str]:
    """:func:`compress` cut into hostlists of at most ``max_chars`` characters each, for a
    command line (one argument may hold 128 kB on Linux): one when it fits, else Slurm's sorted
    order cut in halves until each half fits, so neighbours stay in one range. Each name is in
    exactly one of them; a single range longer than ``max_chars`` stands alone. Raises as
    :func:`compress` does."""
    return _render_within(_sorted_ranges(names), max_chars)


def is_hostlist_name(name: str) -> bool:
    """Whether a hostlist can carry ``name`` (what :func:`compress` refuses, it cannot)."""
    try:
        _check_name(name)
    except HostlistError:
        return False
    return True


def _sorted_ranges(names: Iterable[str]) -> list[_HostRange]:
    """The deduplicated names as Slurm's sorted, collapsed ranges (``hostlist_uniq``)."""
    ranges: list[_HostRange] = []
    for name in dict.fromkeys(names):
        _check_name(name)
        _append_joined(ranges, _HostRange(name))
    ranges = _merge_sort(ranges)
    for i in range(len(ranges) - 1, 0, -1):  # hostlist_collapse: join neighbours, right to left
        if _joinable(ranges[i - 1], ranges[i]):
            ranges[i - 1].hi = ranges.pop(i).hi
    return ranges


def _render(ranges: list[_HostRange]) -> str:
    """Sorted, collapsed ranges as ``hostlist_ranged_string`` prints them."""
    parts: list[str] = []
    i = 0
    while i < len(ranges):
        first, j = ranges[i], i + 1
        while j < len(ranges) and _same_brackets(ranges[j], ranges[j - 1]):
            j += 1
        numbers = ",".join(r.numbers() for r in ranges[i:j])
        bracket = j > i + 1 or first.hi > first.lo
        parts.append(f"{first.prefix}[{numbers}]" if bracket else first.prefix + numbers)
        i = j
    return ",".join(parts)


def _render_within(ranges: list[_HostRange], max_chars: int) -> list[str]:
    if not ranges:
        return []
    text = _render(ranges)
    if len(text) <= max_chars or len(ranges) == 1:
        return [text]
    half = len(ranges) // 2
    return _render_within(ranges[:half], max_chars) + _render_within(ranges[half:], max_chars)


def _check_name(name: str) -> None:
    bad = not name or not name.isascii() or not name.isprintable() or any(c in name for c in "[], ")
    digits = len(name) - len(name.rstrip(_DIGITS))
    if bad or digits > MAX_DIGITS or (digits and int(name[-digits:]) > _ULONG_MAX):
        raise HostlistError(f"{_short(name)} is not a host name a hostlist can carry")


def _append_joined(ranges: list[_HostRange], new: _HostRange) -> None:
    """hostlist_push_range: extend the last range when ``new`` continues it."""
    if ranges and _joinable(ranges[-1], new):
        ranges[-1].hi = new.hi
    else:
        ranges.append(new)


def _joinable(left: _HostRange, right: _HostRange) -> bool:
    # Slurm's unsigned arithmetic joins 2**64-1 and 0 into "18446744073709551615-0"; we do not.
    return left.hi + 1 == right.lo and _prefix_cmp(left, right) == 0 and _width_equiv(left, right)


def _same_brackets(a: _HostRange, b: _HostRange) -> bool:
    return _prefix_cmp(a, b) == 0 and not (a.single or b.single)


def _compare(a: _HostRange, b: _HostRange) -> int:
    """hostrange_cmp. Slurm returns ``(int)(a->lo - b->lo)``, which overflows past 2**31 and
    then loses hosts; we keep the true difference, so such lists stay complete."""
    if result := _prefix_cmp(a, b):
        return result
    if _width_equiv(a, b):
        return a.lo - b.lo
    return a.width - b.width


def _prefix_cmp(a: _HostRange, b: _HostRange) -> int:
    return _strnatcmp(a.prefix, b.prefix) or int(b.single) - int(a.single)


def _width_equiv(a: _HostRange, b: _HostRange) -> bool:
    """Can ``a`` and ``b`` share one zero padding? If so, make their widths equal (as Slurm)."""
    if a.width == b.width:
        return True
    a_same = _padding(a.lo, a.width) == _padding(a.lo, b.width)
    b_same = _padding(b.lo, b.width) == _padding(b.lo, a.width)
    if not (a_same or b_same):
        return False
    if a_same:
        a.width = b.width
    else:
        b.width = a.width
    return True


def _padding(number: int, width: int) -> int:
    return max(width - len(str(number)), 0)


def _merge_sort(items: list[_HostRange]) -> list[_HostRange]:
    """glibc 2.36 ``qsort`` (msort.c). Slurm's comparator is not a total order and mutates its
    arguments, so only the very same sequence of comparisons gives the very same output."""
    if len(items) <= 1:
        return items
    half = len(items) // 2
    left, right = _merge_sort(items[:half]), _merge_sort(items[half:])
    merged: list[_HostRange] = []
    i = j = 0
    while i < len(left) and j < len(right):
        if _compare(left[i], right[j]) <= 0:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    return merged + left[i:] + right[j:]


def _strnatcmp(a: str, b: str) -> int:
    """Slurm's strnatcmp.c (Martin Pool's natural order): ``n2 < n10``, ``n01 < n1``.

    Its skipping of whitespace is left out: compress() refuses names with whitespace.
    """
    if a == b:  # by far the most common case: two ranges of one pool
        return 0
    i = 0
    while True:
        ca, cb = a[i : i + 1], b[i : i + 1]
        if ca and cb and ca in _DIGITS and cb in _DIGITS:
            run_a, run_b = _digit_run(a, i), _digit_run(b, i)
            if "0" not in (ca, cb):  # not "fractional": the longer run wins, then the digits
                width = max(len(run_a), len(run_b))
                run_a, run_b = run_a.rjust(width, "0"), run_b.rjust(width, "0")
            if run_a != run_b:
                return -1 if run_a < run_b else 1
        if not ca and not cb:
            return 0
        if ca != cb:
            return -1 if ca < cb else 1
        i += 1


def _digit_run(text: str, start: int) -> str:
    return text[start : len(text) - len(text[start:].lstrip(_DIGITS))]
