# SPDX-License-Identifier: Apache-2.0
# `make help`: the targets and variables of Makefile and mk/*.mk, from their `## ` comments.
#   target ...: prerequisites ## one line       a target (on its rule line)
#   ##@ Heading                                  a heading, in file order
#   ## NAME=default: one line                    a variable (just above its definition)
BEGIN {
    print "Usage: make [TARGET...] [NAME=value...]; plain `make` is `make all`"
}
/^##@ / { printf "\n%s:\n", substr($0, 5); next }
/^## [A-Z][A-Z0-9_]*=/ {
    line = substr($0, 4); i = index(line, ": ")
    vars[++nvars] = sprintf("  %-26s %s", substr(line, 1, i - 1), substr(line, i + 2))
    next
}
/^[A-Za-z0-9][A-Za-z0-9_. -]*:([^=]|$)/ && / ## / {
    name = substr($0, 1, index($0, ":") - 1); sub(/ +$/, "", name)
    desc = substr($0, index($0, " ## ") + 4)
    printf "  %-20s %s\n", name, desc
}
END {
    printf "\nVariables:\n"
    for (i = 1; i <= nvars; i++) print vars[i]
}
