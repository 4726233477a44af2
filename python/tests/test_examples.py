"""The examples people read are run here: examples/python/*.py, and every ```python block of the
README and docs/python.md."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import needs_fsdp2

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "docs" / "python.md"]


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_python_blocks_run(doc):
    blocks = python_blocks(doc)
    assert blocks, f"{doc} has no python example"
    for code in blocks:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def run_example(name, timeout=90, script=None):
    """Runs examples/python/<name> (or `script`) and returns its output; fails on a non-zero exit.
    It runs in a session of its own, unbuffered, with Python's faulthandler on: past `timeout`
    seconds every process it started gets SIGABRT (each Python process then writes every thread's
    stack; several processes' stacks on one pipe may interleave), then SIGKILL, so none is left
    behind and the failure shows what it wrote and where it was stuck."""
    script = script or ROOT / "examples" / "python" / name
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        pytest.fail(f"{name} ran past {timeout} s; its output and its stacks at SIGABRT:\n{stdout}{stderr}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it started and left
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, stdout + stderr
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_an_example_past_its_time_is_failed_with_its_output_and_stacks(tmp_path):
    """The harness of the tests below: an example that hangs (here in a child it started) fails
    with what it wrote and where its Python processes were stuck, and leaves nothing. The child
    writes to a file of its own: two processes' stacks on one pipe interleave, byte by byte."""
    hang = tmp_path / "hang.py"
    child_err = tmp_path / "child.err"
    hang.write_text("import subprocess, sys, time\n"
                    f"err = open({str(child_err)!r}, 'w')\n"
                    "child = subprocess.Popen([sys.executable, '-c', "
                    "'import time\\nwhile True: time.sleep(0.1)'], stderr=err)\n"
                    "print('started', child.pid)\n"
                    "child.wait()\n")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_example("hang.py", timeout=3, script=hang)
    text = str(failed.value)
    assert "hang.py ran past 3 s" in text and "started" in text, text
    # The example's stack, waiting on its child; the child's, in its loop.
    assert 'hang.py", line 5 in <module>' in text, text
    assert "line 2 in <module>" in child_err.read_text(), child_err.read_text()
    pid = int(text.split("started ")[1].split()[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # gone, or a zombie its new parent has yet to reap
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the hung example's child {pid} was left running")


def test_leader_two_worlds_example():
    out = run_example("leader_two_worlds.py")
    assert "world w2 broke (peer_died, rank 1)" in out.stdout
    assert "after w2 broke" in out.stdout


def test_multiworld_compat_leader_example():
    """The original MultiWorld leader example, ported with one import changed; world2's worker is
    SIGKILLed and world1 keeps streaming."""
    out = run_example("multiworld_compat_leader.py")
    assert "caught an exception: world2 broken: " in out.stdout
    assert "world2 broken: True, world1 broken: False" in out.stdout


def test_leader_two_worlds_asyncio_example():
    """The same leader with one asyncio task per world awaiting its receives."""
    out = run_example("leader_two_worlds_asyncio.py")
    assert "world w2 broke (peer_died, rank 1)" in out.stdout
    assert "the task of w1 goes on" in out.stdout


def test_ddp_two_worlds_example():
    """DDP over `train` and serving over `serve` in one process: the client is killed, serve
    breaks alone, DDP trains on with no error, serve is re-created with a restarted client."""
    out = run_example("ddp_two_worlds.py")
    assert "main: serve broke alone (peer_died, rank 1); DDP trained" in out.stdout
    assert "with no error; serve was re-created" in out.stdout


def mwchaos():
    """The mwchaos that runs scenarios here: $MW_CHAOS (.ci/quickstart sets it), else a build of
    this checkout."""
    given = os.environ.get("MW_CHAOS")
    candidates = [given] if given else [ROOT / "build" / d / "bin" / "mwchaos"
                                        for d in ("release", "dev")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return str(c)
    pytest.fail("no mwchaos to run the scenario with: build the C++ tree (.ci/quickstart test) "
                "or set MW_CHAOS to its path")


def run_scenario(scenario, tmp_path):
    """Runs a scenario with this interpreter first in PATH; fails unless mwchaos exits 0."""
    env = dict(os.environ)
    # The scenario runs "python3": this interpreter, which has the package.
    env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # The suite's one way to run a scenario (tests/run_scenario.sh: its rerun policy).
    out = subprocess.run([str(ROOT / "tests" / "run_scenario.sh"), mwchaos(), "-o", str(tmp_path),
                          str(scenario)],
                         capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    # Every program role exited clean: nanobind reports objects still alive at the
    # interpreter's exit (a thread left holding a manager) on stderr.
    for path in tmp_path.glob("*/report.json"):
        for w in json.loads(path.read_text())["run"]["workers"]:
            assert "nanobind: leaked" not in w["stderr_tail"], (w["role"], w["stderr_tail"])
    return out


def test_ddp_two_worlds_scenario(tmp_path):
    """examples/python/ddp_two_worlds.lua: the client is killed, restarted, paused and resumed;
    serve breaks each time and comes back, train never breaks, and the main process's DDP
    `steps` keep their throughput."""
    out = run_scenario(ROOT / "examples" / "python" / "ddp_two_worlds.lua", tmp_path)
    assert "PASS  DDP trains on" in out.stdout
    report = json.loads((tmp_path / "ddp_two_worlds" / "report.json").read_text())
    kept = [e for e in report["expectations"] if "role main's steps keeps" in e["name"]]
    assert kept and kept[0]["status"] == "pass", report["expectations"]
    end = report["run"]["duration_s"]
    breaks = [(e["world"], e["cause"]) for e in report["run"]["events"]
              if e["kind"] == "broken" and e["role"] == "main" and e["t_s"] < end - 0.5]
    assert ("serve", "peer_died") in breaks and ("serve", "peer_silent") in breaks, breaks
    assert all(w == "serve" for w, _ in breaks), breaks


def test_pipeline_serving_scenario(tmp_path):
    """examples/pipeline_serving: the Python serving pipeline as scenario roles, a stage replica
    killed and restarted; every expectation of its scenario holds (mwchaos exits 0)."""
    out = run_scenario(ROOT / "examples" / "pipeline_serving" / "pipeline_serving.lua", tmp_path)
    assert "PASS  pipeline serving" in out.stdout
    report = json.loads((tmp_path / "pipeline_serving" / "report.json").read_text())
    kept = [e for e in report["expectations"] if "role frontend's requests keeps" in e["name"]]
    assert kept and kept[0]["status"] == "pass", report["expectations"]
    # The program joined with the scenario's options (its `created` events name them).
    created = [e for e in report["run"]["events"] if e["kind"] == "created"]
    assert created and all("heartbeat_ms=500" in e["detail"] for e in created), created
    # Every series in time order, from before the run's zero (a program's first windows) on.
    for world, roles in report["run"]["series"].items():
        for role, s in roles.items():
            assert s["t_s"] == sorted(s["t_s"]), (world, role, s["t_s"][:5])


def test_fsdp_two_worlds_example():
    """FSDP2 over worlds a and b in one process, no default group: b's peer is killed, b's step
    fails with the BrokenWorldError's text, a trains on, b is re-joined with a restarted peer."""
    needs_fsdp2()
    out = run_example("fsdp_two_worlds.py")
    assert "main: b broke alone (BrokenWorldError: world_broken: world 'b' is broken " \
           "(peer_died, rank 1)" in out.stdout, out.stdout
    assert "with no error; b was re-joined and trained" in out.stdout


def test_fsdp_two_worlds_scenario(tmp_path):
    """examples/python/fsdp_two_worlds.lua: b's peer SIGKILLed and restarted; b breaks alone and
    comes back, a never breaks, and the main process's `steps` (a's) keep their throughput."""
    needs_fsdp2()
    out = run_scenario(ROOT / "examples" / "python" / "fsdp_two_worlds.lua", tmp_path)
    assert "PASS  FSDP2 trains on" in out.stdout
    report = json.loads((tmp_path / "fsdp_two_worlds" / "report.json").read_text())
    kept = [e for e in report["expectations"] if "role main's steps keeps" in e["name"]]
    assert kept and kept[0]["status"] == "pass", report["expectations"]
    end = report["run"]["duration_s"]
    breaks = [(e["world"], e["cause"]) for e in report["run"]["events"]
              if e["kind"] == "broken" and e["role"] == "main" and e["t_s"] < end - 0.5]
    assert breaks and all(w == "b" for w, _ in breaks), breaks
