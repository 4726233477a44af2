#!/usr/bin/env bash
# docs/ci.md's workflows: each example file parses as YAML with the structure its CI expects,
# docs/ci.md shows it verbatim, and the mwchaos command it runs is one this mwchaos accepts.
# Usage: ci_doc_test.sh <mwchaos> <source dir>
set -euo pipefail
mwchaos=$1
src=$2
python3 - "$src" <<'PY'
import re, sys, yaml
src = sys.argv[1]
doc = open(f"{src}/docs/ci.md").read()
def load(name):
    text = open(f"{src}/.ci/examples/{name}").read()
    assert "```yaml\n" + text + "```" in doc, f"docs/ci.md does not show .ci/examples/{name} verbatim"
    return yaml.safe_load(text)
gh = load("github-chaos.yml")
steps = gh["jobs"]["chaos"]["steps"]
runs = " ".join(s.get("run", "") for s in steps)
uses = [s.get("uses", "") for s in steps]
assert any(u.startswith("actions/checkout@") for u in uses), "no checkout step"
assert any(u.startswith("actions/upload-artifact@") for u in uses), "no artifact upload"
assert any("junit" in u for u in uses), "no JUnit publishing step"
assert "--format json,junit,html,github" in runs, "the workflow does not ask for --format github"
assert "--preserve-env=GITHUB_STEP_SUMMARY" in runs, "sudo would drop GITHUB_STEP_SUMMARY"
for s in steps:
    if "upload" in s.get("uses", "") or "junit" in s.get("uses", ""):
        assert s.get("if") == "always()", f"{s['name']}: must run when the gate failed too"
gl = load("gitlab-chaos.yml")["chaos"]
assert gl["artifacts"]["reports"]["junit"] == "chaos-reports/junit.xml"
assert gl["artifacts"]["when"] == "always"
assert any("mwchaos run" in line for line in gl["script"])
# Both install what the README's quick start installs for a build.
quick = open(f"{src}/.ci/quickstart").read()
pkgs = re.search(r"^packages=\(([^)]*)\)", quick, re.M).group(1).split()
for name, text in (("github", runs), ("gitlab", " ".join(gl["script"]))):
    missing = [p for p in pkgs if p not in text.split()]
    assert not missing, f"{name} workflow does not install {missing}"
print("workflows parse and match docs/ci.md")
PY
# The mwchaos command lines of the workflows are accepted (validate takes the same paths).
# (Whole, then searched: grep -q closing the pipe early would kill mwchaos with SIGPIPE, and
# pipefail would report that.)
help=$("$mwchaos" run --help)
grep -q -- "--format LIST" <<<"$help" || { echo "FAIL: no --format in --help"; exit 1; }
"$mwchaos" validate "$src/scenarios" >/dev/null || { echo "FAIL: the scenario folder does not validate"; exit 1; }
echo "docs/ci.md: ok"
