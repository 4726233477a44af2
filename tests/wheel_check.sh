#!/usr/bin/env bash
# wheel_check.sh VENV: the wheel, installed in VENV (a venv from /usr/bin/python3 holding PyPI's
# torch, pytest and the wheel: nothing built there), works on a machine where nothing could be
# built. In a mount namespace of its own it hides
#   - the compilers and their internals (/usr/lib/gcc, /usr/libexec/gcc, every gcc, g++, cc,
#     c++, cpp, clang, cmake and make on PATH) and every header (/usr/include,
#     /usr/local/include), so no -dev package is of any use;
#   - every Debian library the wheel carries a copy of (multiworld_native.libs/), so only those
#     copies can be loaded;
# says what it hid, then runs from the installed package: mwchaos on the demo scenario, a
# program-role scenario whose programs import the package and train with DDP
# (examples/python/ddp_two_worlds.lua), torch and the module imported in both orders with a
# Gloo world's all_reduce, and checks that the module exports no C++ runtime symbol and that
# nothing it ships carries debug information. The Python examples run as scripts in the gate's
# pytest step under the same venv and wheel (test_examples.py), so not again here. The
# scenarios go through tests/run_scenario.sh (its rerun policy). Root only (the namespace).
# Exit: 0 every step passed, 1 a step failed, 2 usage.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if (($# != 1)) || [ ! -x "$1/bin/python" ]; then
  echo "usage: tests/wheel_check.sh VENV (a venv with the wheel installed)" >&2
  exit 2
fi
venv=$(cd "$1" && pwd)
if [ "${MW_WHEEL_CHECK_INSIDE:-}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "wheel_check.sh: needs root (a mount namespace)" >&2; exit 2; }
  exec env MW_WHEEL_CHECK_INSIDE=1 unshare --mount --propagation private "$0" "$@"
fi

hidden=()
hide_dir() { [ -d "$1" ] && mount -t tmpfs -o ro,size=64k mw-hidden "$1" && hidden+=("$1"); }
hide_file() {
  local f
  f=$(readlink -f "$1") || return 0
  [ -f "$f" ] || return 0
  for h in "${hidden[@]}"; do [ "$h" = "$f" ] && return 0; done
  mount --bind /dev/null "$f" && hidden+=("$f")
}
for d in /usr/include /usr/local/include /usr/lib/gcc /usr/libexec/gcc; do hide_dir "$d"; done
for b in gcc g++ cc c++ cpp clang clang++ cmake make; do
  p=$(command -v "$b" 2>/dev/null) && hide_file "$p"
done
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
vendored=0
for lib in "$site"/multiworld_native.libs/*; do
  [ -e "$lib" ] || continue
  vendored=$((vendored + 1))
  # auditwheel names its copy NAME-HASH.so.VERSION: the system's is NAME.so.VERSION.
  name=$(basename "$lib" | sed -E 's/-[0-9a-f]{8}//')
  for dir in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib /lib; do
    for f in "$dir/$name" "$dir/${name%%.so*}.so"*; do [ -e "$f" ] && hide_file "$f"; done
  done
done
echo "wheel_check: hidden in this mount namespace (${#hidden[@]}): ${hidden[*]}"
echo "wheel_check: the wheel carries $vendored libraries (multiworld_native.libs/)"

fails=0
step() {
  local what=$1
  shift
  local t0=$SECONDS
  if "$@" >"$work/step.log" 2>&1; then
    echo "ok   $what ($((SECONDS - t0)) s)"
  else
    echo "FAIL $what ($((SECONDS - t0)) s):"
    tail -n 40 "$work/step.log" | sed 's/^/     /'
    fails=$((fails + 1))
  fi
}
work=$(mktemp -d /tmp/mw-wheel-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PATH="$venv/bin:$PATH"
unset PYTHONPATH MW_CHAOS MW_FIU_POSIX_PRELOAD

step "no compiler works here (gcc, c++)" bash -c '! gcc --version && ! c++ --version'
step "the package is the installed wheel's" python -c "
import multiworld_native as m, sys
assert m.__file__.startswith(sys.prefix), m.__file__
print(m.__file__, m.__version__)"
step "mwchaos is the wheel's console command" bash -c \
  "[ \"\$(command -v mwchaos)\" = '$venv/bin/mwchaos' ] && mwchaos --help | grep -q 'mwchaos run'"
step "mwchaos run scenarios/demo_worker_killed.lua" \
  "$here/tests/run_scenario.sh" "$venv/bin/mwchaos" -o "$work/out" \
  "$here/scenarios/demo_worker_killed.lua"
step "mwchaos run examples/python/ddp_two_worlds.lua (its programs import the installed package)" \
  "$here/tests/run_scenario.sh" "$venv/bin/mwchaos" -o "$work/out" \
  "$here/examples/python/ddp_two_worlds.lua"
for order in "torch, multiworld_native" "multiworld_native, torch"; do
  step "import $order, then a Gloo world's all_reduce and torch's own" python -c "
import $order
import torch, torch.distributed as dist, multiworld_native as mw
m = mw.WorldManager()
m.initialize_world('w', 0, 1, port=0)
t = torch.ones(4)
mw.Communicator(m).all_reduce('w', t)
assert torch.equal(t, torch.ones(4))
dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
u = torch.ones(4)
dist.all_reduce(u)
dist.destroy_process_group()
print(torch.__version__, 'ok')
m.close()"
done
# Weak template instantiations (W, V, u) bind to the first definition loaded, as in every C++
# library; a strong definition (T, D, B, R) of the C++ runtime's would be a second copy of it.
step "the module defines no C++ runtime symbol of its own (strong std::, __cxxabiv1, __gnu_cxx)" \
  bash -c "
so=\$(ls '$site'/multiworld_native/_core*.so)
! nm -D --defined-only \"\$so\" | awk '\$2 ~ /^[TDBR]\$/' | c++filt |
  grep -E ' (std::|__cxxabiv1|__gnu_cxx::)'"
step "what ships carries no debug information (no .debug_ section in any of its programs and libraries)" \
  bash -c "
n=0
for f in '$site'/multiworld_native/bin/* '$site'/multiworld_native/_core*.so '$site'/multiworld_native/lib/*.so '$site'/multiworld_native.libs/*; do
  [ -f \"\$f\" ] || continue
  n=\$((n + 1))
  if readelf -S \"\$f\" | grep -q '[.]debug_'; then echo \"debug information in \$f\"; exit 1; fi
done
echo \"\$n files, none with debug information\"; ((n >= 4))"
echo "wheel_check: $fails failed"
((fails == 0))
