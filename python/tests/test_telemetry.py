"""The runtime's telemetry channel seen from Python: a Python program the chaos harness starts
(MW_TELEMETRY_FD in its environment) reports its worlds by itself, through the same runtime code
as a C++ program; without the variable nothing is reported."""

import os
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import torch
    import multiworld_native as mw
    with mw.WorldManager() as m:
        m.initialize_world("py1", 0, 1, timeout=30)
        c = mw.Communicator(m)
        t = torch.ones(1024)
        for _ in range(7):
            c.all_reduce("py1", t)
        import time
        time.sleep(0.25)
    print("done")
""")


def run_program(with_channel, program=PROGRAM):
    """Runs `program` (which prints "done"), with the telemetry channel on a pipe when asked, and
    returns the lines the pipe got."""
    r, w = os.pipe()
    env = dict(os.environ)
    env.pop("MW_TELEMETRY_FD", None)
    if with_channel:
        env["MW_TELEMETRY_FD"] = str(w)
        env["MW_TELEMETRY_WORLDS"] = "py1"
    proc = subprocess.run([sys.executable, "-c", program], env=env, pass_fds=(w,),
                          capture_output=True, text=True, timeout=60)
    os.close(w)
    with os.fdopen(r) as f:
        lines = f.read().splitlines()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"  # the program's own output is untouched
    return lines


def test_a_python_program_reports_its_worlds_when_the_harness_asks():
    lines = run_program(True)
    kinds = [line.split()[0] for line in lines]
    assert kinds.count("ready") == 1
    events = [line.split() for line in lines if line.startswith("event ")]
    assert [(e[2], e[3]) for e in events] == [("py1", "created"), ("py1", "removed")]
    windows = [line.split() for line in lines if line.startswith("metrics ")]
    assert len(windows) >= 2 and all(w[2] == "py1" for w in windows)
    assert sum(int(w[4]) for w in windows) == 7 * 1024 * 4  # bytes of 7 all_reduces
    assert sum(int(w[5]) for w in windows) == 7


def test_without_the_channel_nothing_is_reported():
    assert run_program(False) == []


def test_report_metric_reaches_the_harness_and_checks_its_arguments():
    program = textwrap.dedent("""
        import multiworld_native as mw
        with mw.WorldManager():
            for _ in range(12):
                mw.report_metric("requests")
                mw.report_metric("tokens", 3)
            import time
            time.sleep(0.25)
        print("done")
    """)
    r, w = os.pipe()
    env = dict(os.environ, MW_TELEMETRY_FD=str(w))
    proc = subprocess.run([sys.executable, "-c", program], env=env, pass_fds=(w,),
                          capture_output=True, text=True, timeout=60)
    os.close(w)
    with os.fdopen(r) as f:
        app = [line.split() for line in f.read().splitlines() if line.startswith("app ")]
    assert proc.returncode == 0, proc.stderr
    assert sum(float(a[3]) for a in app if a[2] == "requests") == 12
    assert sum(float(a[3]) for a in app if a[2] == "tokens") == 36


def test_report_metric_refuses_bad_names_and_amounts():
    import math

    import pytest

    import multiworld_native as mw
    mw.report_metric("fine_name.v2-1", 2)  # no harness: accepted, kept nowhere
    for bad in ("", "two words", "x" * 65):
        with pytest.raises(ValueError, match="reportMetric"):
            mw.report_metric(bad)
    with pytest.raises(ValueError, match="not finite"):
        mw.report_metric("x", math.inf)
    with pytest.raises(TypeError):
        mw.report_metric("x", "one")


def test_report_check_reaches_the_harness_counted_with_the_first_failure():
    program = textwrap.dedent("""
        import multiworld_native as mw
        with mw.WorldManager():
            for i in range(10):
                mw.report_check("answer.doubled", i != 4, f"got {i} wanted {2 * i}")
            import time
            time.sleep(0.25)
        print("done")
    """)
    checks = [line.split(" ", 5) for line in run_program(True, program)
              if line.startswith("check ")]
    assert all(c[2] == "answer.doubled" for c in checks), checks
    assert sum(int(c[3]) for c in checks) == 9
    assert sum(int(c[4]) for c in checks) == 1
    assert [c[5] for c in checks if int(c[4]) > 0] == ["got 4 wanted 8"]


def test_report_check_refuses_bad_names():
    import pytest

    import multiworld_native as mw
    mw.report_check("fine", False, "no harness: accepted, kept nowhere")
    for bad in ("", "two words", "x" * 65):
        with pytest.raises(ValueError, match="reportCheck"):
            mw.report_check(bad, True)
    with pytest.raises(TypeError):
        mw.report_check("x")
