#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks packaging/monitoring/: the alerting rules (promtool check + unit tests), the Grafana
# dashboard (valid JSON, every query valid PromQL, the non-trivial ones unit-tested), and that
# all of them use only the metric families in tests/monitoring/metric-families.txt.
# Needs promtool (Debian: apt-get install prometheus; or PROMTOOL=/path/to/promtool) and python3.
# Ends with one line "monitoring: N passed, M failed"; exit status non-zero if any check failed.
set -u
cd "$(dirname "$0")/../.." || exit 1

PROMTOOL=${PROMTOOL:-promtool}
RULES=packaging/monitoring/kprism-alerts.yaml
DASHBOARD=packaging/monitoring/kprism-dashboard.json
ALERT_TESTS=tests/monitoring/kprism-alerts.test.yaml
DASHBOARD_TESTS=tests/monitoring/kprism-dashboard.test.yaml
FAMILIES=tests/monitoring/metric-families.txt

passed=0; failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check NAME CMD...: runs CMD, prints its output only when it fails.
check() {
    local name=$1; shift
    if "$@" >"$tmp/out" 2>&1; then
        echo "PASS  $name"
        passed=$((passed + 1))
    else
        echo "FAIL  $name"
        sed 's/^/      /' "$tmp/out"
        failed=$((failed + 1))
    fi
}

have_promtool() {
    command -v "$PROMTOOL" >/dev/null || { echo "promtool not found (apt-get install prometheus, or set PROMTOOL)"; return 1; }
    "$PROMTOOL" --version 2>&1 | head -1
}

# Every dashboard query, with the Grafana variables replaced, as recording rules for promtool.
dashboard_queries_as_rules() {
    python3 - "$DASHBOARD" "$tmp/dashboard-queries.rules.yaml" <<'EOF'
import json, sys
dash = json.load(open(sys.argv[1]))
def subst(e):
    for var, val in (("$__rate_interval", "5m"), ("$__interval", "1m"), ("$__range", "1h"),
                     ("${instance}", ".*"), ("$instance", ".*"), ("${upstream}", ".*"), ("$upstream", ".*")):
        e = e.replace(var, val)
    return e
rules = []
for p in dash["panels"]:
    for t in p.get("targets", []):
        rules.append({"record": f"kprism_dashboard:panel{p['id']}_{t['refId']}", "expr": subst(t["expr"])})
if not rules:
    sys.exit("no queries found in the dashboard")
# JSON is YAML: promtool reads it as a rule file.
json.dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, open(sys.argv[2], "w"), indent=1)
print(f"{len(rules)} queries")
EOF
}

# Structure of the dashboard and consistency of every file with metric-families.txt.
consistency() {
    python3 - "$DASHBOARD" "$FAMILIES" "$RULES" "$ALERT_TESTS" "$DASHBOARD_TESTS" <<'EOF'
import json, re, sys
dash_path, fam_path, *texts = sys.argv[1:]
dash_tests_path = texts[-1]
errors = []
dash = json.load(open(dash_path))

# Known metric names: each family, plus _bucket/_sum/_count for histograms.
known = set()
for line in open(fam_path):
    line = line.split("#", 1)[0].split()
    if not line:
        continue
    name, kind = line
    known.add(name)
    if kind == "histogram":
        known.update(name + s for s in ("_bucket", "_sum", "_count"))
for path in [dash_path] + texts:
    for name in sorted(set(re.findall(r"\bkprism_[a-z0-9_]+", open(path).read()))):
        if name not in known:
            errors.append(f"{path}: unknown metric name {name}")

# Dashboard structure.
if not 36 <= dash.get("schemaVersion", 0) <= 39:
    errors.append(f"schemaVersion {dash.get('schemaVersion')} is not ~38")
tvars = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
if tvars.get("DS_PROMETHEUS", {}).get("type") != "datasource":
    errors.append("no datasource variable DS_PROMETHEUS")
if "instance" not in tvars:
    errors.append("no instance variable")
ids = [p["id"] for p in dash["panels"]]
if len(ids) != len(set(ids)):
    errors.append("duplicate panel ids")
want_ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
queries = set()
for p in dash["panels"]:
    if p["type"] == "row":
        continue
    if p.get("datasource") != want_ds:
        errors.append(f"panel {p['id']} ({p['title']}): datasource is not ${{DS_PROMETHEUS}}")
    if not p.get("targets"):
        errors.append(f"panel {p['id']} ({p['title']}): no queries")
    for t in p.get("targets", []):
        if t.get("datasource") != want_ds:
            errors.append(f"panel {p['id']} ({p['title']}) query {t['refId']}: datasource is not ${{DS_PROMETHEUS}}")
        if 'job="kprism"' not in t["expr"]:
            errors.append(f"panel {p['id']} ({p['title']}) query {t['refId']}: not restricted to job=\"kprism\"")
        e = t["expr"].replace("$__rate_interval", "5m").replace("$instance", ".*").replace("$upstream", ".*")
        queries.add(e)
    g = p["gridPos"]
    if g["x"] + g["w"] > 24:
        errors.append(f"panel {p['id']} ({p['title']}): wider than the grid")

# Every expr unit-tested in the dashboard tests must still be a dashboard query (single-line exprs).
tested = re.findall(r"^\s*- expr: (.+)$", open(dash_tests_path).read(), re.M)
if not tested:
    errors.append(f"{dash_tests_path}: no promql_expr_test exprs found")
for e in tested:
    if e.strip() not in queries:
        errors.append(f"{dash_tests_path}: tested expr is not a dashboard query: {e.strip()}")

for e in errors:
    print(e)
print(f"{len(known)} metric names known, {len(dash['panels'])} panels, {len(queries)} distinct queries, {len(tested)} tested")
sys.exit(1 if errors else 0)
EOF
}

if check "promtool available" have_promtool; then
    check "promtool check rules $RULES" "$PROMTOOL" check rules "$RULES"
    check "promtool test rules $ALERT_TESTS" "$PROMTOOL" test rules "$ALERT_TESTS"
fi
check "python3 -m json.tool $DASHBOARD" python3 -m json.tool "$DASHBOARD"
if check "dashboard queries extracted" dashboard_queries_as_rules && command -v "$PROMTOOL" >/dev/null; then
    check "dashboard queries are valid PromQL" "$PROMTOOL" check rules "$tmp/dashboard-queries.rules.yaml"
    check "promtool test rules $DASHBOARD_TESTS" "$PROMTOOL" test rules "$DASHBOARD_TESTS"
fi
check "metric names, dashboard structure, tested queries" consistency

echo "monitoring: $passed passed, $failed failed"
[ "$failed" = 0 ]
