"""bridge.domain.hostlist: tables of what Slurm 22.05 printed, plus seeded round-trip properties.

Every expected value below was produced by ``scontrol show hostnames`` / ``show hostlistsorted``
of Debian's Slurm 22.05.8, except where a comment says we deliberately differ.
"""

from __future__ import annotations

import random

import pytest

from bridge.domain.hostlist import (
    MAX_DIGITS,
    MAX_EXPANDED_CHARS,
    MAX_EXPRESSION,
    MAX_HOSTS,
    MAX_PREFIX_CNT,
    MAX_RANGE,
    compress,
    compress_within,
    expand,
    is_hostlist_name,
)
from bridge.domain.node_names import check_node_name
from bridge.errors import HostlistError, InvalidInput

VALID = [
    ("a1", ["a1"]),
    ("a[1-3]", ["a1", "a2", "a3"]),
    ("a[01-10]", [f"a{n:02d}" for n in range(1, 11)]),
    ("a[1-3,7,9-10]", ["a1", "a2", "a3", "a7", "a9", "a10"]),
    ("a[5,3,1-2]", ["a5", "a3", "a1", "a2"]),
    ("rack[1-2]-node[1-3]", [f"rack{r}-node{n}" for r in (1, 2) for n in (1, 2, 3)]),
    ("a[1-2]b[3-4]c[5-6]", [f"a{a}b{b}c{c}" for b in (3, 4) for a in (1, 2) for c in (5, 6)]),
    ("a[1-2][3-4]", ["a13", "a14", "a23", "a24"]),
    ("a[1-2],b3,c", ["a1", "a2", "b3", "c"]),
    (" a1 , a2 ", ["a1", "a2"]),
    ("a1 a2\ta3,,a4", ["a1", "a2", "a3", "a4"]),
    ("a1,a1", ["a1", "a1"]),
    ("a[1,1]", ["a1", "a1"]),
    ("a[1-3],a2", ["a1", "a2", "a3", "a2"]),
    ("a0,a00,a1", ["a0", "a00", "a1"]),
    ("a-[1-2]", ["a-1", "a-2"]),
    ("[1-3]", ["1", "2", "3"]),
    ("", []),
    (" , ", []),
    # Zero padding is the width of the low bound as written.
    ("a[01-1]", ["a01"]),
    ("a[1-010]", [f"a{n}" for n in range(1, 11)]),
    ("a[0009-12]", ["a0009", "a0010", "a0011", "a0012"]),
    ("a[098-100]", ["a098", "a099", "a100"]),
    # Numbers are read by C strtoul; only the last one read must end where the item ends.
    ("a[+1-3]", ["a01", "a02", "a03"]),
    ("a[ 1-3]", ["a01", "a02", "a03"]),
    ("a[1z-3]", ["a01", "a02", "a03"]),
    ("a[1- 3]", ["a1", "a2", "a3"]),
    ("a[99999999999999999999]", ["a18446744073709551615"]),
    ("a99999999999999999999", ["a18446744073709551615"]),
    ("a!@#", ["a!@#"]),
]


@pytest.mark.parametrize(("expression", "names"), VALID)
def test_expand(expression: str, names: list[str]) -> None:
    assert expand(expression) == names


INVALID = [
    ("a[3-1]", "invalid range '3-1'"),
    ("a[]", "invalid range ''"),
    ("a[1,,2]", "invalid range ''"),
    ("a[1,]", "invalid range ''"),
    ("a[,1]", "invalid range ''"),
    ("a[-3]", "invalid range '-3'"),
    ("a[-]", "invalid range '-'"),
    ("a[a-b]", "invalid range 'a-b'"),
    ("a[1--3]", "invalid range '1--3'"),
    ("a[1-3-5]", "invalid range '1-3-5'"),
    ("a[1z]", "invalid range '1z'"),
    ("a[1z-]", "invalid range '1z-'"),
    ("a[1-3z]", "invalid range '1-3z'"),
    ("a[0x10]", "invalid range '0x10'"),
    ("a[1-2\t]", "invalid range '1-2\\t'"),
    ("a[1 c]", "invalid range '1 c'"),
    ("a[1]x", "text after ']' in 'a[1]x'"),
    ("x[1-2]y", "text after ']'"),
    ("a[1]]", "text after ']'"),
    ("a[[1]]", "text after ']'"),
    ("a[1]b]c[2]", "invalid range '1]b'"),
    # Brackets that do not pair. Slurm 22.05 tacks a ']' on a '[' never closed (a[1-3 is host
    # "a]"); 24.11 and 26.05 refuse it as we do. Every series takes a ']' without '[' and a '['
    # inside another as characters of a host name: we refuse, naming the hostlist.
    ("cpu-[0-", "'[' at 4 never closed in 'cpu-[0-'"),
    ("a[1-3", "'[' at 1 never closed in 'a[1-3'"),
    ("[1-3", "'[' at 0 never closed in '[1-3'"),
    ("[", "'[' at 0 never closed in '['"),
    ("a[1]b[2", "'[' at 5 never closed in 'a[1]b[2'"),
    ("a[1-3]b[2-", "'[' at 7 never closed in 'a[1-3]b[2-'"),
    ("a[1-3,b2", "'[' at 1 never closed in 'a[1-3' of hostlist 'a[1-3,b2'"),
    ("ok1, a[1-3 ", "'[' at 1 never closed in 'a[1-3' of hostlist 'ok1, a[1-3 '"),
    ("]", "']' at 0 without '[' in ']'"),
    ("a]", "']' at 1 without '[' in 'a]'"),
    ("a]b[1]", "']' at 1 without '[' in 'a]b[1]'"),
    ("a]]", "']' at 1 without '[' in 'a]]'"),
    ("x]y[1,2]z", "']' at 1 without '[' in 'x]y[1' of hostlist 'x]y[1,2]z'"),
    ("a[b[1-2]", "'[' at 3 is inside another '[' in 'a[b[1-2]'"),
    ("a[[1]", "'[' at 2 is inside another '[' in 'a[[1]'"),
    ("a[1]b[c[2]", "'[' at 7 is inside another '[' in 'a[1]b[c[2]'"),
    # Slurm reads lo- as lo; a range cut short is a typo, not one host.
    ("a[0-]", "invalid range '0-' in 'a[0-]': no upper bound"),
    ("a[1-]", "invalid range '1-' in 'a[1-]': no upper bound"),
    ("a[1,2-]", "invalid range '2-' in 'a[1,2-]': no upper bound"),
    ("a[1-2][3-]b[1]", "invalid range '3-' in 'a[1-2][3-]b[1]': no upper bound"),
    ("a[0-65536]", "range '0-65536' in 'a[0-65536]' has more than 65536 hosts"),
    ("a[1- -3]", "more than 65536 hosts"),
    ("a[0-18446744073709551615]", "more than 65536 hosts"),  # Slurm: prints nothing
    ("a[0-65535,0]b[1]", "'[0-65535,0]' in 'a[0-65535,0]b[1]' gives 65537 values"),
    ("ok1,a[0-3,0-65532]b[1]", "gives 65537 values"),
    # Slurm only logs these and silently drops the token; we refuse.
    ("a[3-1]b[1]c[1-2]", "invalid range '3-1'"),
    ("a[x]b[1]c[1]d[1],z", "invalid range 'x'"),
]


@pytest.mark.parametrize(("expression", "message"), INVALID)
def test_expand_rejects(expression: str, message: str) -> None:
    with pytest.raises(HostlistError) as caught:
        expand(expression)
    assert message in str(caught.value)


def test_limits() -> None:
    assert len(expand(f"a[0-{MAX_RANGE - 1}]")) == MAX_RANGE
    assert len(expand(f"a[1-{MAX_PREFIX_CNT}]b[1]")) == MAX_PREFIX_CNT
    assert len(expand("a[1]b[0-65535,0]")) == 65537  # the last bracket has no total limit
    with pytest.raises(HostlistError, match="more than 1000 hosts"):
        expand("a[1-999],b[1-2]", max_hosts=1000)
    with pytest.raises(HostlistError, match="more than 100000 hosts"):
        expand("a[0-1023]b[0-1024]")  # Slurm would list all 1,049,600
    assert len(expand("a[1-50000],b[1-50000]")) == MAX_HOSTS


# Ours, not Slurm's: each bounds the time and memory one hostile expression can take.
BOUNDED = [
    ("a" * (MAX_EXPRESSION + 1), f"is {MAX_EXPRESSION + 1} characters long; the limit is"),
    ("a," * (MAX_EXPRESSION // 2), "more than 100000 hosts"),
    ("a" + "[1-2]" * 17, "more than 100000 hosts"),
    ("a" + "[1-2]" * 50_000, "more than 100000 hosts"),  # the size saturates, not a bignum
    ("a" * 1000 + "[1-65536]", f"expands to more than {MAX_EXPANDED_CHARS} characters"),
    ("a[" + "0" * 1000 + "1-2]", f"has more than {MAX_DIGITS} digits"),
    (
        "a" + "1" * 5000,
        f"in {'a' + '1' * 56 + '...'!r} has more than {MAX_DIGITS} digits",
    ),
    ("a[1-" + "9" * 21 + "]", f"has more than {MAX_DIGITS} digits"),
    ("a[1]b[" + "1" * 21 + "]c[1]", f"has more than {MAX_DIGITS} digits"),
]


@pytest.mark.parametrize(("expression", "message"), BOUNDED)
def test_expand_bounds_hostile_input(expression: str, message: str) -> None:
    with pytest.raises(HostlistError) as caught:
        expand(expression)
    assert message in str(caught.value)


# Shapes that made token splitting or bracket parsing quadratic: each must stay linear.
LINEAR = [
    ("a[1," * (MAX_EXPRESSION // 8), "never closed"),  # '[' never closed, many tokens
    ("x" + "[1]" * (MAX_EXPRESSION // 4), None),  # many bracket groups in one token
    ("x]" + "[1]" * (MAX_EXPRESSION // 4), "without '\\['"),  # ... then a stray ']' in the head
    ("[ " * (MAX_EXPRESSION // 4), "never closed"),
    ("][" * (MAX_EXPRESSION // 2), "without '\\['"),
]


@pytest.mark.parametrize(("expression", "message"), LINEAR)
@pytest.mark.timeout(20)
def test_expand_is_linear(expression: str, message: str | None) -> None:
    if message is None:
        assert len(expand(expression)) == 1
    else:
        with pytest.raises(HostlistError, match=message):
            expand(expression)


COMPRESS = [
    ([], ""),
    (["a1"], "a1"),
    (["b1", "a2", "a1"], "a[1-2],b1"),
    (["a3", "a1", "a2"], "a[1-3]"),
    (["a1", "a2", "a3", "b1", "a4"], "a[1-4],b1"),
    (["rack1-node1", "rack1-node2", "rack2-node1"], "rack1-node[1-2],rack2-node1"),
    (["n1", "n10", "n2", "m"], "m,n[1-2,10]"),
    (["x10", "x9", "x100", "x2"], "x[2,9-10,100]"),
    (["a10b", "a9b", "a1b"], "a1b,a9b,a10b"),
    (["b", "a", "B", "A", "_", "1"], "1,A,B,_,a,b"),
    (["a2", "a1", "a"], "a,a[1-2]"),
    (["a-1", "a-2", "a1"], "a1,a-[1-2]"),
    (["a099", "a100"], "a[099-100]"),
    (["a01", "a2", "a3", "a02"], "a[2-3,01-02]"),
    (["a", "a1", "a01", "a001"], "a,a[1,01,001]"),
    (["a0", "a00", "a000", "a1", "a01"], "a[0-1,00-01,000]"),
    (["a09", "a9", "a10", "a010"], "a[9-10,09,010]"),
    (["a1", "a1", "a2"], "a[1-2]"),  # we drop duplicates; Slurm prints a[1,1-2]
    (["n4294967296", "n2"], "n[2,4294967296]"),  # Slurm's int overflow: n[4294967296], n2 lost
    # Slurm's unsigned arithmetic joins these into "n18446744073709551615-0"; we keep both.
    (["n18446744073709551615", "n0"], "n[0,18446744073709551615]"),
    (
        ["n18446744073709551614", "n18446744073709551615", "n0", "n1"],
        "n[0-1,18446744073709551614-18446744073709551615]",
    ),
    (["a" + "0" * 19 + "1", "a" + "0" * 19 + "2"], "a[" + "0" * 19 + "1-" + "0" * 19 + "2]"),
]


@pytest.mark.parametrize(("names", "hostlist"), COMPRESS)
def test_compress(names: list[str], hostlist: str) -> None:
    assert compress(names) == hostlist


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a b",
        "a,b",
        "a[1]",
        "a]",
        "\u00e91",
        "a\t",
        "a" + "9" * 20,
        "a" + "0" * 21,
        "a" + "1" * 5000,
    ],
)
def test_compress_rejects_names_a_hostlist_cannot_carry(name: str) -> None:
    with pytest.raises(HostlistError, match="not a host name"):
        compress(["ok1", name])
    assert not is_hostlist_name(name)
    with pytest.raises(HostlistError, match="not a host name"):
        compress_within(["ok1", name], 100)


@pytest.mark.parametrize("name", ["a1", "cpu-0", "x.y", "gpu_a", "a" + "9" * 19])
def test_names_a_hostlist_carries(name: str) -> None:
    assert is_hostlist_name(name)


UNCOMPRESSIBLE = [f"node-{chr(97 + i % 26)}{i}x" for i in range(3000)]

COMPRESS_WITHIN = [
    # Fits: one hostlist, the same as compress().
    ([], 10, []),
    (["a2", "a1", "a3"], 6, ["a[1-3]"]),
    ([f"cpu-{i}" for i in range(20_000)], 100, ["cpu-[0-19999]"]),
    # Too long: Slurm's sorted order cut in halves, neighbours kept in one range.
    (["a1", "a3", "b1", "b3"], 12, ["a[1,3]", "b[1,3]"]),
    (["a1", "a3", "b1", "b3"], 5, ["a1", "a3", "b1", "b3"]),
    # A single name longer than the limit still goes, alone.
    (["averylongname", "b1"], 4, ["averylongname", "b1"]),
]


@pytest.mark.parametrize(("names", "max_chars", "hostlists"), COMPRESS_WITHIN)
def test_compress_within(names: list[str], max_chars: int, hostlists: list[str]) -> None:
    assert compress_within(names, max_chars) == hostlists


@pytest.mark.parametrize("max_chars", [50, 1000, 64 * 1024])
def test_compress_within_names_each_once_under_the_limit(max_chars: int) -> None:
    names = [*UNCOMPRESSIBLE, *(f"cpu-{i}" for i in range(500)), UNCOMPRESSIBLE[7]]
    hostlists = compress_within(names, max_chars)
    assert all(len(h) <= max_chars for h in hostlists)
    named = [n for h in hostlists for n in expand(h)]
    assert sorted(named) == sorted(set(names))
    assert expand(",".join(hostlists)) == expand(compress(names))  # Slurm's order kept


# ---- seeded properties -------------------------------------------------------------------------

PREFIXES = ["n", "gpu-", "rack1-node", "rack10-node", "r2n", "cpu_", "x.y"]


def seeded(seed: int) -> random.Random:
    return random.Random(seed)


def random_names(rng: random.Random, mixed_padding: bool) -> list[str]:
    names = [rng.choice(["login", "head", "x.y"]) for _ in range(rng.randint(0, 2))]
    for prefix in rng.sample(PREFIXES, rng.randint(1, 4)):
        width = rng.choice([0, 2, 3, 4])
        top = rng.choice([10, 100, 2000])
        for number in rng.sample(range(top), rng.randint(1, min(top, 60))):
            if mixed_padding:
                width = rng.choice([0, 2, 3, 4])
            names.append(f"{prefix}{number:0{width}d}")
    names += rng.choices(names, k=rng.randint(0, 5))  # some duplicates
    rng.shuffle(names)
    return names


@pytest.mark.parametrize("mixed_padding", [False, True])
def test_compress_round_trips(mixed_padding: bool) -> None:
    rng = seeded(22058 + mixed_padding)
    for _ in range(300):
        names = random_names(rng, mixed_padding)
        compressed = compress(names)
        expanded = expand(compressed)
        assert sorted(expanded) == sorted(set(names)), compressed
        assert compress(expanded) == compressed
        if not mixed_padding:
            assert compress(rng.sample(names, len(names))) == compressed


def test_compress_sorts_uniform_pools_naturally() -> None:
    rng = seeded(7)
    for _ in range(200):
        prefix, width = rng.choice(PREFIXES), rng.choice([0, 3])
        numbers = rng.sample(range(1500), rng.randint(1, 80))
        expanded = expand(compress(f"{prefix}{n:0{width}d}" for n in numbers))
        assert expanded == [f"{prefix}{n:0{width}d}" for n in sorted(numbers)]


def random_expression(rng: random.Random) -> str:
    tokens = []
    for _ in range(rng.randint(1, 4)):
        groups = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            items = []
            for _ in range(rng.randint(1, 3)):
                low = rng.randint(0, 50)
                high = low + rng.randint(0, 6)
                width = rng.choice([0, 0, 2, 3])
                items.append(f"{low:0{width}d}" + rng.choice(["", f"-{high}"]))
            groups.append(rng.choice(PREFIXES) + "[" + ",".join(items) + "]")
        tokens.append("".join(groups))
    return rng.choice([",", " ", ", "]).join(tokens)


def test_expanded_expressions_compress_to_the_same_set() -> None:
    rng = seeded(2205)
    for _ in range(300):
        expression = random_expression(rng)
        names = expand(expression)
        assert set(expand(compress(names))) == set(names), expression


def test_a_plain_name_expands_as_the_parser_would() -> None:
    # expand() returns a plain host name as it is, unparsed; a trailing comma makes the same
    # hostlist go through the parser, which must agree (or refuse both: past 19 digits the
    # plain path is not taken).
    rng = seeded(2611)
    for _ in range(2000):
        head = "".join(rng.choice("abz-09") for _ in range(rng.randint(0, 6)))
        name = head + "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 24)))
        try:
            parsed: list[str] | str = expand(name + ",")
        except HostlistError as e:
            parsed = type(e).__name__
        try:
            plain: list[str] | str = expand(name)
        except HostlistError as e:
            plain = type(e).__name__
        assert plain == parsed, name


# ---- node names ----------------------------------------------------------------------------------

NODE_NAMES = [
    ("a1", None),
    ("gpu-01", None),
    ("1", None),
    ("a" * 63, None),
    ("a18446744073709551615", None),
    ("a" + "9" * 19, None),  # the most digits read back unchanged without expanding
    ("a" + "1" * 20, None),  # more: expanded, and below 2**64
    ("", "node name must not be empty"),
    ("a" * 64, "is 64 characters long; the limit is 63"),
    ("a" * 1_000_000, "node name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is 1000000"),
    ("A1", "'A1' is not a DNS-1123 label"),
    ("-a", "'-a' is not a DNS-1123 label"),
    ("a-", "'a-' is not a DNS-1123 label"),
    ("a.b", "'a.b' is not a DNS-1123 label"),
    ("a_b", "'a_b' is not a DNS-1123 label"),
    ("a{b}", "'a{b}' is not a DNS-1123 label"),  # newer Slurm: a hostlist function
    ("{", "'{' is not a DNS-1123 label"),
    ("}", "'}' is not a DNS-1123 label"),
    ("a=b", "'a=b' is not a DNS-1123 label"),
    ("a[1]", "'a[1]' is not a DNS-1123 label"),
    ("a,b", "'a,b' is not a DNS-1123 label"),
    ("a\n", "is not a DNS-1123 label"),
    ("\u00e91", "is not a DNS-1123 label"),
    ("a99999999999999999999", "Slurm reads it as another name"),
    ("a" + "0" * 21, f"has more than {MAX_DIGITS} digits"),
]


@pytest.mark.parametrize(("name", "message"), NODE_NAMES)
def test_check_node_name(name: str, message: str | None) -> None:
    if message is None:
        check_node_name(name)
        return
    with pytest.raises(InvalidInput) as caught:
        check_node_name(name)
    assert message in str(caught.value)


# Lone surrogates reach expand() from JSON ("\ud800") and from undecodable argv bytes; the
# padding counts the bytes Slurm would see, and neither may raise UnicodeEncodeError.
@pytest.mark.parametrize(
    ("expression", "names"),
    [("a[1\udc80-2]", ["a01", "a02"]), ("a[1\ud800-2]", ["a0001", "a0002"])],
)
def test_expand_pads_lone_surrogates_by_their_bytes(expression: str, names: list[str]) -> None:
    assert expand(expression) == names
