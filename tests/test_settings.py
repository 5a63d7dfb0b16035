"""Every ``MEMOLAB_*`` setting: a bad value never crashes, never costs a result (docs/settings.md).

The lines a bad value prints are built here from docs/settings.md's table, so the
docs say exactly what these tests pin. Everything runs in fresh interpreters, as a
user's script or a CLI command would, with the variables in their environment."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import memolab
from memolab.settings import config

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "settings.md"

HUGE = "1" + "0" * 30  # a whole number too, so the integer settings see a huge value, not a non-number
KINDS = ["abc", "-1", "0", HUGE]

#: the value in effect for each kind of value (None: the variable's default); docs/settings.md
DEFAULT = {
    "MEMOLAB_LEASE_TTL": 10.0, "MEMOLAB_HEARTBEAT": 1.0, "MEMOLAB_LEASE_FREE_BELOW": 0.001,
    "MEMOLAB_REMOTE_TIMEOUT": 10.0, "MEMOLAB_VERSION_SENSITIVITY": "minor", "MEMOLAB_STORE_SHARING": "user",
    "MEMOLAB_REMOTE_DRAIN": 10.0, "MEMOLAB_REMOTE_CONCURRENCY": 16, "MEMOLAB_REMOTE_RANGED_GETS": None,
    "MEMOLAB_INLINE_MAX": 32768, "MEMOLAB_HASH_THREADS": None,
    "MEMOLAB_DIST_TIMEOUT": None, "MEMOLAB_VERBOSE": None, "MEMOLAB_PROGRESS": None, "MEMOLAB_PROGRESS_DELAY": 2.0,
    "MEMOLAB_SYSTEM_METRICS": 10.0,
}
#: the few (variable, value) among KINDS that are good values, and what they mean
GOOD = {("MEMOLAB_LEASE_FREE_BELOW", "0"): 0.0, ("MEMOLAB_REMOTE_DRAIN", "0"): 0.0,
        ("MEMOLAB_REMOTE_RANGED_GETS", "0"): False, ("MEMOLAB_INLINE_MAX", "0"): 0,
        ("MEMOLAB_VERBOSE", "0"): 0, ("MEMOLAB_PROGRESS", "0"): False,
        ("MEMOLAB_PROGRESS_DELAY", "0"): 0.0,
        ("MEMOLAB_SYSTEM_METRICS", "0"): 0.0}
FLOATS = [v for v, d in DEFAULT.items() if isinstance(d, float)]
#: the settings ``configure()`` takes, by variable
SETTING = {"MEMOLAB_LEASE_TTL": "lease_ttl", "MEMOLAB_HEARTBEAT": "heartbeat",
           "MEMOLAB_LEASE_FREE_BELOW": "lease_free_below", "MEMOLAB_REMOTE_TIMEOUT": "remote_timeout",
           "MEMOLAB_VERSION_SENSITIVITY": "version_sensitivity", "MEMOLAB_STORE_SHARING": "store_sharing",
           "MEMOLAB_VERBOSE": "verbose"}
#: settings whose default is None: ``configure(name=None)`` goes back to it
NONE_OK = {"verbose"}


def doc_rows() -> dict:
    """docs/settings.md's table: variable -> (meaning, accepted, default, read)."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| `(MEMOLAB_[A-Z0-9_]+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = tuple(c.strip() for c in m.group(2).split("|"))
    return rows


def expected_line(var: str, raw: str, default_text: str = "") -> re.Pattern:
    """The one line a bad ``var=raw`` prints, as the docs give its accepted values and default."""
    _, accepted, default, _ = doc_rows()[var]
    default = default_text or default.split(" (a tenth")[0]  # the heartbeat's default: its own test
    return re.compile(rf"memolab: {var}={re.escape(repr(raw))} is (not [a-z ,]+|out of range); "
                      rf"accepted: {re.escape(accepted)}; using the default {re.escape(default)}")


#: what memolab says as calls run (``memolab.calls.report``, on by default): not a warning about a setting
REPORT = re.compile(r"memolab: \S+(\(.*\) (miss|recomputed|loaded) | stored )")


def warning_lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.strip() and not REPORT.match(line)]


REPARSE = r"""
import io, json, os, sys
from memolab.settings import config

cases = json.loads(sys.argv[1])
out = []
for var, raw in cases:
    os.environ[var] = raw
    err, sys.stderr = sys.stderr, io.StringIO()
    try:
        # a setting of ``configure()`` as the process start reads it; the others as their users read them
        field = {v.name: v.setting for v in config.ENV.values()}[var]
        value = getattr(config.read_env(), field) if field else config.env_setting(var)
    finally:
        text, sys.stderr = sys.stderr.getvalue(), err
    del os.environ[var]
    out.append([var, raw, value, text])
print(json.dumps(out))
"""


def test_every_variable_with_a_bad_value_falls_back_to_its_default(project):
    """Each variable with a non-number, a negative, zero and a huge value (and NaN and
    infinity for the seconds): the default unless the value is good, and then exactly one
    line, naming the variable, the value, what is accepted and the default used."""
    cases = [[var, raw] for var in DEFAULT for raw in KINDS]
    cases += [[var, raw] for var in FLOATS for raw in ("nan", "inf", "-inf")]
    cases += [["MEMOLAB_VERSION_SENSITIVITY", " Exact "], ["MEMOLAB_REMOTE_RANGED_GETS", "OFF"],
              ["MEMOLAB_CODE_CACHE", "off"], ["MEMOLAB_CODE_CACHE", "0"], ["MEMOLAB_CODE_CACHE", "cc"]]
    project.write("reparse.py", REPARSE)
    got = project.run_json("reparse.py", json.dumps(cases))
    assert len(got) == len(cases)
    extra = {("MEMOLAB_VERSION_SENSITIVITY", " Exact "): "exact", ("MEMOLAB_REMOTE_RANGED_GETS", "OFF"): False,
             ("MEMOLAB_CODE_CACHE", "off"): "", ("MEMOLAB_CODE_CACHE", "0"): "",
             ("MEMOLAB_CODE_CACHE", "cc"): str(project.root.resolve() / "cc")}
    good = {**GOOD, **extra}
    for var, raw, value, text in got:
        lines = warning_lines(text)
        if (var, raw) in good:
            assert (value, lines) == (good[(var, raw)], []), (var, raw)
            continue
        assert value == DEFAULT[var], (var, raw, value)
        assert len(lines) == 1 and expected_line(var, raw).fullmatch(lines[0]), (var, raw, lines)


def test_bad_values_never_crash_import_a_call_or_the_cli(project, tmp_path):
    """All variables bad at once, four times (every kind of bad value), with a team store
    configured (so the team's settings are used): ``import memolab`` works, a memoized call
    computes and stores its result (the next process hits it), ``memolab ls`` exits 0 and
    lists it, and the only output on stderr is one line per bad variable, naming it.
    On the old code ``MEMOLAB_LEASE_TTL=abc`` (and the others) crashed the import and every
    CLI command, and ``MEMOLAB_REMOTE_DRAIN=abc`` every call with a team store."""
    team = tmp_path / "team"
    (team / "blobs").mkdir(parents=True)
    project.write("job.py", """
        import json, os, sys
        import memolab
        from memolab.settings import config

        @memolab.memo
        def double(x):
            with open("ran.txt", "a") as f:
                f.write("ran\\n")
            return 2 * x

        out = {"value": double(int(sys.argv[1]))}
        import memolab.store, memolab.team.blobs, memolab.team.journal, memolab.team.pg
        s = config.settings()
        out["in effect"] = {
            "MEMOLAB_LEASE_TTL": s.lease_ttl, "MEMOLAB_HEARTBEAT": s.heartbeat,
            "MEMOLAB_LEASE_FREE_BELOW": s.lease_free_below, "MEMOLAB_REMOTE_TIMEOUT": s.remote_timeout,
            "MEMOLAB_VERSION_SENSITIVITY": s.version_sensitivity, "MEMOLAB_STORE_SHARING": s.store_sharing,
            "MEMOLAB_REMOTE_DRAIN": memolab.team.journal.DRAIN_SECONDS,
            "MEMOLAB_REMOTE_CONCURRENCY": memolab.team.blobs.remote_concurrency(),
            "MEMOLAB_REMOTE_RANGED_GETS": memolab.team.blobs.remote_ranged_gets(),
            "MEMOLAB_INLINE_MAX": memolab.store.local.INLINE_MAX,
            "MEMOLAB_HASH_THREADS": config.env_setting("MEMOLAB_HASH_THREADS"),
            "MEMOLAB_DIST_TIMEOUT": config.env_setting("MEMOLAB_DIST_TIMEOUT"),
            "MEMOLAB_VERBOSE": s.verbose,
            "MEMOLAB_PROGRESS": config.env_setting("MEMOLAB_PROGRESS"),
            "MEMOLAB_PROGRESS_DELAY": config.env_setting("MEMOLAB_PROGRESS_DELAY"),
            "MEMOLAB_SYSTEM_METRICS": config.env_setting("MEMOLAB_SYSTEM_METRICS"),
        }
        out["timeouts"] = [memolab.team.pg.remote_timeout(), memolab.team.blobs.remote_timeout()]
        print(json.dumps(out))
    """)
    base = {"MEMOLAB_REMOTE": f"sqlite://{team}/index.sqlite", "MEMOLAB_REMOTE_BLOBS": f"file://{team}/blobs",
            "MEMOLAB_HMAC_KEY": "settings-test-key"}
    for n, raw in enumerate(KINDS):
        env = {**base, **{var: raw for var in DEFAULT}}
        bad = [var for var in DEFAULT if (var, raw) not in GOOD]
        want = {var: GOOD.get((var, raw), DEFAULT[var]) for var in DEFAULT}
        for run in ("computes", "hits"):
            cp = project.run("job.py", str(n), env=env)
            out = json.loads(cp.stdout.strip().splitlines()[-1])
            assert out["value"] == 2 * n and out["in effect"] == want, (raw, run)
            assert out["timeouts"] == [10.0, 10.0]
            assert (project.root / "ran.txt").read_text().count("ran") == n + 1, (raw, run)
            lines = warning_lines(cp.stderr)
            assert len(lines) == len(bad), (raw, run, cp.stderr)
            for var in bad:
                assert [line for line in lines if expected_line(var, raw).fullmatch(line)], (raw, var, cp.stderr)
        cp = project.run("-m", "memolab", "ls", env=env)
        assert cp.returncode == 0 and "double" in cp.stdout, (raw, cp.stderr)
        lines = warning_lines(cp.stderr)
        # the CLI reads the settings of the process start; the team's own are read when a team store is used
        at_start = [var for var in bad if var in SETTING or var == "MEMOLAB_INLINE_MAX"]
        assert len(lines) == len(set(lines)) and len(lines) >= len(at_start), (raw, cp.stderr)
        for var in at_start:
            assert [line for line in lines if expected_line(var, raw).fullmatch(line)], (raw, var, cp.stderr)
        assert all(re.match(r"memolab: MEMOLAB_[A-Z_]+='", line) for line in lines), (raw, cp.stderr)


HEARTBEAT = """
import json
import memolab
from memolab.settings import config
print(json.dumps(config.settings().heartbeat))
"""


@pytest.mark.parametrize("ttl, beat, want, warned", [
    ("2", "5", 0.2, True),       # not below the TTL: the default, a tenth of the TTL
    ("2", "2", 0.2, True),
    ("0.5", None, 0.05, False),  # the default follows a short TTL
    ("20", None, 1.0, False),    # at most 1 s
    ("2", "0.3", 0.3, False),
    ("0.5", "abc", 0.05, True),  # a bad heartbeat: the default for this TTL
])
def test_heartbeat_is_kept_below_the_lease_ttl(project, ttl, beat, want, warned):
    """A heartbeat not below the lease's TTL lets a live owner's lease go stale, and another
    process computes the same key again: from the environment, it is refused."""
    project.write("beat.py", HEARTBEAT)
    env = {"MEMOLAB_LEASE_TTL": ttl, **({"MEMOLAB_HEARTBEAT": beat} if beat is not None else {})}
    cp = project.run("beat.py", env=env)
    assert json.loads(cp.stdout.strip().splitlines()[-1]) == want
    lines = warning_lines(cp.stderr)
    assert len(lines) == (1 if warned else 0), cp.stderr
    if warned and beat == "abc":
        assert expected_line("MEMOLAB_HEARTBEAT", beat, default_text="0.05").fullmatch(lines[0])
    elif warned:
        assert lines[0] == (f"memolab: MEMOLAB_HEARTBEAT={beat!r} is not below the lease time-to-live ({ttl} s, "
                            "MEMOLAB_LEASE_TTL): a live lease would go stale between two heartbeats; accepted: "
                            f"{doc_rows()['MEMOLAB_HEARTBEAT'][1]}, below MEMOLAB_LEASE_TTL; using the default 0.2")


@pytest.mark.parametrize("name", sorted(SETTING.values()))
def test_configure_refuses_bad_values_naming_the_setting(name):
    """``configure()`` is a call in the program: a bad value raises ``ValueError`` naming
    the setting and what is accepted, and changes nothing (not a late ``TypeError`` in a
    memoized call, after its body ran)."""
    var = {v: k for k, v in SETTING.items()}[name]
    accepted = doc_rows()[var][1]
    before, gen = config.settings(), config.generation()
    numeric = isinstance(getattr(before, name), float)
    values = ["abc", -1, 0, 1e300, 10 ** 400, math.nan, math.inf, True, None, "10"] if numeric else \
        ["abc", "-1", "0", HUGE, None, 3]
    for value in values:
        if (var, str(value)) in GOOD or (value is None and name in NONE_OK):
            continue
        with pytest.raises(ValueError) as e:
            memolab.configure(**{name: value})
        assert str(e.value).startswith(f"configure({name}={value!r}): ") and f"accepted: {accepted}" in str(e.value)
        assert (config.settings(), config.generation()) == (before, gen)


def test_docs_list_every_variable_with_its_rule():
    """docs/settings.md has a row for every ``MEMOLAB_*`` name in memolab's source, and its
    accepted values and default are those the code reports."""
    in_source = set()
    for p in (ROOT / "src" / "memolab").rglob("*.py"):
        in_source |= set(re.findall(r"MEMOLAB_[A-Z0-9_]*[A-Z0-9]", p.read_text()))
    rows = doc_rows()
    assert set(rows) == in_source
    assert set(config.ENV) == set(DEFAULT) | {"MEMOLAB_CODE_CACHE"}
    for var in config.ENV.values():
        _, accepted, default, _ = rows[var.name]
        assert accepted == var.rule.accepted() and default.startswith(var.describe_default()), var.name


def test_bad_team_settings_never_cost_a_call(project, tmp_path):
    """The team's own settings are read when a team store is first used, inside a memoized
    call: a bad one there used to raise before the body ran, in every call
    (``MEMOLAB_REMOTE_DRAIN=abc``). The call computes, its result is stored and uploaded.
    (``MEMOLAB_REMOTE_CONCURRENCY`` and ``_RANGED_GETS`` are read by S3 blob stores only:
    the reparse test above covers them.)"""
    team = tmp_path / "team"
    (team / "blobs").mkdir(parents=True)
    project.write("team_job.py", """
        import json
        import memolab

        @memolab.memo
        def triple(x):
            return 3 * x

        print(json.dumps(triple(5)))
    """)
    env = {"MEMOLAB_REMOTE": f"sqlite://{team}/index.sqlite", "MEMOLAB_REMOTE_BLOBS": f"file://{team}/blobs",
           "MEMOLAB_HMAC_KEY": "settings-test-key", "MEMOLAB_REMOTE_DRAIN": "abc"}
    cp = project.run("team_job.py", env=env)
    assert json.loads(cp.stdout.strip().splitlines()[-1]) == 15
    lines = warning_lines(cp.stderr)
    assert len(lines) == 1 and expected_line("MEMOLAB_REMOTE_DRAIN", "abc").fullmatch(lines[0]), cp.stderr
    import sqlite3

    with sqlite3.connect(team / "index.sqlite") as c:  # uploaded at exit, within the default drain
        assert [fn for fn, in c.execute("SELECT fn FROM evaluations")] == ["__main__:triple"]


def test_distributed_configure_checks_the_variables_rule():
    """issue 56: ``memolab.distributed.configure(timeout=)`` is the same setting as
    ``MEMOLAB_DIST_TIMEOUT`` and takes exactly what that variable takes (docs/settings.md)."""
    import memolab.distributed as d

    before = d.settings()
    try:
        for bad in (0, 0.5, -3, 86401, float("nan"), True, "10"):
            with pytest.raises(ValueError, match=r"configure\(timeout=.*accepted: a number of seconds from 1 to 86400"):
                d.configure(timeout=bad)
            assert d.settings() == before  # nothing changed
        assert d.configure(timeout=2) == {"timeout": 2.0}
    finally:
        d._SETTINGS.update(before)
