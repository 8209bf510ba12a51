#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Hardening of the built binaries, read back with readelf and nm: PIE (ELF type DYN), a GNU_RELRO
# segment, immediate binding (FLAGS BIND_NOW or FLAGS_1 NOW), a non-executable stack (GNU_STACK
# RW), the stack protector (__stack_chk_fail referenced) and _FORTIFY_SOURCE (__*_chk functions
# referenced) for build/kprism, and on x86-64 CET (-fcf-protection: IBT and SHSTK in the GNU
# property note) of its objects, build/obj/*/*.o - the linked binary cannot carry the note, since
# Debian 12's glibc start files (crt1.o, crti.o) have none and the linker keeps only what all of
# its inputs have.
# For the static build/static/kprism, a stripped static PIE, what applies: DYN without an
# interpreter or shared libraries, RELRO, BIND_NOW, the stack, and the symbol checks on kprism's
# own objects (build/static/obj/*/*.o), since the stripped binary has no symbols left.
# First a self-test: the same checks must pass on a trivial C program built hardened, and each
# must fail on it built without the flags, so that a check that can never fail is caught.
# Usage: tests/packaging/hardening.sh                  KPRISM_BIN (default build/kprism) and
#                                                      KPRISM_STATIC_BIN (default build/static/kprism)
#        tests/packaging/hardening.sh --dynamic FILE...  only these dynamically linked binaries
# Ends with "hardening: N passed, M failed"; exit status 1 if any check failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
passed=0 failed=0
ok() { echo "hardening: ok: $*"; passed=$((passed + 1)); }
bad() { echo "hardening: FAIL: $*"; failed=$((failed + 1)); }
for tool in readelf nm; do
    command -v "$tool" >/dev/null || { echo "hardening: $tool not found (binutils)"; exit 1; }
done

# Each check succeeds or fails for one file; $why says what was found.
why=
elf_type() { readelf -hW "$1" 2>/dev/null | sed -n 's/^ *Type: *\([A-Z]*\).*/\1/p'; }
x86_64() { grep -q 'Machine:.*X86-64' <<<"$(readelf -hW "$1" 2>/dev/null)"; }
chk_pie() { why="ELF type $(elf_type "$1")"; [ "$(elf_type "$1")" = DYN ]; }
chk_relro() { why="no GNU_RELRO segment"; grep -qw GNU_RELRO <<<"$(readelf -lW "$1" 2>/dev/null)"; }
chk_now() {
    local d
    d=$(readelf -dW "$1" 2>/dev/null | grep -E '\((FLAGS|FLAGS_1)\)')
    why="no BIND_NOW: $(tr -s ' ' <<<"$d" | tr '\n' ';')"
    grep -Eq '\(FLAGS\).*BIND_NOW|\(FLAGS_1\).*[[:space:]]NOW([[:space:]]|$)' <<<"$d"
}
chk_stack() {
    local f
    f=$(readelf -lW "$1" 2>/dev/null | awk '$1 == "GNU_STACK" { print $7 }')
    why="GNU_STACK flags '${f:-none}'"
    [ "$f" = RW ]
}
chk_static() {
    why=$(readelf -lW -dW "$1" 2>/dev/null | grep -E 'INTERP|\(NEEDED\)' | tr -s ' ' | tr '\n' ';')
    [ -z "$why" ]
}
# Undefined symbols: of a binary's dynamic symbol table, or of object files.
undef_dyn() { nm -D -u "$1" 2>/dev/null | awk '{ print $NF }' | sed 's/@.*//'; }
undef_obj() { nm -u "$@" 2>/dev/null | awk 'NF { print $NF }'; }
# (Symbols are collected first: grep -q in a pipeline would stop nm early, which pipefail counts.)
has_ssp() { grep -qx __stack_chk_fail <<<"$1"; }
has_fortify() { grep -E '^__[A-Za-z0-9_]+_chk$' <<<"$1" | grep -vx __stack_chk_fail >/dev/null; }
chk_ssp() { why="__stack_chk_fail not referenced"; has_ssp "$(undef_dyn "$1")"; }
chk_fortify() { why="no __*_chk function referenced"; has_fortify "$(undef_dyn "$1")"; }
chk_ssp_objs() { why="__stack_chk_fail not referenced"; has_ssp "$(undef_obj "$@")"; }
chk_fortify_objs() { why="no __*_chk function referenced"; has_fortify "$(undef_obj "$@")"; }
chk_cet() {
    why="no 'x86 feature: IBT, SHSTK' property note"
    grep -q 'x86 feature:.*IBT, SHSTK' <<<"$(readelf -nW "$1" 2>/dev/null)"
}

# check NAME FUNC ARGS...: one ok/FAIL line.
check() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name: $why"; fi
}

dynamic() {
    local bin=$1
    [ -f "$bin" ] || { bad "$bin missing (make)"; return; }
    check "$bin: PIE (ELF type DYN)" chk_pie "$bin"
    check "$bin: GNU_RELRO segment" chk_relro "$bin"
    check "$bin: BIND_NOW (full RELRO)" chk_now "$bin"
    check "$bin: non-executable stack (GNU_STACK RW)" chk_stack "$bin"
    check "$bin: stack protector (__stack_chk_fail referenced)" chk_ssp "$bin"
    check "$bin: _FORTIFY_SOURCE (__*_chk functions referenced)" chk_fortify "$bin"
    cet_objs "$(dirname "$bin")/obj"
}

# CET of the objects in a directory (x86-64 only; nothing to check without objects).
cet_objs() {
    local o=("$1"/*/*.o) f nocet=()
    [ -f "${o[0]}" ] && x86_64 "${o[0]}" || return 0
    for f in "${o[@]}"; do chk_cet "$f" || nocet+=("${f##*/}"); done
    why="without IBT, SHSTK: ${nocet[*]}"
    check "$1/*/*.o: CET (IBT, SHSTK)" test ${#nocet[@]} = 0
}

static() {
    local bin=$1 objs=$2
    [ -f "$bin" ] || { bad "$bin missing (make static)"; return; }
    check "$bin: static PIE (ELF type DYN)" chk_pie "$bin"
    check "$bin: no interpreter, no shared libraries" chk_static "$bin"
    check "$bin: GNU_RELRO segment" chk_relro "$bin"
    check "$bin: BIND_NOW (full RELRO)" chk_now "$bin"
    check "$bin: non-executable stack (GNU_STACK RW)" chk_stack "$bin"
    local o=("$objs"/*/*.o)
    if [ ! -f "${o[0]}" ]; then
        bad "$objs/*/*.o missing: the stripped $bin has no symbols to check the stack protector and fortify with"
        return
    fi
    check "$objs/*/*.o: stack protector (__stack_chk_fail referenced)" chk_ssp_objs "${o[@]}"
    check "$objs/*/*.o: _FORTIFY_SOURCE (__*_chk functions referenced)" chk_fortify_objs "${o[@]}"
    cet_objs "$objs"
}

# The self-test: a trivial program with a stack buffer and fortifiable calls, built both ways.
self_test() {
    local cc=${CC:-cc} tmp
    command -v "$cc" >/dev/null || { bad "self-test: no C compiler ($cc)"; return; }
    tmp=$(mktemp -d)
    cat > "$tmp/t.c" <<'EOF'
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    char buf[64];
    strcpy(buf, argc > 1 ? argv[1] : "hardening");
    printf("%s\n", buf);
    return 0;
}
EOF
    if ! "$cc" -O2 -fstack-protector-strong -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 -fPIE -pie -fcf-protection \
            -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack -o "$tmp/hard" "$tmp/t.c" 2>"$tmp/err" &&
        ! "$cc" -O2 -fstack-protector-strong -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 -fPIE -pie \
            -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack -o "$tmp/hard" "$tmp/t.c" 2>"$tmp/err"; then
        bad "self-test: cannot build the hardened program: $(cat "$tmp/err")"
        rm -rf "$tmp"
        return
    fi
    # -z execstack makes newer linkers warn; that is the point here.
    if ! "$cc" -O0 -fno-stack-protector -U_FORTIFY_SOURCE -no-pie -fcf-protection=none \
            -Wl,-z,norelro -Wl,-z,lazy -Wl,-z,execstack -o "$tmp/plain" "$tmp/t.c" 2>"$tmp/err" &&
        ! "$cc" -O0 -fno-stack-protector -U_FORTIFY_SOURCE -no-pie \
            -Wl,-z,norelro -Wl,-z,lazy -Wl,-z,execstack -o "$tmp/plain" "$tmp/t.c" 2>"$tmp/err"; then
        bad "self-test: cannot build the plain program: $(cat "$tmp/err")"
        rm -rf "$tmp"
        return
    fi
    local checks=(chk_pie chk_relro chk_now chk_stack chk_ssp chk_fortify)
    local c missed=()
    for c in "${checks[@]}"; do
        "$c" "$tmp/hard" || missed+=("$c fails on the hardened program: $why")
        "$c" "$tmp/plain" && missed+=("$c passes on the plain program")
    done
    if x86_64 "$tmp/hard"; then
        checks+=(chk_cet)
        "$cc" -O2 -fcf-protection -c -o "$tmp/hard.o" "$tmp/t.c" && chk_cet "$tmp/hard.o" ||
            missed+=("chk_cet fails on the hardened object: $why")
        "$cc" -O2 -fcf-protection=none -c -o "$tmp/plain.o" "$tmp/t.c" && chk_cet "$tmp/plain.o" &&
            missed+=("chk_cet passes on the plain object")
    fi
    if [ ${#missed[@]} = 0 ]; then
        ok "self-test: ${#checks[@]} checks pass on a hardened build and each fails on a plain one"
    else
        bad "self-test: ${missed[*]}"
    fi
    rm -rf "$tmp"
}

self_test
if [ "${1:-}" = --dynamic ]; then
    shift
    for b in "$@"; do dynamic "$b"; done
else
    bin=${KPRISM_BIN:-build/kprism}
    dynamic "$bin"
    sbin=${KPRISM_STATIC_BIN:-build/static/kprism}
    static "$sbin" "$(dirname "$sbin")/obj"
fi
echo "hardening: $passed passed, $failed failed"
[ "$failed" = 0 ]
