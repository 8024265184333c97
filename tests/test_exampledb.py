"""The suite's example databases and the profiles over them (kvverify/exampledb.py, profiles.py):
the replay profile, the dev read-through to the nightly artifact, KVVERIFY_DB selection, the
Hypothesis pin, and the workflows wiring them."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from zipfile import ZipFile

import pytest
from hypothesis import Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

from kvverify import exampledb, profiles
from kvverify.errors import ConfigError
from kvverify.exampledb import NIGHTLY_ARTIFACT, ScopedDatabase

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _restore_profiles():
    with profiles.scoped(profiles.current_scope()):  # as they were, for the rest of the session
        yield


def test_replay_profile_is_reuse_only_read_only_and_not_derandomized(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVVERIFY_DB", str(tmp_path / "night"))
    profiles.register_profiles(scope="reference")
    replay = settings.get_profile("replay")
    assert replay.derandomize is False  # derandomize=True would force database=None
    assert tuple(replay.phases) == (Phase.explicit, Phase.reuse)
    db = replay.database
    assert isinstance(db, ReadOnlyDatabase) and f"scope='reference'" in repr(db)
    # read-only: what Hypothesis tries to delete (an example that passes now) stays
    ScopedDatabase(DirectoryBasedExampleDatabase(tmp_path / "night"), "reference").save(b"K", b"v")
    db.delete(b"K", b"v")
    db.save(b"K", b"w")
    assert list(db.fetch(b"K")) == [b"v"]
    nightly = settings.get_profile("nightly").database
    assert isinstance(nightly, ScopedDatabase) and Phase.generate in settings.get_profile("nightly").phases
    assert settings.get_profile("ci").database is None and settings.get_profile("ci").derandomize


def _zip_as_artifact(db_dir: Path, cache: Path) -> None:
    """The merged database zipped the way actions/upload-artifact zips ``nightly-db/``, in the
    cache GitHubArtifactDatabase keeps (a fresh download: no network needed)."""
    cache.mkdir(parents=True)
    stamp = datetime.now(timezone.utc).isoformat().replace(":", "_")
    with ZipFile(cache / f"{stamp}.zip", "w") as zf:
        for p in sorted(db_dir.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(db_dir).as_posix())


def test_dev_profile_reads_through_to_the_nightly_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hyp"))
    night = ScopedDatabase(DirectoryBasedExampleDatabase(tmp_path / "nightly-db"), "reference")
    night.save(b"K", b"found at night")
    _zip_as_artifact(tmp_path / "nightly-db", tmp_path / "hyp" / "github-artifacts" / NIGHTLY_ARTIFACT)

    monkeypatch.setenv("GITHUB_TOKEN", "token")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("KVVERIFY_GITHUB_REPO", "acme/kvverify")
    db = profiles.dev_database("reference")
    assert ("MultiplexedDatabase(DirectoryBasedExampleDatabase(" in repr(db)
            and f"ReadOnlyDatabase(GitHubArtifactDatabase(owner='acme', repo='kvverify', "
                f"artifact_name='{NIGHTLY_ARTIFACT}'))" in repr(db))
    assert list(db.fetch(b"K")) == [b"found at night"]
    db.save(b"K", b"found locally")  # writes land in the local database only
    assert sorted(db.fetch(b"K")) == [b"found at night", b"found locally"]
    assert list(ScopedDatabase(DirectoryBasedExampleDatabase(tmp_path / "hyp" / "examples"), "reference")
                .fetch(b"K")) == [b"found locally"]
    assert list(profiles.dev_database("vllm==0.33.0").fetch(b"K")) == []  # another target's keys

    # no token, or under CI: the local database alone, nothing else touched
    for env in ({"GITHUB_TOKEN": ""}, {"GITHUB_TOKEN": "token", "CI": "true"}):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        db = profiles.dev_database("reference")
        assert "GitHubArtifact" not in repr(db) and "Multiplexed" not in repr(db)


def test_github_repository_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVVERIFY_GITHUB_REPO", "acme/kv")
    assert exampledb.github_repository() == ("acme", "kv")
    monkeypatch.setenv("KVVERIFY_GITHUB_REPO", "not a repo")
    with pytest.raises(ConfigError, match="KVVERIFY_GITHUB_REPO"):
        exampledb.github_repository()
    monkeypatch.delenv("KVVERIFY_GITHUB_REPO")
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/name")
    assert exampledb.github_repository() == ("org", "name")


def test_kvverify_db_selects_the_database(tmp_path: Path) -> None:
    assert isinstance(exampledb.open_database(tmp_path / "d"), DirectoryBasedExampleDatabase)
    (tmp_path / "f").write_text("")
    for bad, why in ((str(tmp_path / "f"), "must be a directory"), ("http://x/y", "URL schemes allowed"),
                     ("  ", "must be a directory or a redis")):
        with pytest.raises(ConfigError, match=re.escape(why)) as e:
            exampledb.open_database(bad)
        assert "KVVERIFY_DB" in str(e.value)
    try:
        import redis  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"pip install -e '\.\[redis\]'"):
            exampledb.open_database("redis://localhost:6379/0")
    else:
        db = exampledb.open_database("redis://localhost:6379/0")  # lazy: no connection yet
        assert type(db).__name__ == "RedisExampleDatabase"


def test_hypothesis_is_pinned_to_one_version_everywhere() -> None:
    """The database format and key derivation are Hypothesis internals: one version in the
    main install and in every vLLM release lock."""
    import hypothesis

    pyproject = (ROOT / "pyproject.toml").read_text()
    pins = re.findall(r'"hypothesis(?:\[[a-z,]+\])?==([0-9.]+)"', pyproject)
    assert pins and set(pins) == {hypothesis.__version__}, pins
    locks = sorted((ROOT / "constraints").glob("vllm-*.txt"))
    assert locks
    for lock in locks:
        found = re.findall(r"^hypothesis==(\S+)$", lock.read_text(), re.M)
        assert found == [hypothesis.__version__], f"{lock.name}: {found}"
        assert re.search(r"^sortedcontainers==\S+$", lock.read_text(), re.M), f"{lock.name}: its dependency"


def test_workflows_wire_the_loop() -> None:
    yaml = pytest.importorskip("yaml")
    nightly = yaml.safe_load((ROOT / ".github/workflows/nightly.yml").read_text())
    merge = nightly["jobs"]["merge"]["steps"]
    uploads = {st["with"]["name"]: st["with"]["path"] for st in merge if "upload-artifact" in st.get("uses", "")}
    assert uploads[NIGHTLY_ARTIFACT].rstrip("/") == "nightly-db", "the artifact the dev profile reads"
    saves = [st for st in merge if "cache/save" in st.get("uses", "")]
    assert saves and saves[0]["with"]["path"] == "nightly-db"
    cache_key = saves[0]["with"]["key"].split("$")[0]
    runs = "\n".join(st.get("run", "") for st in merge)
    assert "python -m kvverify.nightly merge --previous nightly-db --into" in runs and "cp -R -n \"$shard/nightly-db" not in runs
    assert "GITHUB_STEP_SUMMARY" in runs and "reports/index.md" in runs
    fuzz = nightly["jobs"]["fuzz"]
    fuzz_runs = "\n".join(st.get("run", "") for st in fuzz["steps"])
    assert "--owned-keys nightly-owned.json" in fuzz_runs and "--coverage-json coverage.json" in fuzz_runs
    every_run = [st.get("run", "") for job in nightly["jobs"].values() for st in job["steps"]]
    assert not any("--seed" in r for r in every_run), "a seeded test neither saves to nor replays the database"
    assert "export HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1" in fuzz_runs
    shard_paths = next(st for st in fuzz["steps"] if "upload-artifact" in st.get("uses", ""))["with"]["path"]
    assert {"nightly-db/", "nightly-owned.json", "coverage.json"} <= set(shard_paths.split())
    assert "redis://" in (ROOT / ".github/workflows/nightly.yml").read_text()  # how to point shards at Redis

    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    steps = ci["jobs"]["test"]["steps"]
    restore = next(st for st in steps if "cache/restore" in st.get("uses", ""))
    assert restore["with"]["path"] == "nightly-db" and restore["with"]["restore-keys"] == cache_key
    replay = next(st for st in steps if "--hypothesis-profile=replay" in st.get("run", ""))
    assert replay["env"]["KVVERIFY_DB"] == "nightly-db" and "steps.nightly-db" in replay["if"]
    assert [st.get("run") for st in steps].index("bash .ci/run") < steps.index(replay)


def test_a_bad_kvverify_db_fails_only_the_runs_that_use_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVVERIFY_DB", "ftp://nowhere/db")
    profiles.register_profiles(scope="reference")  # never raises: the ci gate needs no database
    assert settings.get_profile("ci").database is None
    profiles.check_database("ci")
    for name in ("nightly", "replay"):
        with pytest.raises(ConfigError, match="KVVERIFY_DB='ftp://nowhere/db' is invalid"):
            profiles.check_database(name)
        with pytest.raises(ConfigError, match="URL schemes allowed"):
            list(settings.get_profile(name).database.fetch(b"K"))
