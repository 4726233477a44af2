"""The ``mwchaos`` console command of the package: runs the chaos harness the wheel carries
(multiworld_native/bin/mwchaos, with mw_worker beside it), pointing it at the libfiu preload
library the wheel carries too unless MW_FIU_POSIX_PRELOAD is set. A package built without the
harness (``pip install ./python``: the module only) says so and exits 2."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def mwchaos():
    exe = os.path.join(_HERE, "bin", "mwchaos")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(
            "mwchaos: this multiworld_native was built without the chaos harness (pip install "
            "./python builds the module only). Install the wheel (.ci/quickstart wheel builds "
            "it: dist/multiworld_native-*.whl), or run a build tree's mwchaos "
            "(build/release/bin/mwchaos).\n")
        sys.exit(2)
    env = dict(os.environ)
    preload = os.path.join(_HERE, "lib", "fiu_posix_preload.so")
    if not env.get("MW_FIU_POSIX_PRELOAD") and os.path.exists(preload):
        env["MW_FIU_POSIX_PRELOAD"] = preload
    os.execve(exe, ["mwchaos"] + sys.argv[1:], env)
