"""The `qmoe` program never loses a user's data (issue 16), as a user meets it.

Every case runs on a fresh temporary folder with a tiny generated case: outputs that name an
input (directly, through a link, a hard link or another spelling), the same output twice, a
failed run over existing outputs, a trace on a failing run, outputs that are a symlink, a named
pipe, /dev/null and a private character device (root only), the limits the messages state, and
the peak memory of a run refused by phase one. Run by ctest (cli_outputs) with QMOE_CLI set to
the program.
"""
import hashlib
import json
import os
import stat
import subprocess
import threading

import numpy as np
import pytest

QMOE = os.environ.get("QMOE_CLI", "qmoe")
INPUTS = ["x", "weight", "weight_scale", "x_scale", "group_list"]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def case(tmp_path):
    """A tiny A8W8 case from `qmoe gen`, and a reference run's output bytes."""
    d = tmp_path / "c"
    r = subprocess.run([QMOE, "gen", "--out", str(d), "--E", "2", "--M", "16", "--K", "64",
                        "--N", "128", "--mode", "a8w8"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    files = {name: str(d / f"{name}.npy") for name in INPUTS}
    ref = run(files, "--out", str(tmp_path / "ref_q.npy"), "--out-scale", str(tmp_path / "ref_s.npy"))
    assert ref.returncode == 0, ref.stderr
    with open(tmp_path / "ref_q.npy", "rb") as f:
        q = f.read()
    with open(tmp_path / "ref_s.npy", "rb") as f:
        s = f.read()
    return {"dir": tmp_path, "files": files, "q": q, "s": s}


def run(files, *extra, cmd="run"):
    args = [QMOE, cmd]
    for name in INPUTS:
        args += ["--" + name.replace("_", "-"), files[name]]
    return subprocess.run(args + list(extra), capture_output=True, text=True, timeout=300)


def outputs(case, out, scale, *extra):
    return run(case["files"], "--out", str(out), "--out-scale", str(scale), *extra)


def one_error_line(r):
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def input_digests(case):
    return {name: digest(p) for name, p in case["files"].items()}


# ---------------------------------------------------------------- files named twice ----------


@pytest.mark.parametrize("name", INPUTS)
@pytest.mark.parametrize("which", ["--out", "--out-scale"])
def test_output_naming_an_input_is_refused(case, name, which):
    before = input_digests(case)
    other = case["dir"] / "other.npy"
    target = case["files"][name]
    out, scale = (target, other) if which == "--out" else (other, target)
    msg = one_error_line(outputs(case, out, scale))
    assert "same file" in msg and which in msg
    assert input_digests(case) == before
    assert not other.exists()


def test_output_reaching_an_input_through_links_is_refused(case):
    before = input_digests(case)
    d = case["dir"]
    os.symlink(case["files"]["x"], d / "x_link.npy")
    os.link(case["files"]["x_scale"], d / "x_scale_hard.npy")
    msg = one_error_line(outputs(case, d / "x_link.npy", d / "s.npy"))
    assert "--x input" in msg
    msg = one_error_line(outputs(case, d / "q.npy", d / "x_scale_hard.npy"))
    assert "--x-scale input" in msg
    os.mkdir(d / "sub")
    msg = one_error_line(outputs(case, d / "q.npy", d / "sub" / ".." / "c" / "group_list.npy"))
    assert "--group-list input" in msg
    assert input_digests(case) == before
    assert os.path.islink(d / "x_link.npy")


def test_one_new_file_two_spellings_is_refused(case):
    d = case["dir"] / "op"
    os.mkdir(d)
    msg = one_error_line(outputs(case, f"{d}/q.npy", f"{d}/./q.npy"))
    assert "same file as --out" in msg
    assert os.listdir(d) == []


def test_trace_naming_an_input_on_a_failing_run(case):
    """The issue's case: --trace weight.npy on a run that fails (decreasing group list)."""
    before = input_digests(case)
    gl = np.load(case["files"]["group_list"])
    bad = case["dir"] / "bad_gl.npy"
    np.save(bad, gl[::-1].copy())
    files = dict(case["files"], group_list=str(bad))
    r = run(files, "--out", str(case["dir"] / "q.npy"), "--out-scale", str(case["dir"] / "s.npy"),
            "--trace", files["weight"])
    msg = one_error_line(r)
    assert "--trace" in msg and "--weight input" in msg
    assert input_digests(case) == before


def test_failing_run_writes_no_trace_and_one_line(case):
    gl = np.load(case["files"]["group_list"])
    bad = case["dir"] / "bad_gl.npy"
    np.save(bad, gl[::-1].copy())
    files = dict(case["files"], group_list=str(bad))
    trace, q, s = (case["dir"] / n for n in ("t.json", "q.npy", "s.npy"))
    one_error_line(run(files, "--out", str(q), "--out-scale", str(s), "--trace", str(trace)))
    assert not trace.exists() and not q.exists() and not s.exists()


def test_successful_run_writes_the_trace(case):
    trace = case["dir"] / "t.json"
    r = outputs(case, case["dir"] / "q.npy", case["dir"] / "s.npy", "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    with open(trace) as f:
        assert "traceEvents" in json.load(f)


# ---------------------------------------------------------------- failed runs ---------------


def test_failed_run_keeps_existing_outputs(case):
    d = case["dir"]
    q, s = d / "q.npy", d / "s.npy"
    q.write_bytes(b"old output")
    s.write_bytes(b"old scales")
    # fails late (phase two: decreasing group list) ...
    gl = np.load(case["files"]["group_list"])
    np.save(d / "bad_gl.npy", gl[::-1].copy())
    files = dict(case["files"], group_list=str(d / "bad_gl.npy"))
    one_error_line(run(files, "--out", str(q), "--out-scale", str(s)))
    # ... and the second output cannot be written (its folder does not exist)
    one_error_line(outputs(case, q, d / "missing" / "s.npy"))
    assert q.read_bytes() == b"old output" and s.read_bytes() == b"old scales"
    assert [n for n in os.listdir(d) if ".qmoe-" in n] == []


def test_existing_outputs_are_replaced_keeping_their_mode(case):
    d = case["dir"]
    q, s = d / "q.npy", d / "s.npy"
    q.write_bytes(b"old")
    os.chmod(q, 0o640)
    r = outputs(case, q, s)
    assert r.returncode == 0, r.stderr
    assert q.read_bytes() == case["q"] and s.read_bytes() == case["s"]
    assert stat.S_IMODE(os.stat(q).st_mode) == 0o640


# ---------------------------------------------------------------- links, pipes, devices ------


def test_symlink_output_is_followed(case):
    d = case["dir"]
    (d / "real").mkdir()
    os.symlink("real/q.npy", d / "q_link.npy")  # dangling until the run
    os.symlink(str(d / "s_real.npy"), d / "s_link.npy")
    (d / "s_real.npy").write_bytes(b"old")
    r = outputs(case, d / "q_link.npy", d / "s_link.npy")
    assert r.returncode == 0, r.stderr
    assert os.path.islink(d / "q_link.npy") and os.path.islink(d / "s_link.npy")
    assert (d / "real" / "q.npy").read_bytes() == case["q"]
    assert (d / "s_real.npy").read_bytes() == case["s"]


def test_fifo_output_is_written_in_place(case):
    fifo = case["dir"] / "q.fifo"
    os.mkfifo(fifo)
    got = []

    def reader():
        with open(fifo, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=reader)
    t.start()
    r = outputs(case, fifo, case["dir"] / "s.npy")
    t.join(timeout=120)
    assert r.returncode == 0, r.stderr
    assert got == [case["q"]]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_null_outputs(case):
    r = outputs(case, "/dev/null", "/dev/null", "--trace", "/dev/null")
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_private_device_node(case):
    if os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    node = case["dir"] / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the same device as /dev/null
    r = outputs(case, node, case["dir"] / "s.npy")
    assert r.returncode == 0, r.stderr
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def test_gen_follows_links_in_its_folder(tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    os.symlink(str(tmp_path / "x_elsewhere.npy"), d / "x.npy")
    r = subprocess.run([QMOE, "gen", "--out", str(d), "--E", "2", "--M", "8", "--K", "64",
                        "--N", "64", "--mode", "a8w8"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.path.islink(d / "x.npy")
    assert np.load(tmp_path / "x_elsewhere.npy").shape == (8, 64)


# ---------------------------------------------------------------- limits and memory ----------


def test_limit_messages_state_the_real_limits(case):
    r = outputs(case, case["dir"] / "q.npy", case["dir"] / "s.npy", "--devices", "17")
    msg = one_error_line(r)
    assert "[0, 16]" in msg
    r = outputs(case, case["dir"] / "q.npy", case["dir"] / "s.npy", "--threads", "4097")
    assert "[0, 4096]" in one_error_line(r)
    r = outputs(case, case["dir"] / "q.npy", case["dir"] / "s.npy", "--devices", "16")
    assert r.returncode == 0, r.stderr  # the limit itself is accepted
    assert (case["dir"] / "q.npy").read_bytes() == case["q"]


def header_only(path, dtype, shape):
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})


def test_refused_shapes_cost_no_memory(tmp_path):
    """The issue's files: x (262144, 0) and weight (1, 1024, 0, 16, 32) are headers only; the
    outputs would be 4.3 GB. Phase one refuses N = 32768 before anything is allocated."""
    header_only(tmp_path / "x.npy", np.int8, (262144, 0))
    header_only(tmp_path / "w.npy", np.int8, (1, 1024, 0, 16, 32))
    np.save(tmp_path / "ws.npy", np.ones((1, 32768), np.float32))
    np.save(tmp_path / "xs.npy", np.ones(262144, np.float32))
    np.save(tmp_path / "gl.npy", np.array([0], np.int64))
    args = [QMOE, "run", "--x", str(tmp_path / "x.npy"), "--weight", str(tmp_path / "w.npy"),
            "--weight-scale", str(tmp_path / "ws.npy"), "--x-scale", str(tmp_path / "xs.npy"),
            "--group-list", str(tmp_path / "gl.npy"), "--out", str(tmp_path / "q.npy"),
            "--out-scale", str(tmp_path / "s.npy")]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    p.stdout.close()
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 1, err
    assert len(err.strip().splitlines()) == 1 and "32768" in err, err
    peak_mib = usage.ru_maxrss / 1024  # kilobytes on Linux
    assert peak_mib < 64, f"peak RSS {peak_mib:.1f} MiB for a refused case"
    assert not (tmp_path / "q.npy").exists()


def test_demo_refuses_before_generating(tmp_path):
    """`qmoe demo` checks the shapes with phase one before building a 15 GB case in memory."""
    p = subprocess.Popen([QMOE, "demo", "--E", "4", "--M", "262144", "--K", "7168", "--N",
                          "32768", "--mode", "a8w8"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=tmp_path)
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    p.stdout.close()
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 1 and "32768" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert usage.ru_maxrss / 1024 < 64
