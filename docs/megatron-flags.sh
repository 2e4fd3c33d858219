#!/usr/bin/env bash
# The "Megatron flags" tables of docs/inputs.md, made from the output of
# `trainsim config --megatron-flags` (the shared flag table and
# topologies/megatron_flags.csv), so the page says what the program does.
#
#   bash docs/megatron-flags.sh [TRAINSIM]           print the block
#   bash docs/megatron-flags.sh --update [TRAINSIM]  rewrite it in docs/inputs.md
#
# TRAINSIM defaults to build/trainsim. The block sits between the lines
# "<!-- megatron-flags begin -->" and "<!-- megatron-flags end -->";
# tests/cli/inputs.sh checks that it is up to date.
set -euo pipefail
update=0
if [ "${1:-}" = "--update" ]; then update=1; shift; fi
T=${1:-build/trainsim}
DOC=docs/inputs.md
BEGIN='<!-- megatron-flags begin -->'
END='<!-- megatron-flags end -->'

block() {
    "$T" config --megatron-flags | LC_ALL=C awk '
        # flag treatment reason [(accepted: X)]; the last line holds the counts
        { lines[NR] = $0 }
        END {
            counts = lines[NR]
            for (i = 1; i < NR; i++) {
                split(lines[i], f, " ")
                flag = f[1]; tr = f[2]; reason = lines[i]
                sub(/^[^ ]+ +[^ ]+ +/, "", reason)
                if (tr == "modelled") {
                    modelled = modelled (modelled ? " " : "") "`" flag "`"
                } else if (tr == "default-only") {
                    acc = reason; sub(/.*\(accepted: /, "", acc); sub(/\)$/, "", acc)
                    sub(/ \(accepted: [^)]*\)$/, "", reason)
                    donly[++nd] = "| `" flag "` | " acc " | " reason " |"
                } else {
                    key = tr SUBSEP reason
                    if (!(key in by)) { order[tr, ++nr[tr]] = reason; n[key] = 0 }
                    by[key] = by[key] (n[key]++ ? " " : "") "`" flag "`"
                }
            }
            print "**" counts "** (`trainsim config --megatron-flags`; modelled counts every flag of the shared"
            print "flag table, trainsim'"'"'s own such as `--model`, `--gpu` and `--topology` included)."
            print ""
            print "**Modelled**: " modelled "."
            print ""
            print "**Refused** (what the flag changes):"
            print ""
            print "| not modelled | flags |"
            print "|---|---|"
            emit("refused")
            print ""
            print "**Default-only** (accepted silently with the value shown; refused otherwise):"
            print ""
            print "| flag | accepted | what another value changes |"
            print "|---|---|---|"
            for (i = 1; i <= nd; i++) print donly[i]
            print ""
            print "<details><summary><b>Ignored</b> (cannot change performance), by reason</summary>"
            print ""
            print "| reason | flags |"
            print "|---|---|"
            emit("ignored")
            print ""
            print "</details>"
        }
        # one row per reason, reasons sorted, flags in name order
        function emit(tr,   i, m, r, k, tmp) {
            m = nr[tr]
            for (i = 1; i <= m; i++) r[i] = order[tr, i]
            for (i = 2; i <= m; i++)
                for (k = i; k > 1 && r[k - 1] > r[k]; k--) { tmp = r[k]; r[k] = r[k - 1]; r[k - 1] = tmp }
            for (i = 1; i <= m; i++) print "| " r[i] " | " by[tr, r[i]] " |"
        }'
}

if [ $update -eq 0 ]; then
    block
    exit 0
fi
grep -qxF "$BEGIN" "$DOC" && grep -qxF "$END" "$DOC" || { echo "$DOC: no $BEGIN / $END lines" >&2; exit 1; }
new=$(mktemp "$DOC.XXXXXX") # beside it, so that the rename is atomic
trap 'rm -f "$new"' EXIT
{
    sed -n "1,/^$BEGIN\$/p" "$DOC"
    block
    sed -n "/^$END\$/,\$p" "$DOC"
} >"$new"
chmod 644 "$new"
mv "$new" "$DOC"
