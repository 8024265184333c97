"""Scale-out on a real database: ``KVVERIFY_DB=redis://…`` (here ``unix://``, a socket of a real
``redis-server`` this test starts) selects Hypothesis' ``RedisExampleDatabase``; one worker
process finds a counterexample, another worker process, sharing nothing with it but the
Redis, replays it: the same failure, the same report.

Needs Debian's ``redis-server`` and the ``redis`` extra (``.ci/run`` installs both); without
them it skips, saying which is missing — it never passes without having run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLAW = "null_block_not_reserved"
PROP = "test_startup_check_passes_implies_servable"
KVVERIFY = [sys.executable, "-c", "import sys; from kvverify.cli import main; sys.exit(main())"]


@pytest.fixture
def redis_url() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("SKIPPED LOUDLY: redis-server is not installed (Debian package redis-server; .ci/run "
                    "installs it): the shared Redis example database was NOT tested")
    try:
        import redis
    except ImportError:
        pytest.skip("SKIPPED LOUDLY: the redis client is not installed (pip install -e '.[redis]'; .ci/run "
                    "installs it): the shared Redis example database was NOT tested")
    home = tempfile.mkdtemp(prefix="kvr-", dir="/tmp")  # a unix socket path must stay short
    sock = os.path.join(home, "redis.sock")
    proc = subprocess.Popen([server, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
                             "--save", "", "--appendonly", "no", "--dir", home, "--loglevel", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        client = redis.Redis(unix_socket_path=sock)
        deadline = time.monotonic() + 20
        while True:
            try:
                if client.ping():
                    break
            except (redis.exceptions.ConnectionError, FileNotFoundError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                pytest.fail(f"redis-server did not start (exit {proc.poll()}): {out[-500:]}")
            time.sleep(0.05)
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


def _worker(profile: str, redis_url: str, reports: Path, seconds: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPOTHESIS_", "KVVERIFY_"))}
    return subprocess.run(
        [*KVVERIFY, "fuzz", "--profile", profile, "--flaw", FLAW, "-k", PROP, "--seconds", seconds, "--no-progress",
         "--json", "--reports-dir", str(reports)],
        cwd=ROOT, env={**env, "KVVERIFY_DB": redis_url}, capture_output=True, text=True, timeout=300)


def _report_of(run: subprocess.CompletedProcess[str]) -> dict:
    assert run.returncode == 1, run.stderr[-2000:]
    prop = next(p for p in json.loads(run.stdout)["properties"] if p["name"] == PROP)
    assert prop["status"] == "FAILED" and len(prop["reports"]) == 1, prop
    return json.loads(Path(prop["reports"][0]).read_text())


def test_an_example_found_by_one_worker_is_replayed_by_another(redis_url: str, tmp_path: Path) -> None:
    import redis

    # worker 1: a nightly fuzzer (any machine) finds the planted flaw's counterexample
    found = _report_of(_worker("nightly", redis_url, tmp_path / "w1", "30"))
    stored = redis.Redis.from_url(redis_url).keys(b"hypothesis-example:*")
    assert stored, "nothing was saved in Redis"

    # worker 2: another process, nothing shared but the Redis; the replay profile draws
    # nothing new (explicit + reuse only), so the failure can only come from worker 1's example
    replayed = _report_of(_worker("replay", redis_url, tmp_path / "w2", "30"))
    assert replayed["id"] == found["id"] and replayed["example"] == found["example"]
    assert replayed["violation"]["name"] == found["violation"]["name"] == "startup.too_loose"
