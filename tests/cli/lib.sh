# shellcheck shell=bash
# tests/cli/lib.sh — the checks shared by the command-line test scripts.
#
# Not a test itself (tests/run.sh skips it): a script sources it first,
#     . "$(dirname "$0")/lib.sh"
# records every check with the functions below and ends with `finish`, which
# prints the one line "N passed, N failed" that tests/run.sh reads. Every call
# of ok, bad, check, check_sh, expect_output or expect_error is exactly one
# check, passed or failed.
#
#   ok [NAME]
#       One passed check; prints "ok - NAME" when a NAME is given.
#   bad MESSAGE...
#       One failed check; prints "FAIL: MESSAGE" (tests/run.sh shows the
#       FAIL lines of a failing script).
#   check NAME CMD [ARG...]
#       Runs CMD with its arguments exactly as given (no second expansion);
#       passed iff it exits 0.
#           check "clean run: 17 rows" test "$(wc -l <"$f")" -eq 18
#   check_sh NAME CONDITION
#       Evaluates the shell text CONDITION (eval, with the script's variables;
#       single-quote it so that they expand when it is evaluated); passed iff
#       its status is 0.
#           check_sh "exit 2 naming the flag" '[ $rc -eq 2 ] && [[ "$out" == *--gpus* ]]'
#   expect_output TEXT CMD [ARG...]
#       Runs CMD; passed iff it exits 0 and its standard output and standard
#       error together contain TEXT (a fixed string, not a pattern).
#   expect_error STATUS TEXT CMD [ARG...]
#       Runs CMD with its standard output discarded; passed iff it exits with
#       exactly STATUS and its standard error contains TEXT (a fixed string).
#   finish
#       Prints "P passed, F failed" (P, F: the checks counted so far) and
#       ends the script: exit status 0 when no check failed, 1 otherwise.
#
# Return status: ok and bad return 0, so `COND && ok NAME || bad NAME`
# counts exactly one check; check, check_sh, expect_output and expect_error
# return 0 when the check passed, 1 when it failed.
# State: the counters cli_passed and cli_failed; scripts only read them.
# The functions' own variables start with "_cli_", so that the CONDITION of
# check_sh sees the script's $out, $rc, $name... and not theirs.

cli_passed=0
cli_failed=0

ok() {
    cli_passed=$((cli_passed + 1))
    if [ $# -gt 0 ]; then echo "ok - $*"; fi
    return 0
}

bad() {
    cli_failed=$((cli_failed + 1))
    echo "FAIL: $*"
    return 0
}

check() {
    local _cli_name=$1; shift
    if "$@"; then ok "$_cli_name"; return 0; fi
    bad "$_cli_name"; return 1
}

check_sh() {
    if eval "$2"; then ok "$1"; return 0; fi
    bad "$1"; return 1
}

expect_output() {
    local _cli_text=$1 _cli_out _cli_rc; shift
    _cli_out=$("$@" 2>&1); _cli_rc=$?
    if [ $_cli_rc -ne 0 ]; then bad "$*: exit $_cli_rc, want 0: $_cli_out"; return 1; fi
    if ! grep -qF -- "$_cli_text" <<<"$_cli_out"; then bad "$*: no '$_cli_text' in: $_cli_out"; return 1; fi
    ok; return 0
}

expect_error() {
    local _cli_want=$1 _cli_text=$2 _cli_err _cli_rc; shift 2
    _cli_err=$("$@" 2>&1 >/dev/null); _cli_rc=$?
    if [ $_cli_rc -ne "$_cli_want" ]; then bad "$*: exit $_cli_rc, want $_cli_want ($_cli_err)"; return 1; fi
    if ! grep -qF -- "$_cli_text" <<<"$_cli_err"; then bad "$*: no '$_cli_text' in: $_cli_err"; return 1; fi
    ok; return 0
}

finish() {
    echo "$cli_passed passed, $cli_failed failed"
    if [ $cli_failed -eq 0 ]; then exit 0; fi
    exit 1
}
