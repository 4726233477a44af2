"""A program exits with its own status whatever its threads are doing inside the runtime.

Seen by a user: a Python program whose daemon thread was blocked in `comm.recv` called
`sys.exit(0)` without closing its manager, and died by SIGABRT ("terminate called without an
active exception", exit 134): at finalization Python 3.11 ends such a thread with pthread_exit
when it takes the GIL back, and that unwind hit a destructor. The binding now parks the thread.
"""

import os
import subprocess
import sys
import textwrap

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_worker.py")

# Rank 0 of a healthy 2-member world (the peer, fault_worker.py, blocks in a recv); a daemon thread
# blocks in CALL; the main thread then ends the program by HOW, without closing the manager.
PROGRAM = textwrap.dedent("""
    import array, subprocess, sys, threading, time
    import multiworld_native as mw

    call, how, worker = sys.argv[1], sys.argv[2], sys.argv[3]
    m = mw.WorldManager()
    join = m.initialize_world("w", 0, 2, port=0, timeout=30, async_op=True)
    peer = subprocess.Popen([sys.executable, worker, "w", str(m.store_port("w", 10)), "idle"])
    assert join.wait(30)
    comm = mw.Communicator(m)
    inside = threading.Event()

    def blocked():
        buf = array.array("f", [0.0] * 4)
        inside.set()
        if call == "recv":
            comm.recv("w", buf, 1)
        elif call == "wait":
            comm.irecv("w", buf, 1).wait()
        else:
            m.events().next()

    threading.Thread(target=blocked, daemon=True).start()
    inside.wait()
    time.sleep(0.3)  # inside the runtime, past a wait slice or two
    print("exiting", flush=True)
    try:
        if how == "exit7":
            sys.exit(7)
        if how == "exit0":
            sys.exit(0)
        # "end": main returns
    finally:
        peer.kill()
""")


@pytest.mark.parametrize("call,how,status", [
    ("recv", "exit0", 0),
    ("recv", "exit7", 7),
    ("wait", "end", 0),
    ("events", "exit0", 0),
])
def test_exit_with_a_thread_inside_a_call(tmp_path, call, how, status):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    out = subprocess.run([sys.executable, str(program), call, how, WORKER], capture_output=True,
                         text=True, timeout=60)
    assert "exiting" in out.stdout, out.stdout + out.stderr
    assert "terminate called" not in out.stderr, out.stderr
    assert out.returncode == status, out.stdout + out.stderr


# torch programs that end without destroying their groups: torch's maps (and, in torch 2.x, its
# C++ registry of group names) hold the groups for the whole process; nothing of the runtime may
# be reported leaked by nanobind at exit, nor the exit status change.
PENDING = """
    import torch
    import multiworld_native as mw
    from multiworld_native import torch as mwtorch
    ms = [mw.WorldManager() for _ in range(2)]
    j = ms[0].initialize_world("w", 0, 2, port=0, timeout=30, async_op=True)
    ms[1].initialize_world("w", 1, 2, port=ms[0].store_port("w", 10), timeout=30)
    assert j.wait(30)
    pg = mwtorch.process_group(ms[0], "w")
    futs = [pg.recv([torch.empty(4)], 1).get_future() for _ in range(200)]
    {end}
    print("exiting", flush=True)
"""
TORCH_PROGRAMS = {
    "process_group": """
        import torch, torch.distributed as dist
        import multiworld_native as mw
        from multiworld_native import torch as mwtorch
        m = mw.WorldManager()
        m.initialize_world("a", 0, 1, port=0)
        pg = mwtorch.process_group(m, "a")
        t = torch.ones(2)
        dist.all_reduce(t, group=pg)
        fut = dist.all_reduce(t, group=pg, async_op=True).get_future()
        fut.wait()
        print("exiting", flush=True)
    """,
    # 200 receives nobody answers, their futures taken (the completion threads wait in them);
    # the manager closed just before the exit (the futures fail while the interpreter ends:
    # this aborted the process, "terminate called without an active exception"), or kept.
    "pending_closed": PENDING.format(end="ms[0].close()"),
    "pending_kept": PENDING.format(end="pass"),
    "register": """
        import sys, torch, torch.distributed as dist
        from multiworld_native import torch as mwtorch
        mwtorch.register()
        dist.init_process_group("multiworld", init_method="file://" + sys.argv[1], rank=0,
                                world_size=1)
        sub = dist.new_group([0], backend="multiworld")
        t = torch.ones(2)
        dist.all_reduce(t)
        dist.all_reduce(t, group=sub)
        print("exiting", flush=True)
        sys.exit(3)
    """,
}


@pytest.mark.parametrize("name", sorted(TORCH_PROGRAMS))
def test_a_torch_program_exits_without_leak_reports(tmp_path, name):
    pytest.importorskip("torch")
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(TORCH_PROGRAMS[name]))
    out = subprocess.run([sys.executable, str(program), str(tmp_path / "init")],
                         capture_output=True, text=True, timeout=120)
    assert "exiting" in out.stdout, out.stdout + out.stderr
    assert "leaked" not in out.stderr, out.stderr
    assert "terminate called" not in out.stderr, out.stderr
    assert out.returncode == (3 if name == "register" else 0), out.stdout + out.stderr
