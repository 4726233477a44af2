"""The package's `mwchaos` console command: the wheel's harness where the package carries it
(.ci/quickstart wheel), else a clear refusal (pip install ./python builds the module only)."""
import os
import subprocess
import sys

import multiworld_native

COMMAND = os.path.join(os.path.dirname(sys.executable), "mwchaos")
BUNDLED = os.path.join(os.path.dirname(multiworld_native.__file__), "bin", "mwchaos")


def test_the_console_command_runs_the_bundled_harness_or_says_why_not():
    assert os.access(COMMAND, os.X_OK), f"pip installed no {COMMAND}"
    out = subprocess.run([COMMAND, "--help"], capture_output=True, text=True, timeout=60)
    if os.access(BUNDLED, os.X_OK):  # the wheel
        assert out.returncode == 0 and "mwchaos run" in out.stdout, out.stdout + out.stderr
        listed = subprocess.run([COMMAND, "list"], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "kill" in listed.stdout, listed.stderr
        here = os.path.dirname(BUNDLED)  # its worker beside it, libfiu's preload library
        assert os.access(os.path.join(here, "mw_worker"), os.X_OK)
        assert os.path.exists(os.path.join(os.path.dirname(here), "lib", "fiu_posix_preload.so"))
    else:
        assert out.returncode == 2, out.stdout + out.stderr
        assert "built without the chaos harness" in out.stderr
        assert "build/release/bin/mwchaos" in out.stderr

