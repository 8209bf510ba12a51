#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every tracked source file starts with its licence line: "// SPDX-License-Identifier: Apache-2.0" (C++) or "# ..." (the rest).
# Source files: *.cc, *.h, *.sh, *.py, *.mk, Makefile, and any other file that starts with "#!";
# the line is the first one, or the second after a "#!" line. src/ and include/ are included.
# Outside a git work tree, the same files found under the tree (build/ excepted). Ends with
# "spdx: N passed, M failed"; exit status non-zero if any file lacks the line.
set -u
cd "$(dirname "$0")/../.." || exit 1
LINE='SPDX-License-Identifier: Apache-2.0'
passed=0 failed=0
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list() { git ls-files -z; }
else
    list() { find . -path ./build -prune -o -path ./.git -prune -o -type f -printf '%P\0'; }
fi
while IFS= read -r -d '' f; do
    [ -f "$f" ] || continue  # deleted in the work tree, not yet in the index
    case $f in tests/fuzz/corpus/*) continue ;; esac
    case $f in
        *.cc | *.h | *.sh | *.py | *.mk | Makefile | */Makefile) ;;
        *) [ "$(head -c 2 "$f")" = '#!' ] || continue ;;
    esac
    first=$(head -n 1 "$f"); second=$(sed -n 2p "$f")
    [[ $first == '#!'* ]] && first=$second
    if [[ $first == "// $LINE" || $first == "# $LINE" ]]; then
        passed=$((passed + 1))
    else
        echo "spdx: FAIL: $f: no '$LINE' line first (after a #! line)"
        failed=$((failed + 1))
    fi
done < <(list)
echo "spdx: $passed passed, $failed failed"
[ "$failed" = 0 ]
