"""`qmoe bench --peer` as a user meets it (issue 12): a peer that is not installed is skipped with a
message saying how to get it (make bench-venv) and the run still succeeds; a peer's time goes
into the JSON line (peer_median_ms, peer_int8_gops, speedup_vs_peer) the same way for every peer.
A stub plugin (peer_stub.c) stands in for oneDNN, so nothing here needs oneDNN or oneMKL and no
speed is asserted. Run by ctest (cli_bench_peer) with QMOE_CLI, QMOE_PEER_STUB and
QMOE_PEER_STUB_FOREIGN set.
"""
import json
import os
import shutil
import subprocess

QMOE = os.environ.get("QMOE_CLI", "qmoe")
STUB = os.environ.get("QMOE_PEER_STUB", "")
FOREIGN = os.environ.get("QMOE_PEER_STUB_FOREIGN", "")
STUB_MS = 1234.5  # what the stub reports


def bench(*args, env=None, program=QMOE):
    e = {k: v for k, v in os.environ.items() if k not in ("QMOE_ONEDNN_PEER", "QMOE_MKL_LIB")}
    e.update(env or {})
    r = subprocess.run([program, "bench", *args, "--threads", "1", "--repeat", "2",
                        "--dram-mb", "16"], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 1, r.stdout
    return lines[0], r.stderr


def stub_run(tmp_path, *shape, program=QMOE, plugin=STUB):
    out = tmp_path / "stub.txt"
    env = {"QMOE_PEER_STUB_OUT": str(out)}
    if plugin:
        env["QMOE_ONEDNN_PEER"] = plugin
    line, err = bench("--shape", *shape, "--peer", "onednn", env=env, program=program)
    return line, err, out.read_text().split() if out.exists() else None


def assert_skipped(line, err, peer):
    assert "peer" not in line and "speedup_vs_peer" not in line
    assert f"--peer {peer}" in err and "make bench-venv" in err and "peer skipped" in err


def test_missing_onednn_peer_says_how_to_get_it(tmp_path):
    line, err = bench("--shape", "2,16,64,128", "--peer", "onednn",
                      env={"QMOE_ONEDNN_PEER": str(tmp_path / "absent.so")})
    assert_skipped(line, err, "onednn")
    assert "absent.so" in err
    assert line["median_ms"] > 0


def test_missing_onednn_peer_without_a_bench_venv(tmp_path):
    """The program where no bench venv is beside it: the default lookup finds nothing."""
    (tmp_path / "bin").mkdir()
    program = shutil.copy(QMOE, tmp_path / "bin" / "qmoe")
    line, err = bench("--shape", "2,16,64,128", "--peer", "onednn", program=program)
    assert_skipped(line, err, "onednn")


def test_missing_mkl_says_how_to_get_it(tmp_path):
    line, err = bench("--shape", "2,16,64,128", "--peer", "mkl",
                      env={"QMOE_MKL_LIB": str(tmp_path / "absent.so")})
    assert_skipped(line, err, "mkl")


def test_foreign_plugin_is_refused(tmp_path):
    line, err, got = stub_run(tmp_path, "2,16,64,128", plugin=FOREIGN)
    assert "not a oneDNN peer" in err and "make bench-venv" in err
    assert "peer" not in line and got is None  # never called


def test_peer_time_goes_into_the_line(tmp_path):
    line, err, got = stub_run(tmp_path, "4,32,64,128", "--even")
    # E K N threads repeat, then rows per expert exactly as the case's
    assert got == ["4", "64", "128", "1", "2", "8", "8", "8", "8"], err
    assert line["peer"] == "onednn" and line["peer_median_ms"] == STUB_MS
    assert line["peer_int8_gops"] == round(2 * 32 * 64 * 128 / (STUB_MS * 1e-3) * 1e-9, 1)
    m = line["median_ms"]  # printed to 3 decimals: bound the ratio the bench computed unrounded
    assert line["speedup_vs_peer"] >= STUB_MS / (m + 0.0005) - 0.005
    if m > 0.0005:
        assert line["speedup_vs_peer"] <= STUB_MS / (m - 0.0005) + 0.005


def test_peer_gets_the_uneven_rows_of_the_case(tmp_path):
    line, err, got = stub_run(tmp_path, "4,30,64,128")
    rows = [int(x) for x in got[5:]]
    assert got[:5] == ["4", "64", "128", "1", "2"] and len(rows) == 4, err
    assert sum(rows) == 30 and min(rows) >= 0 and "peer" in line


def test_plugin_found_in_the_bench_venv_beside_the_program(tmp_path):
    """<build>/tools/qmoe finds <build>/bench-venv/lib/libqmoe_peer_onednn.so (make bench-venv)."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "bench-venv" / "lib").mkdir(parents=True)
    program = shutil.copy(QMOE, tmp_path / "tools" / "qmoe")
    shutil.copy(STUB, tmp_path / "bench-venv" / "lib" / "libqmoe_peer_onednn.so")
    line, err, got = stub_run(tmp_path, "2,16,64,128", "--even", program=program, plugin=None)
    assert got is not None and got[5:] == ["8", "8"], err
    assert line["peer_median_ms"] == STUB_MS
