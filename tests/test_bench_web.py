"""The benchmark pages of the leaderboard: /bench lists the runs, /bench/compare?labels=a,b shows them side
by side per task with what changed, and the same as JSON under /api/bench (synthetic runs written through the
store's bench API)."""
from __future__ import annotations

import warnings

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install -e '.[web]')")
pytest.importorskip("jinja2", reason="the web extra is not installed (pip install -e '.[web]')")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient  # noqa: E402

from kernelgym_gap.store.db import Store  # noqa: E402
from kernelgym_gap.web.app import create_app  # noqa: E402
from test_bench import ADD, SYNTHETIC, _rec, write_synthetic  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def client(tmp_path):
    store = Store(tmp_path / "r.sqlite3")
    write_synthetic(store, "ckpt-a")
    better = dict(SYNTHETIC)
    better[ADD] = [[_rec(ADD, E=1.1, U=0.5, verdict="efficient", reward=0.8)]] * 4
    write_synthetic(store, "ckpt-b", better)
    with TestClient(create_app(store, "tok", backend="cpu")) as c:
        yield c


def test_bench_page_lists_runs(client):
    page = client.get("/bench")
    assert page.status_code == 200
    assert 'data-label="ckpt-a"' in page.text and 'data-label="ckpt-b"' in page.text
    runs = client.get("/api/bench").json()["runs"]
    assert {r["label"] for r in runs} == {"ckpt-a", "ckpt-b"}
    a = next(r for r in runs if r["label"] == "ckpt-a")
    assert a["correctness_rate"] == pytest.approx(.5) and a["fast_1"] == pytest.approx(.25)


def test_compare_page_shows_both_runs_per_task_and_the_changes(client):
    page = client.get("/bench/compare?labels=ckpt-a,ckpt-b")
    assert page.status_code == 200
    assert page.text.count("ckpt-a") >= 2 and "ckpt-b" in page.text
    assert 'data-task="AddReLU-v0"' in page.text and "correct 25%-&gt;100%" in page.text
    same = client.get("/bench/compare?labels=ckpt-a&labels=ckpt-b")       # repeated parameters work too
    assert same.status_code == 200
    data = client.get("/api/bench/compare?labels=ckpt-a,ckpt-b").json()
    assert data["labels"] == ["ckpt-a", "ckpt-b"]
    add = next(t for t in data["tasks"] if t["task"] == ADD)
    assert add["runs"]["ckpt-b"]["correctness_rate"] == 1.0 and "correct 25%->100%" in add["changes"]["ckpt-b"]
    assert client.get("/bench/compare?labels=ckpt-a").status_code == 200        # one run alone
    assert client.get("/bench/compare?labels=nope,ckpt-a").status_code == 404
    assert client.get("/api/bench/compare?labels=a%20b").status_code == 400
    assert client.get("/api/bench/compare").status_code == 400
