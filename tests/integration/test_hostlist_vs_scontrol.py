"""bridge.domain.hostlist against the real ``scontrol`` (Debian's Slurm 22.05).

``scontrol show hostnames`` and ``show hostlistsorted`` read slurm.conf but talk to no daemon: a
two-line conf in tmp_path (ClusterName, SlurmctldHost) is enough. scontrol exits 0 even when it
prints "Invalid hostlist", so rejection is read from its output, not its exit code.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from bridge.domain.hostlist import compress, expand
from bridge.errors import HostlistError

pytestmark = pytest.mark.integration

SCONTROL = Path("/usr/bin/scontrol")
SEED = 2205
CASES = 400


@pytest.fixture(scope="module")
def scontrol_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if not SCONTROL.exists():
        pytest.skip(f"{SCONTROL} is absent: install Debian's slurm-client to compare with Slurm")
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text("ClusterName=hostlisttest\nSlurmctldHost=localhost\n")
    # No SLURM_JOB_NODELIST or other SLURM_* from the caller: only the conf we wrote.
    return {"SLURM_CONF": str(conf), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def scontrol(env: dict[str, str], command: str, argument: str) -> list[str] | None:
    """Lines scontrol printed, or None when it reported an error.

    "Invalid hostlist" is a rejection. A bad range in the third-from-last or an earlier bracket
    group only logs "error: ..." and the token silently yields nothing (hostlist.c swallows the
    recursion's -1): expand() rejects those too, on purpose.
    """
    # "--" so that an expression starting with '-' is not taken for an option.
    argv = [str(SCONTROL), "--", "show", command, argument]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 0, f"scontrol crashed on {argument!r}: {done.stderr}"
    if "Invalid hostlist" in done.stderr or "error:" in done.stderr:
        return None
    assert not done.stderr, done.stderr
    return done.stdout.split("\n")[:-1]  # not splitlines(): a name may hold a '\v'...


def ours(expression: str) -> list[str] | None:
    try:
        return expand(expression)
    except HostlistError:
        return None


# Our refusals of what Slurm 22.05 accepts (see bridge.domain.hostlist): a '[' never closed
# (22.05 tacks a ']' on; 24.11 refuses too), a ']' without '[', a '[' inside another, lo-.
DELIBERATE = ("never closed", "without '['", "inside another '['", "no upper bound")


def refused_on_purpose(expression: str) -> bool:
    try:
        expand(expression)
    except HostlistError as error:
        return any(words in str(error) for words in DELIBERATE)
    return False


# ---- a generator of plausible and broken hostlists -------------------------------------------

PREFIX_CHARS = "abcnode-_.Z"
NOISE = ["[", "]", ",", "-", " ", "x", "+", "0", "--", "[]", ",,", "\t", "9", "a"]


def number(rng: random.Random) -> str:
    value = rng.choice([rng.randint(0, 12), rng.randint(0, 120), rng.randint(90, 1100)])
    return str(value).zfill(rng.choice([0, 0, 0, 2, 3, 4]))


def range_item(rng: random.Random, huge: bool) -> str:
    lo = number(rng)
    roll = rng.random()
    if roll < 0.35:
        return lo
    if roll < 0.9:
        return f"{lo}-{int(lo) + rng.randint(0, 15)}"
    # Maybe reversed, maybe huge. Huge only in the last group: before it, Slurm pushes millions
    # of names before it notices the 65536 limit (or, further left, keeps a partial list).
    return f"{lo}-{rng.choice([number(rng), '', *(['70000', '65535'] if huge else [])])}"


def prefix(rng: random.Random) -> str:
    return "".join(rng.choice(PREFIX_CHARS) for _ in range(rng.randint(0, 5)))


def token(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:
        return prefix(rng) + rng.choice(["", number(rng)])
    groups = rng.choice([1, 1, 1, 2, 2, 3])
    parts = [prefix(rng) or "n"]
    for index in range(groups):
        huge = index == groups - 1
        items = ",".join(range_item(rng, huge) for _ in range(rng.randint(1, 3)))
        parts.append(f"[{items}]")
        if index < groups - 1:
            parts.append(prefix(rng))
    return "".join(parts)


def expression(rng: random.Random) -> str:
    text = rng.choice([",", " ", ", ", "\t", ",,"]).join(
        token(rng) for _ in range(rng.randint(1, 3))
    )
    for _ in range(rng.choice([0, 0, 1, 1, 2])):  # break about half of them
        at = rng.randint(0, len(text))
        if rng.random() < 0.4 and text:
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + rng.choice(NOISE) + text[at:]
    return text


def cheap(expression: str) -> bool:
    """Leave out what would make scontrol print more than 20,000 lines (or millions), and what
    we refuse on purpose: its size is unknown to us (22.05 reads ``[118-]`` as ``[118]``, and
    the rest of such an expression may expand to millions, seen timing scontrol out)."""
    try:
        expand(expression, max_hosts=20_000)
    except HostlistError as error:
        if any(words in str(error) for words in DELIBERATE):
            return False
        return not str(error).startswith("hostlist ")  # only our own total limit says so
    return True


def test_expand_agrees_with_scontrol_show_hostnames(scontrol_env: dict[str, str]) -> None:
    rng = random.Random(SEED)
    expressions = [e for e in (expression(rng) for _ in range(CASES)) if cheap(e)]
    fixed = ["", " ", "a[1-3", "[1-3", "a[+1-3]", "a[1z-3]", "a[0-65535]", "a[0-65536]"]
    rejected = 0
    for text in fixed + expressions:
        expected = scontrol(scontrol_env, "hostnames", text)
        rejected += expected is None
        if expected is not None and refused_on_purpose(text):
            continue
        assert ours(text) == expected, f"expand({text!r})"
    # The generator must exercise both outcomes, or the comparison proves little.
    assert 0.2 * len(expressions) < rejected < 0.8 * len(expressions)


def test_compress_agrees_with_scontrol_show_hostlistsorted(scontrol_env: dict[str, str]) -> None:
    rng = random.Random(SEED + 1)
    pool: list[str] = []
    while len(pool) < 3000:
        pool.extend(ours(token(rng)) or [])
    usable = []
    for name in dict.fromkeys(pool):
        try:
            compress([name])
        except HostlistError:
            continue
        # Slurm's sort overflows an int past 2**31 and then drops hosts; compress() does not.
        if int(name[len(name.rstrip("0123456789")) :] or 0) < 2**31:
            usable.append(name)
    for _ in range(150):
        names = rng.sample(usable, rng.randint(1, 40))
        if rng.random() < 0.5:  # a run of neighbours, shuffled, as Slurm hands them out
            base = rng.choice(usable).rstrip("0123456789") or "n"
            names += [f"{base}{n}" for n in rng.sample(range(30), rng.randint(1, 20))]
        names = list(dict.fromkeys(names))
        compressed = compress(names)
        assert [compressed] == scontrol(scontrol_env, "hostlistsorted", ",".join(names)), names
        # And Slurm reads our output back as exactly the names we were given.
        assert sorted(scontrol(scontrol_env, "hostnames", compressed) or []) == sorted(names)
