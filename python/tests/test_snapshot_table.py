"""scripts/snapshot_table.py --pytorch-figures: PyTorch's figures saved once and reused, refused
when stale (cachalot/_peerfigures.py). No PyTorch is needed: the store is tested on its own, and
the script end to end with a fake cachalot-pytorch-replay (a Python script printing the peer's
JSON) beside the real cachalot-replay (skipped when it is not built)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import snapshot_maker
from cachalot import _peerfigures as pf
from cachalot.convert import convert, load_snapshot

MiB = 1 << 20
GiB = 1 << 30
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "snapshot_table.py")
COST = "cost_model:on,cost_segment_alloc:50us+1ms/GiB"


def row(version="2.6.0", cost=COST, smallest=3 * GiB):
    return {"allocator": "PyTorch", "smallest_bytes": smallest, "device_calls": 9,
            "doc": {"pytorch_version": version, "cost_model": cost}}


# --- the store ------------------------------------------------------------------------------


def test_figures_round_trip_through_a_file(tmp_path):
    f = pf.PeerFigures(80 * GiB, 2 * MiB, "2026-12-02 04:00 UTC", {"cachalot_commit": "abc"})
    f.add("a.pickle", "11" * 32, {"PyTorch": row(), "PyTorch expandable": row(smallest=GiB)})
    f.save(str(tmp_path / "f.json"))
    g = pf.PeerFigures.load(str(tmp_path / "f.json"))
    assert g.version == "2.6.0" and g.doc["measured"] == "2026-12-02 04:00 UTC"
    rows = g.rows_for("a.pickle", "11" * 32, 80 * GiB, 2 * MiB, COST)
    assert rows == {"PyTorch": row(), "PyTorch expandable": row(smallest=GiB)}


@pytest.mark.parametrize("snapshot,digest,capacity,granule,cost,says", [
    ("b.pickle", "11" * 32, 80 * GiB, 2 * MiB, COST, "no figures for b.pickle"),
    ("a.pickle", "22" * 32, 80 * GiB, 2 * MiB, COST, "a.pickle's trace has changed"),
    ("a.pickle", "11" * 32, 40 * GiB, 2 * MiB, COST, "at a capacity of 85899345920 B"),
    ("a.pickle", "11" * 32, 80 * GiB, 1 * MiB, COST, "with a 2097152 B granule"),
    ("a.pickle", "11" * 32, 80 * GiB, 2 * MiB, COST + ",x", "another cost model"),
])
def test_stale_figures_are_refused(tmp_path, snapshot, digest, capacity, granule, cost, says):
    f = pf.PeerFigures(80 * GiB, 2 * MiB)
    f.add("a.pickle", "11" * 32, {"PyTorch": row()})
    f.save(str(tmp_path / "f.json"))
    with pytest.raises(pf.StaleFigures, match="f.json: .*--pytorch-replay") as e:
        pf.PeerFigures.load(str(tmp_path / "f.json")).rows_for(snapshot, digest, capacity,
                                                               granule, cost)
    assert says in str(e.value)


def test_one_version_and_one_cost_model_per_file():
    f = pf.PeerFigures(80 * GiB, 2 * MiB)
    f.add("a.pickle", "11" * 32, {"PyTorch": row()})
    with pytest.raises(pf.FiguresError, match="pytorch_version '2.7.0', where the file's other"):
        f.add("b.pickle", "22" * 32, {"PyTorch": row(version="2.7.0")})
    with pytest.raises(pf.FiguresError, match="cost_model"):
        f.add("b.pickle", "22" * 32, {"PyTorch": row(cost="cost_model:off")})
    with pytest.raises(pf.FiguresError, match="has no cost_model"):
        f.add("b.pickle", "22" * 32, {"PyTorch": row(cost=None)})
    assert list(f.doc["snapshots"]) == ["a.pickle"]


@pytest.mark.parametrize("text,says", [
    ("not json", "cannot read"), ("[]", "not a PyTorch figures file"),
    (json.dumps({"format": "other/1"}), "format 'other/1'"),
    (json.dumps({"format": pf.FORMAT, "pytorch_version": "2.6.0", "capacity_bytes": "80GiB"}),
     "capacity_bytes is missing or not a int"),
])
def test_a_bad_file_is_refused(tmp_path, text, says):
    (tmp_path / "f.json").write_text(text)
    with pytest.raises(pf.FiguresError, match=says):
        pf.PeerFigures.load(str(tmp_path / "f.json"))


def test_the_hash_is_of_the_trace_bytes(tmp_path):
    (tmp_path / "t.csv").write_bytes(b"abc")
    assert pf.trace_sha256(str(tmp_path / "t.csv")) == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")


# --- the script, with a fake PyTorch peer ---------------------------------------------------

FAKE_PEER = r'''
import csv, json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_PEER_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
capacity = int(args[args.index("--capacity") + 1].rstrip("B"))
expandable = "--expandable" in args
live, peak = {}, 0
with open(args[-1]) as f:
    for r in csv.DictReader(line for line in f if not line.startswith("#")):
        if r["Action"] == "allocate":
            live[r["Pointer"]] = int(r["Size"])
        else:
            live.pop(r["Pointer"], None)
        peak = max(peak, sum(live.values()))
need = -(-peak // (2 << 20)) * (2 << 20) + ((2 if expandable else 20) << 20)
done = capacity >= need
print(json.dumps({
    "allocator": "pytorch", "pytorch_version": "9.9.9-fake", "capacity_bytes": capacity,
    "cost_model": os.environ["FAKE_PEER_COST_MODEL"], "complete": done, "ooms": 0 if done else 1,
    "peak_reserved_bytes": need if done else capacity, "end_requested_bytes": 0,
    "end_allocated_bytes": 0, "segment_sizes": [], "syncs": 0, "device_ms": 1.5,
    "device": {"timing": "modeled"},
    "calls": {"cudaMalloc": 0 if expandable else 3, "cudaFree": 0,
              "cuMemMap": 7 if expandable else 0, "cuMemUnmap": 0}}))
'''


@pytest.fixture
def table_env(tmp_path, replay_tool):
    """Two hand-made snapshots, a fake peer, and the cost model cachalot-replay prices with."""
    d = tmp_path
    snaps = d / "snaps"
    snaps.mkdir()
    snapshot_maker.write(str(snaps / "a.pickle"), snapshot_maker.fragmenting_snapshot(6))
    snapshot_maker.write(str(snaps / "b.pickle"), snapshot_maker.fragmenting_snapshot(4))
    peer = d / "fake-peer"
    peer.write_text("#!%s\n%s" % (sys.executable, textwrap.dedent(FAKE_PEER)))
    peer.chmod(0o755)
    trace = d / "probe.csv"
    trace.write_text("Thread,Time,Action,Pointer,Size,Stream\n"
                     "1,00:00:00.000001,allocate,0x1,512,0x0\n")
    doc = json.loads(subprocess.run([replay_tool, "--json", "--repeat", "1", "--no-baseline",
                                     "--", str(trace)], capture_output=True, text=True,
                                    check=True, timeout=120).stdout)
    env = dict(os.environ, FAKE_PEER_LOG=str(d / "peer.log"),
               FAKE_PEER_COST_MODEL=doc["cost_model"])
    env.pop("CACHALOT_PYTORCH_REPLAY", None)
    env.pop("CACHALOT_BUILD_DIR", None)  # the fake is the only peer the script may find
    return {"dir": d, "snaps": snaps, "peer": str(peer), "env": env, "replay": replay_tool}


def table(t, *extra, snaps=None, capacity="8GiB"):
    return subprocess.run([sys.executable, SCRIPT, "--snapshots", str(snaps or t["snaps"]),
                           "--replay", t["replay"], "--capacity", capacity, *extra],
                          capture_output=True, text=True, env=t["env"], timeout=600)


def peer_calls(t):
    log = t["dir"] / "peer.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_the_table_reuses_saved_pytorch_figures_and_refuses_stale_ones(table_env):
    t = table_env
    figures = str(t["dir"] / "pytorch.json")
    first = table(t, "--pytorch-replay", t["peer"], "--pytorch-figures", figures,
                  "--json", str(t["dir"] / "1.json"))
    assert first.returncode == 0, first.stderr
    calls = peer_calls(t)
    assert calls > 4  # two settings, each at the GPU's size and probed
    saved = json.load(open(figures))
    assert saved["pytorch_version"] == "9.9.9-fake" and saved["capacity_bytes"] == 8 * GiB
    assert saved["cost_model"] == t["env"]["FAKE_PEER_COST_MODEL"]
    for name in ("a.pickle", "b.pickle"):
        conv = convert(load_snapshot(str(t["snaps"] / name)))
        own = t["dir"] / ("own_" + name + ".csv")
        own.write_text("\n".join(conv.lines) + "\n")
        entry = saved["snapshots"][name]
        assert entry["trace_sha256"] == pf.trace_sha256(str(own))
        assert set(entry["rows"]) == {"PyTorch", "PyTorch expandable"}

    again = table(t, "--pytorch-figures", figures, "--json", str(t["dir"] / "2.json"))
    assert again.returncode == 0, again.stderr
    assert peer_calls(t) == calls  # PyTorch's allocator did not run
    assert json.load(open(t["dir"] / "1.json")) == json.load(open(t["dir"] / "2.json"))
    head1, body1 = first.stdout.split("\n", 1)
    head2, body2 = again.stdout.split("\n", 1)
    assert body1 == body2 and "PyTorch 9.9.9-fake" in head1
    assert "PyTorch 9.9.9-fake" in head2 and "figures read from pytorch.json, measured " in head2
    assert "| a | " in body2 and "not built" not in body2

    # stale: a changed snapshot, one the file has never seen, another GPU size, no file
    changed = t["dir"] / "changed"
    changed.mkdir()
    snapshot_maker.write(str(changed / "a.pickle"), snapshot_maker.fragmenting_snapshot(6))
    snapshot_maker.write(str(changed / "b.pickle"), snapshot_maker.fragmenting_snapshot(5))
    refused(table(t, "--pytorch-figures", figures, snaps=changed),
            "b.pickle's trace has changed since its figures were measured")
    snapshot_maker.write(str(changed / "b.pickle"), snapshot_maker.fragmenting_snapshot(4))
    snapshot_maker.write(str(changed / "c.pickle"), snapshot_maker.fragmenting_snapshot(3))
    refused(table(t, "--pytorch-figures", figures, snaps=changed), "no figures for c.pickle")
    refused(table(t, "--pytorch-figures", figures, capacity="16GiB"),
            "measured at a capacity of 8589934592 B")
    refused(table(t, "--pytorch-figures", str(t["dir"] / "missing.json")),
            "cannot read PyTorch's figures")
    assert peer_calls(t) == calls


def refused(p, says):
    assert p.returncode == 2, (says, p.stdout, p.stderr)
    assert "snapshot_table.py: error: " in p.stderr and says in p.stderr, p.stderr
    assert p.stdout == ""
