"""A member of one world in its own process, for test_fault.py (no torch: buffer-protocol arrays).

    python fault_worker.py WORLD PORT reduce N  -- rank 1 of 2: N all_reduces, then a recv
    python fault_worker.py WORLD PORT idle [HB] -- rank 1 of 2: blocks in a recv (heartbeat
                                                   timeout HB seconds, default 1)
"""

import array
import sys

import multiworld_native as mw


def main():
    world, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    manager = mw.WorldManager()
    heartbeat = float(sys.argv[4]) if mode == "idle" and len(sys.argv) > 4 else 1.0
    manager.initialize_world(world, 1, 2, port=port, timeout=30, heartbeat_timeout=heartbeat)
    comm = mw.Communicator(manager)
    if mode == "reduce":
        for _ in range(int(sys.argv[4])):
            a = array.array("f", [1.0] * 4)
            comm.all_reduce(world, a)
            assert list(a) == [2.0] * 4, a
        comm.recv(world, array.array("f", [0.0]), 0, tag=9)  # the leader's "done"
    else:
        comm.recv(world, array.array("f", [0.0]), 0)  # until the test kills this process
    return 0


if __name__ == "__main__":
    sys.exit(main())
