#!/usr/bin/env bash
# mw_worker out of descriptors: when creating the eventfd or signalfd it waits on fails, the worker
# says so as its protocol says for a fatal error (one `error <message>` line, exit 3), not by an
# abort. Which descriptor limit leaves the worker none for them depends on what the loader and the
# runtime open first, so the test raises the limit from 3 until one does; a worker that aborts
# there instead, or gets to `ready` first, fails it. (At other limits other parts of the process
# fail in their own ways: the loader, the runtime's threads, the worlds' joins.)
# usage: worker_descriptors_test.sh <mw_worker>
set -u
worker=$1
fail() { echo "worker_descriptors_test: FAIL: $*" >&2; exit 1; }
conf='{"role":"r","seed":1,"window_ms":100,"traffic":[],"worlds":[{"name":"w1","host":"127.0.0.1","rank":0,"size":1,"port":0,"backend":"gloo","device":"cpu"}]}'
for n in $(seq 3 16); do
  out=$(exec </dev/null 2>/dev/null && ulimit -n "$n" &&
        exec timeout -s KILL 2 "$worker" --config "$conf")
  rc=$?
  first=${out%%$'\n'*}
  case "$rc:$out" in
    "3:error io_error: eventfd: "* | "3:error io_error: signalfd: "*)
      [ "$out" = "$first" ] || fail "more than the error line at $n descriptors: '${out:0:300}'"
      echo "worker_descriptors_test: at $n descriptors: '$first' (exit 3)"
      exit 0 ;;
    *ready*) fail "the worker got to ready at $n descriptors, never out of them for its own waits" ;;
  esac
done
fail "no descriptor limit up to 16 made the worker say that it could not create its eventfd"
