#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Documentation drift: every default, bound and size that the man pages (and README.md and the
# packaging READMEs) state, and the metric families kprism(8) lists, compared with what the code
# says. One line per checked fact, then "doc-drift: N passed, M failed"; exit status 1 on any
# failure.
#
# What the code says comes from the binary where it can tell (`kprism check` prints every
# default, an out-of-range value makes it print the key's bounds, a bad value its choices, 65
# endpoints must be refused) and otherwise from the named constants in include/ and src/
# (kChunkSize, kMaxFirstFlight, Admin::kMaxConnections, kMaxUpstreams, ...), found by name
# wherever they are defined, and from the table of metric families (kMetricFamilies in
# include/kprism/admin/metric_families.h). What the docs say is read from the man pages as mandoc renders
# them (so a phrase split over source lines still matches) and from the Markdown as written.
# A phrase that is no longer in a document fails too: reword it here when you reword it there.
#
# Usage: tests/packaging/doc_drift.sh   (KPRISM_BIN defaults to build/kprism; DOC_DRIFT_MAN8,
# DOC_DRIFT_MAN5, DOC_DRIFT_README read other copies of man/kprism.8, man/kprism.toml.5 and
# README.md, e.g. to see it fail on an edited copy)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${KPRISM_BIN:-build/kprism}
MAN8=${DOC_DRIFT_MAN8:-man/kprism.8}
MAN5=${DOC_DRIFT_MAN5:-man/kprism.toml.5}
README=${DOC_DRIFT_README:-README.md}
UNIT=packaging/systemd/kprism.service
SYSTEMD_README=packaging/systemd/README.md
K8S_README=packaging/kubernetes/README.md
K8S_POD=packaging/kubernetes/kprism.yaml
EXAMPLE=packaging/kprism.toml.example
[ -x "$BIN" ] || { echo "doc-drift: $BIN not built (make)" >&2; exit 1; }
command -v mandoc >/dev/null || { echo "doc-drift: mandoc not installed (make deps)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }

# A man page as text: one line per paragraph (mandoc's widest), overstrikes removed.
render() { mandoc -Tascii -O width=1000 "$1" | sed 's/.\x08//g'; }
render "$MAN8" >"$tmp/man8.txt"
render "$MAN5" >"$tmp/man5.txt"
# Documents as one line with single spaces, for phrases that may wrap.
flat() { tr -s ' \t\n' '   ' <"$1"; }
flat "$tmp/man8.txt" >"$tmp/kprism.8"
cp "$tmp/man8.txt" "$tmp/kprism.8.lines"   # one paragraph a line: a list item's text stays together
flat "$tmp/man5.txt" >"$tmp/kprism.toml.5"
flat "$README" >"$tmp/README.md"
flat "$SYSTEMD_README" >"$tmp/systemd-README.md"
flat "$K8S_README" >"$tmp/kubernetes-README.md"
docfile() { echo "$tmp/$1"; }

# The value of a constant in the code: the first group of the Perl regex $1 in include/ and src/.
# It must occur, and every occurrence must agree (two spellings of one limit are drift too).
# Digit separators (') and integer suffixes are dropped and simple arithmetic (64 * 1024) is
# evaluated.
code() {
    local vals
    vals=$(RE="$1" perl -0777 -ne 'while (/$ENV{RE}/g) { my $v = $1; $v =~ s/\x27//g; $v =~ s/(\d)(?:u|ul|ull|l|ll)\b/$1/gi; print "$v\n" }' \
        include/kprism/*/*.h src/*/*.cc | while read -r e; do
            if [[ $e =~ ^[0-9\ *+-]+$ ]]; then echo $((e)); else echo "$e"; fi
        done | sort -u)
    [ -n "$vals" ] || { echo "?"; return; }
    [ "$(wc -l <<<"$vals")" = 1 ] || { echo "conflicting($(tr '\n' ' ' <<<"$vals" | sed 's/ $//'))"; return; }
    echo "$vals"
}

# check LABEL EXPECTED DOC PATTERN: every occurrence of PATTERN (a Perl regex in which each #
# stands for a number, digits or a word up to twelve) in DOC (a name under $tmp) must state
# EXPECTED (the numbers, space-separated); there must be at least one.
check() {
    local label=$1 want=$2 doc=$3 pat=$4 got
    case $want in \?|conflicting*) bad "$label: in the code: $want"; return ;; esac
    got=$(PAT="$pat" perl -0777 -ne '
        my %w = (one=>1, two=>2, three=>3, four=>4, five=>5, six=>6, seven=>7, eight=>8, nine=>9,
                 ten=>10, eleven=>11, twelve=>12);
        my $p = $ENV{PAT};
        $p =~ s/#/(\\d+(?:\\.\\d+)*|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)/g;
        while (/$p/g) {
            my @n = map { exists $w{lc $_} ? $w{lc $_} : $_ } grep { defined } ($1, $2, $3, $4, $5);
            print join(" ", @n), "\n";
        }' "$(docfile "$doc")" | sort -u)
    local where="$doc '${pat//\\/}'"
    if [ -z "$got" ]; then
        bad "$label = $want: $where not found"
    elif [ "$got" != "$want" ]; then
        bad "$label = $want: $where says $(tr '\n' ',' <<<"$got" | sed 's/,$//')"
    else
        ok "$label = $want: $where"
    fi
}

# --- The option table: defaults, bounds and choices ------------------------------------------
# `kprism check` prints every key at its default (endpoints has none and comes from the flag).
"$BIN" check --endpoints 127.0.0.1:6443 2>/dev/null | awk '
    /^\[[a-z_]+\]$/ { sec = substr($0, 2, length($0) - 2) "."; next }
    /^[a-z_]+ = / { v = $0; sub(/^[a-z_]+ = /, "", v); sub(/  # default$/, "", v); print sec $1 "\t" v }' \
    | grep -v '^endpoints	' >"$tmp/defaults"
[ -s "$tmp/defaults" ] || { echo "doc-drift: no defaults in '$BIN check' output"; exit 1; }
# Flag of each key, from --help ("  --bind-port VALUE   port to listen on [bind_port]").
"$BIN" --help | sed -n 's/^ *\(--[a-z0-9-]*\) .*\[\([a-z_.]*\)\]$/\2\t\1/p' >"$tmp/flags"

# kprism.toml.5: "bind_port (integer; 1-65535, default 7445)" items, qualified by their section.
awk '
    /^[^ ]/ { sec = ($0 == "TOP-LEVEL KEYS") ? "" : ($0 ~ /^\[[a-z_]+\]$/ ? substr($0, 2, length($0) - 2) "." : "-"); next }
    sec != "-" && /^     [a-z_]+ \(.*\)$/ {
        k = $1; d = $0; sub(/^ *[a-z_]+ \(/, "", d); sub(/\)$/, "", d); print sec k "\t" d }' \
    "$tmp/man5.txt" >"$tmp/man5.items"
# kprism.8 OPTIONS: "(bind_port; integer 1-65535; default 7445)" at the start of each flag's text.
sed -n 's/^ *(\([a-z_.]*\); \([^;]*\); \([^)]*\)).*/\1\t\2\t\3/p' "$tmp/man8.txt" >"$tmp/man8.items"

# The full example of kprism.toml.5 and packaging/kprism.toml.example: key = value per section.
toml_values() {
    awk '
        { sub(/^ +/, "") }
        /^\[[a-z_]+\]$/ { sec = substr($0, 2, length($0) - 2) "."; next }
        /^[a-z_]+ = / { v = $0; sub(/^[a-z_]+ = /, "", v); sub(/ +#.*$/, "", v); print sec $1 "\t" v }'
}
sed -n '/A full configuration/,/^     Apiservers in two zones/p' "$tmp/man5.txt" | toml_values >"$tmp/man5.example"
toml_values <"$EXAMPLE" >"$tmp/example"

plain() {  # a TOML value as kprism.8 writes it: no quotes, a one-item list bare, "" as empty
    local v=$1
    v=${v#[}; v=${v%]}; v=${v//\"/}
    [ -n "$v" ] && echo "$v" || echo empty
}
is_duration() { [[ $1 =~ ^\"[0-9.]+(ns|us|ms|s|m|h)([0-9.]+(ns|us|ms|s|m|h))*\"$|^\"0\"$ ]]; }

while IFS=$'\t' read -r key def; do
    flag=$(awk -F'\t' -v k="$key" '$1 == k { print $2 }' "$tmp/flags")
    # Defaults.
    m5=$(awk -F'\t' -v k="$key" '$1 == k { print $2 }' "$tmp/man5.items")
    m5def=$(sed -n 's/.*default \(.*\)$/\1/p' <<<"$m5")
    [ "$m5def" = "$def" ] && ok "default $key = $def: kprism.toml.5" \
        || bad "default $key = $def: kprism.toml.5 says '${m5def:-nothing}' ($key (${m5:-not documented}))"
    m8=$(awk -F'\t' -v k="$key" '$1 == k { print $3 }' "$tmp/man8.items")
    m8def=$(sed -n 's/^default //p' <<<"$m8")
    want8=$(plain "$def")
    [ "$m8def" = "$want8" ] && ok "default $key = $def: kprism.8 $flag" \
        || bad "default $key = $def: kprism.8 $flag says '${m8def:-nothing}' (wants 'default $want8')"
    ex=$(awk -F'\t' -v k="$key" '$1 == k { print $2 }' "$tmp/man5.example")
    [ "$ex" = "$def" ] && ok "default $key = $def: kprism.toml.5 EXAMPLES" \
        || bad "default $key = $def: kprism.toml.5 EXAMPLES says '${ex:-nothing}'"
    ex=$(awk -F'\t' -v k="$key" '$1 == k { print $2 }' "$tmp/example")
    [ "$ex" = "$def" ] && ok "default $key = $def: $EXAMPLE" \
        || bad "default $key = $def: $EXAMPLE says '${ex:-nothing}'"
    # Bounds: an out-of-range value makes kprism print them ("out of range 1-65535").
    probe=
    if [[ $def =~ ^[0-9]+$ ]]; then probe=999999999; kind=integer
    elif is_duration "$def"; then probe=8000h; kind=duration
    fi
    if [ -n "$probe" ]; then
        range=$({ "$BIN" check --endpoints 127.0.0.1:6443 "$flag=$probe" 2>&1 >/dev/null || true; } \
            | sed -n 's/.* out of range \([^ ]*\)$/\1/p' | sed 's/^0s-/0-/')
        if [ -z "$range" ]; then
            bad "bounds $key: '$BIN check $flag=$probe' printed no range"
        else
            m5range=$(sed -n 's/^[a-z ]*; \([^,]*\), default .*/\1/p' <<<"$m5")
            [ "$m5range" = "$range" ] && ok "bounds $key = $range: kprism.toml.5" \
                || bad "bounds $key = $range: kprism.toml.5 says '${m5range:-nothing}'"
            m8type=$(awk -F'\t' -v k="$key" '$1 == k { print $2 }' "$tmp/man8.items")
            [ "$m8type" = "$kind $range" ] && ok "bounds $key = $range: kprism.8 $flag" \
                || bad "bounds $key = $range: kprism.8 $flag says '${m8type:-nothing}' (wants '$kind $range')"
        fi
    fi
    # Choices: a bad value makes kprism list them ("want one of: random, least-connections").
    if [[ $def =~ ^\"[a-z-]+\"$ ]]; then
        choices=$({ "$BIN" check --endpoints 127.0.0.1:6443 "$flag=zz-not-a-choice" 2>&1 >/dev/null || true; } \
            | sed -n 's/.*(want one of: \(.*\))$/\1/p' | tr -d ',')
        if [ -n "$choices" ]; then
            p5=$(awk -v k="${key##*.}" -v f=0 '$1 == k && $2 ~ /^\(/ { f = 1; print; next } f { print; exit }' <<<"$(sed -n "/^$( [ "${key%%.*}" = "$key" ] && echo 'TOP-LEVEL KEYS' || echo "\\[${key%%.*}\\]")\$/,/^[^ ]/p" "$tmp/man5.txt")")
            p8=$(grep -A1 "^ *($key; " "$tmp/man8.txt" || true)
            miss=
            for c in $choices; do
                grep -qF "\"$c\"" <<<"$p5" || miss="$miss kprism.toml.5:\"$c\""
                grep -qE "(^|[^a-z-])$c([^a-z-]|$)" <<<"$p8" || miss="$miss kprism.8:$c"
            done
            [ -z "$miss" ] && ok "choices $key = $(tr ' ' '|' <<<"$choices"): kprism.toml.5, kprism.8" \
                || bad "choices $key = $(tr ' ' '|' <<<"$choices"): missing$miss"
        fi
    fi
done <"$tmp/defaults"

# endpoints: required, no default, at most kMaxUpstreams - and the binary agrees.
if "$BIN" check >/dev/null 2>&1; then bad "endpoints required: '$BIN check' without endpoints succeeded"
else ok "endpoints required: '$BIN check' without endpoints fails"; fi
grep -qx $'endpoints\tlist; required, no default' "$tmp/man5.items" && ok "endpoints required: kprism.toml.5" \
    || bad "endpoints required: kprism.toml.5 does not say 'endpoints (list; required, no default)'"
maxup=$(code 'kMaxUpstreams\s*=\s*([^;]+);')
if [[ $maxup =~ ^[0-9]+$ ]]; then
    eps() { seq -f "127.0.0.1:%g" 6001 $((6000 + $1)) | paste -sd, -; }
    if "$BIN" check --endpoints "$(eps "$maxup")" >/dev/null 2>&1 \
        && ! "$BIN" check --endpoints "$(eps $((maxup + 1)))" >/dev/null 2>&1; then
        ok "upstream limit kMaxUpstreams = $maxup: '$BIN check' takes $maxup endpoints, refuses $((maxup + 1))"
    else
        bad "upstream limit kMaxUpstreams = $maxup: '$BIN check' does not take $maxup endpoints and refuse $((maxup + 1))"
    fi
fi
check "upstream limit kMaxUpstreams" "$maxup" kprism.8 'At most # (?:endpoints )?are supported'
check "upstream limit kMaxUpstreams" "$maxup" kprism.toml.5 '[Aa]t most # (?:endpoints )?are supported'
check "upstream limit kMaxUpstreams" "$maxup" kprism.toml.5 'At most # endpoints\.'

# --- Sizes and limits: named constants ------------------------------------------------------
kib() { case $1 in *[!0-9]*) echo "$1" ;; *) [ $(($1 % 1024)) = 0 ] && echo $(($1 / 1024)) || echo "$1 B" ;; esac; }
sec() { case $1 in *[!0-9]*) echo "$1" ;; *) echo $(($1 / $2)) ;; esac; }

# The configuration file's size limit, in bytes, as both pages state it.
maxcfg=$(code 'kMaxConfigFileBytes\s*=\s*([^;]+);')
check "config file limit kMaxConfigFileBytes" "$maxcfg" kprism.toml.5 'of at most 64 KiB \(# bytes\)'
check "config file limit kMaxConfigFileBytes" "$maxcfg" kprism.8 'the limit is # bytes'
check "TLS file limit kMaxTlsFileBytes" "$(code 'kMaxTlsFileBytes\s*=\s*([^;]+);')" kprism.toml.5 'regular file of at most 1 MiB \(# bytes\)'
check "list limit kMaxListEntries" "$(code 'kMaxListEntries\s*=\s*([^;]+);')" kprism.toml.5 'A list of more than # entries'
check "errors reported kMaxConfigErrors" "$(code 'kMaxConfigErrors\s*=\s*([^;]+);')" kprism.toml.5 'at most # errors are reported'

# Hostname endpoints: the addresses used per name, the slots they share, one resolution's bound.
pername=$(code 'kMaxNameAddresses\s*=\s*([^;]+);')
check "addresses per hostname kMaxNameAddresses" "$pername $pername" kprism.8 'At most # addresses of one name are used: with more, the first #'
check "addresses per hostname kMaxNameAddresses" "$pername" kprism.toml.5 'at most # per name'
check "upstream slots kMaxUpstreams" "$maxup" kprism.8 'all upstreams together share the # slots'
restime=$(sec "$(code 'kResolveTimeoutMs\s*=\s*([^;]+);')" 1000)
check "resolution timeout kResolveTimeoutMs (s)" "$restime" kprism.8 'One resolution ends within # s'
check "resolution timeout kResolveTimeoutMs (s)" "$restime" kprism.toml.5 'IPv4 and IPv6 addresses both, within # s'

chunk=$(kib "$(code 'kChunkSize\s*=\s*([^;]+);')")
check "read buffer kChunkSize (KiB)" "$chunk" kprism.8 'Read buffers are # KiB chunks'
check "read buffer kChunkSize (KiB)" "$chunk" kubernetes-README.md 'up to two # KiB buffers'
# The static pod's memory limit and the max_connections it is sized for, as its README states them.
podmem=$(sed -n '/^ *limits:/,/memory:/s/^ *memory: *\([0-9]*\)Mi$/\1/p' "$K8S_POD")
check "static pod limits.memory (Mi) in $K8S_POD" "${podmem:-?}" kubernetes-README.md 'with a #Mi memory limit'
podmax=$(sed -n 's/^max_connections = \([0-9]*\)$/\1/p' packaging/kubernetes/kprism.toml)
check "static pod max_connections in packaging/kubernetes/kprism.toml" "${podmax:-?}" kubernetes-README.md '`max_connections = #`'
spare=$(code 'BufferPool\(size_t max_free = (\d+)\)')
check "spare read buffers BufferPool max_free" "$spare" kprism.8 'Up to # spare chunks'
ff=$(kib "$(code 'kMaxFirstFlight\s*=\s*([^;]+);')")
check "first flight kMaxFirstFlight (KiB)" "$ff" kprism.8 'up to # KiB, for as long as the upstream'
check "first flight kMaxFirstFlight (KiB)" "$ff" kprism.8 'client has sent more than # KiB'
check "first flight kMaxFirstFlight (KiB)" "$ff" kprism.toml.5 'at most # KiB, are replayed'
check "first flight kMaxFirstFlight (KiB)" "$ff" kprism.toml.5 'client has sent more than # KiB'
resp=$(kib "$(code 'HttpResponseParser\(size_t max_bytes = (\d+)')")
check "probe response bound HttpResponseParser max_bytes (KiB)" "$resp" kprism.8 'never more than # KiB in all'
check "probe response bound HttpResponseParser max_bytes (KiB)" "$resp" kprism.8 'more than # KiB of headers'
excerpt=$(kib "$(code 'kReadyzBodyMax\s*=\s*([^;]+);')")
check "probe body kReadyzBodyMax (KiB)" "$excerpt" kprism.8 'up to # KiB of its body'
pmax=$(kib "$(code 'kProbeResponseMax\s*=\s*([^;]+);')")
check "probe response bound kProbeResponseMax (KiB)" "$pmax" kprism.8 'never more than # KiB in all'
burst=$(code 'kCloseBurst\s*=\s*([^;]+);')
burst_age=$(sec "$(code 'kCloseBurstMinAgeMs\s*=\s*([^;]+);')" 1000)
burst_win=$(sec "$(code 'kCloseBurstWindowMs\s*=\s*([^;]+);')" 1000)
check "close burst ControlPlane::kCloseBurst, kCloseBurstMinAgeMs (s)" "$burst $burst_age" kprism.8 '# connections held on that apiserver for more than # s whose'
check "close burst window ControlPlane::kCloseBurstWindowMs (s)" "$burst_win" kprism.8 'before their client did, within # s'
names=$(code 'kMaxNames\s*=\s*([^;]+);')
namelen=$(code 'kMaxNameLen\s*=\s*([^;]+);')
check "failing check names FailingChecks::kMaxNames" "$names" kprism.8 'reason an upstream is out: at most #,'
check "failing check name FailingChecks::kMaxNameLen" "$namelen" kprism.8 'each at most # bytes of'

amax=$(code 'kMaxConnections\s*=\s*([^;]+);')
check "admin connections Admin::kMaxConnections" "$amax" kprism.8 'At most # admin connections'
check "admin connections Admin::kMaxConnections" "$amax" kprism.8 'one per connection, # connections at once'
ato=$(sec "$(code 'kRequestTimeoutMs\s*=\s*([^;]+);')" 1000)
check "admin request deadline Admin::kRequestTimeoutMs (s)" "$ato" kprism.8 'not complete within # s of the connect'
check "admin request deadline Admin::kRequestTimeoutMs (s)" "$ato" kprism.8 'KiB head, # s, one per connection'
head=$(kib "$(code 'kMaxHead\s*=\s*([^;]+);')")
check "admin request head HttpRequestParser::kMaxHead (KiB)" "$head" kprism.8 'A request head may be at most # KiB long'
check "admin request head HttpRequestParser::kMaxHead (KiB)" "$head" kprism.8 '\(# KiB head, '
target=$(kib "$(code 'kMaxTarget\s*=\s*([^;]+);')")
check "admin request target HttpRequestParser::kMaxTarget (KiB)" "$target" kprism.8 'its target at most # KiB'
stale=$(sec "$(code 'kStaleNs\s*=\s*([^;]+);')" 1000000000)
recent=$(sec "$(code 'kRecentNs\s*=\s*([^;]+);')" 1000000000)
check "heartbeat Heartbeat::kStaleNs (s)" "$stale" kprism.8 'the last tick is more than # s old'
check "heartbeat Heartbeat::kStaleNs, kRecentNs (s)" "$stale $recent" kprism.8 'two ticks were more than # s apart \(the loop was blocked\) less than # s ago'
period=$(code 'kPeriodMs\s*=\s*([^;]+);')
[ "$period" = 1000 ] && p=second || p="$period ms"
if grep -q "ticks every $p" "$tmp/kprism.8"; then ok "heartbeat Heartbeat::kPeriodMs = $period ms: kprism.8 'ticks every $p'"
else bad "heartbeat Heartbeat::kPeriodMs = $period ms: kprism.8 'ticks every $p' not found"; fi
stall=$(sec "$(code 'kTestStallMs\s*=\s*([^;]+);')" 1000)
check "test stall Heartbeat::kTestStallMs (s)" "$stall" kprism.8 'blocks the event loop for # s'
bmin=$(sec "$(code 'kBackoffMinMs\s*=\s*([^;]+);')" 1000)
bmax=$(sec "$(code 'kBackoffMaxMs\s*=\s*([^;]+);')" 1000)
check "passive backoff kBackoffMinMs, kBackoffMaxMs (s)" "$bmin $bmax" kprism.8 'fail-open fallback: # s, doubling with each further consecutive failure up to # s'
fds="$(code 'kAdminReserveFds\s*=\s*([^;]+);') $(code 'kSpareFds\s*=\s*([^;]+);')"
check "descriptor reserve kAdminReserveFds, kSpareFds" "$fds" kprism.8 'one readiness check per upstream, # for admin connections and # spare'
buckets="$(code 'kBounds\[\]\s*=\s*\{([0-9.]+),' | awk '{ print $1 * 1000 }') $(code 'kBounds\[\]\s*=\s*\{[^}]*?([0-9.]+)\}')"
check "check duration buckets Histogram::kBounds (ms, s)" "$buckets" kprism.8 'buckets # ms to # s'
check "kprism status ERROR cell kErrorCellMax" "$(code 'kErrorCellMax\s*=\s*(\d+);')" kprism.8 'cut to # characters'
fmtv=$(code 'kMetricsContentType\s*=\s*"text/plain; version=([0-9.]+);')
check "metrics format kMetricsContentType" "$fmtv" kprism.8 'text exposition format #'

# --- Metric families: kprism(8) against kMetricFamilies ------------------------------------------
# Each row of the table ({Metric::x, "kprism_x", "type", on one line) must be an item of kprism(8)
# Metrics, "kprism_x{labels} type", of that type; and every kprism_* name kprism(8) uses anywhere
# must be a family of the table (a histogram's may add _bucket, _sum or _count).
FAMILIES_H=include/kprism/admin/metric_families.h
perl -ne 'print "$1 $2\n" if /^\s*\{Metric::\w+,\s*"(kprism_\w+)",\s*"(\w+)",/' "$FAMILIES_H" >"$tmp/families"
if [ ! -s "$tmp/families" ]; then
    bad "metric families: no rows read from $FAMILIES_H"
fi
while read -r name type; do
    said=$(sed -n -E "s/^ +${name}(\{[a-z_,]*\})? ([a-z]+)\$/\2/p" "$tmp/man8.txt" | sort -u | tr '\n' ' ' | sed 's/ $//')
    if [ "$said" = "$type" ]; then ok "metric family $name $type: kprism.8 Metrics"
    elif [ -z "$said" ]; then bad "metric family $name $type: kprism.8 Metrics has no item '$name $type'"
    else bad "metric family $name $type: kprism.8 Metrics says '$said'"; fi
done <"$tmp/families"
known=$(awk '{ print $1; if ($2 == "histogram") print $1 "_bucket\n" $1 "_sum\n" $1 "_count" }' "$tmp/families")
unknown=$(grep -oE 'kprism_[a-z][a-z0-9_]*' "$tmp/man8.txt" | sort -u | grep -vxF "$known" || true)
if [ -z "$unknown" ]; then ok "metric families: every kprism_* name in kprism.8 is a family of $FAMILIES_H"
else bad "metric families: kprism.8 names families not in $FAMILIES_H: $(tr '\n' ' ' <<<"$unknown" | sed 's/ $//')"; fi

# --- Exit statuses ----------------------------------------------------------------------------
check "exit status kExitConfig" "$(code 'kExitConfig\s*=\s*(\d+);')" kprism.8 ' # The command line or the configuration is invalid'
check "exit status kExitStartup" "$(code 'kExitStartup\s*=\s*(\d+);')" kprism.8 ' # The configuration is valid but kprism could not start'
check "kprism status exit kStatusUp, kStatusNoneUp, kStatusError" \
    "$(code 'kStatusUp\s*=\s*(\d+)') $(code 'kStatusNoneUp\s*=\s*(\d+)') $(code 'kStatusError\s*=\s*(\d+)')" \
    kprism.8 'It exits # when at least one upstream is up, # when none is, and # when the admin endpoint'

reload_codes() {  # kReloadOk ... kReloadTimeout, each in its own EXIT STATUS item
    local v
    v=$(code "$1"'\s*=\s*(\d+)')
    check "kprism reload exit $1" "$v" kprism.8.lines "(?m)^ +# +$2"
}
reload_codes kReloadOk 'Success:.*kprism reload: the new configuration was applied'
reload_codes kReloadRejected 'The command line .*kprism reload: the daemon rejected the file'
reload_codes kReloadError 'The configuration is valid but .*kprism reload: the admin endpoint cannot be reached'
reload_codes kReloadTimeout 'kprism reload: SIGHUP was sent but no outcome'
check "kprism reload poll kReloadPollMs" "$(code 'kReloadPollMs\s*=\s*(\d+)')" kprism.8 'again every # ms until the generation moves'
rto=$(sec "$(code 'Duration reload_timeout\{(\d+)\}')" 1000)
check "kprism reload --timeout default CommandLine::reload_timeout (s)" "$rto" kprism.8 'How long to wait for the outcome, [^.]*; default #s'
if grep -qF "waits for the outcome (default ${rto}s)" <<<"$("$BIN" --help)"; then ok "kprism reload --timeout default = $rto: --help"
else bad "kprism reload --timeout default = $rto: --help does not say '(default ${rto}s)'"; fi

# --- Log messages: each one kprism(8) LOGGING lists is a string in src/ -----------------------
msgs=$(sed -n '/^LOGGING$/,/^ENVIRONMENT$/p' "$tmp/man8.txt" | sed -n '/At level info and above/,/At debug/p' \
    | grep -oE '"[^"]+"' | tr -d '"' | sed 's/ *\.\.\.$//' | sort -u)
nmsg=0 missing=
while IFS= read -r m; do
    [ -n "$m" ] || continue
    nmsg=$((nmsg + 1))
    grep -qF "\"$m" src/*/*.cc || missing="$missing '$m'"
done <<<"$msgs"
if [ "$nmsg" = 0 ]; then bad "log messages: none found in kprism.8 LOGGING"
elif [ -z "$missing" ]; then ok "log messages: the $nmsg that kprism.8 LOGGING quotes are strings in src/"
else bad "log messages: kprism.8 LOGGING quotes messages that src/ does not have:$missing"; fi

# --- The systemd unit -------------------------------------------------------------------------
unit() { sed -n "s/^$1=//p" "$UNIT"; }
nofile=$(unit LimitNOFILE)
check "$UNIT LimitNOFILE" "$nofile" kprism.8 'The systemd unit sets LimitNOFILE=#'
check "$UNIT LimitNOFILE" "$nofile" systemd-README.md '`LimitNOFILE=#`'
wd=$(unit WatchdogSec | sed 's/s$//')
check "$UNIT WatchdogSec, half of it (s)" "$wd $((wd / 2))" systemd-README.md '`WatchdogSec=#s`: kprism pings every # s'
stop=$(unit TimeoutStopSec | sed 's/s$//')
drain=$(awk -F'\t' '$1 == "drain_timeout" { gsub(/[" s]/, "", $2); print $2 }' "$tmp/defaults")
check "$UNIT TimeoutStopSec, drain_timeout default (s), margin" "$stop $drain $((stop - drain))" systemd-README.md \
    '`TimeoutStopSec=#s` = `drain_timeout` \(# s\) \+ # s'

# Settings the systemd README quotes as `Key=value`: each must be the unit's.
for key in NotifyAccess ExecStart ExecReload Restart RestartSec StartLimitIntervalSec WatchdogSec TimeoutStopSec \
    LimitNOFILE Before DynamicUser RuntimeDirectory NoNewPrivileges ProtectSystem; do
    have=$(sed -n "s/^$key=//p" "$UNIT")
    quoted=$(grep -oE "\`$key=[^\`]*\`" "$SYSTEMD_README" | sed "s/^\`$key=//; s/\`\$//" | sort -u || true)
    [ -n "$quoted" ] || continue
    wrong=$(grep -vxF "$have" <<<"$quoted" || true)
    [ -z "$wrong" ] && ok "$UNIT $key=$have: $SYSTEMD_README" \
        || bad "$UNIT $key=$have: $SYSTEMD_README says $key=$(tr '\n' ' ' <<<"$wrong")"
done
reload_line=$(sed -n 's/^ExecReload=//p' "$UNIT")
grep -qF "ExecReload=$reload_line," "$tmp/kprism.8" && ok "$UNIT ExecReload=$reload_line: kprism.8" \
    || bad "$UNIT ExecReload=$reload_line: kprism.8 does not quote it"

# --- README.md: the few numbers it quotes -----------------------------------------------------
dflt() { awk -F'\t' -v k="$1" '$1 == k { gsub(/"/, "", $2); print $2 }' "$tmp/defaults"; }
check "default health.interval, health.timeout" "$(dflt health.interval | tr -d s) $(dflt health.timeout | tr -d s)" \
    README.md 'every # s \(`health.interval`\), within # s \(`health.timeout`\)'
check "default health.rise, health.fall" "$(dflt health.rise) $(dflt health.fall)" README.md \
    '`health.rise` \(#\) ready checks bring it up, `health.fall` \(#\)'
check "default first_response_timeout (s)" "$(dflt first_response_timeout | tr -d s)" README.md \
    'no byte back within `first_response_timeout` \(# s\)'
check "first flight kMaxFirstFlight (KiB)" "$ff" README.md 'up to # KiB'
check "default close_spread (s)" "$(dflt close_spread | tr -d s)" README.md 'past `close_spread` \(# s\)'

echo "doc-drift: $passed passed, $failed failed"
[ "$failed" = 0 ]
