"""A worker process of world w2 is SIGKILLed: only w2 breaks; the leader's w1 keeps working."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import multiworld_native as mw

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_worker.py")


def spawn(manager, world, *args):
    join = manager.initialize_world(world, 0, 2, port=0, timeout=30, async_op=True)
    port = manager.store_port(world, 10)
    proc = subprocess.Popen([sys.executable, WORKER, world, str(port), *args])
    return join, proc


def test_killed_worker_breaks_only_its_world():
    leader = mw.WorldManager()
    comm = mw.Communicator(leader)
    events = leader.events()
    join1, p1 = spawn(leader, "w1", "reduce", "6")
    join2, p2 = spawn(leader, "w2", "idle")
    try:
        assert join1.wait(30) and join2.wait(30)

        def reduce_w1():
            t = torch.ones(4)
            comm.all_reduce("w1", t)
            assert torch.equal(t, torch.full((4,), 2.0))

        for _ in range(3):
            reduce_w1()
        pending = comm.irecv("w2", torch.zeros(1), 1, tag=5)
        killed_at = time.monotonic()
        os.kill(p2.pid, signal.SIGKILL)

        with pytest.raises(mw.BrokenWorldError) as e:
            pending.wait(timeout=10)
        err = e.value
        assert (err.world, err.cause, err.rank) == ("w2", "peer_died", 1)
        assert killed_at <= err.detected_at <= time.monotonic()
        assert err.detected_at - killed_at < 2.0  # the connection close is seen at once
        with pytest.raises(mw.BrokenWorldError) as e:  # the next operation on w2 too
            comm.send("w2", torch.zeros(1), 1)
        assert e.value.world == "w2" and e.value.cause == "peer_died"

        for _ in range(3):  # w1 goes on
            reduce_w1()

        broken = []
        while (ev := events.next(timeout=0.3)) is not None:
            if ev.kind == "broken":
                broken.append((ev.world, ev.cause, ev.peer))
        assert broken == [("w2", "peer_died", 1)]
        states = {w.name: w.state for w in leader.worlds()}
        assert states == {"w1": "healthy", "w2": "broken"}
        comm.send("w1", torch.zeros(1), 1, tag=9)
        assert p1.wait(20) == 0
        leader.remove_world("w2")
        assert "w2" not in {w.name for w in leader.worlds()}
    finally:
        for p in (p1, p2):
            if p.poll() is None:
                p.kill()
            p.wait(10)
        leader.close()
