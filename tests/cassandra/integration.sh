#!/usr/bin/env bash
# The integration suite (tests/integration) against a real Cassandra node as well as cqlsim.
# Needs a running node: tests/cassandra/cluster.sh up.
#
#   tests/cassandra/integration.sh [HOST:PORT]     default: the cluster's first contact point
#
# Runs the suite with COUNTERSINK_TEST_STORE=cassandra:HOST:PORT in the two builds CI already
# makes of it (feature metrics-facade: everything but TLS; feature tls: the TLS tests), and
# the same against cqlsim unless CQLSIM_TALLY names the tally file of cqlsim runs already
# made (.ci/run passes its own). Each launch of a test store is tallied
# (tests/integration/common/store.rs). The tests that needed cqlsim in the
# cqlsim run are skipped against the node (they would only run against cqlsim again). From the
# tallies this prints how many tests ran against each store and which ones need cqlsim, and
# fails when none ran against the node, when a test that runs against any store ran against
# cqlsim but not the node, or when one of the tests named in must_run_on_node (below) did
# not run against the node (so that turning one into a cqlsim-only test is seen).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
contact="${1:-$("$here/cluster.sh" contact | cut -d, -f1)}"
[ -n "$contact" ] || { echo "integration.sh: no running node (tests/cassandra/cluster.sh up)" >&2; exit 1; }

tallies="$root/target/store-tally"
mkdir -p "$tallies"
# Distinct test names of a tally, for one store, with or without a reason (cqlsim only).
tests() { # file, store, any|needs-cqlsim|any-store
    awk -F'\t' -v store="$2" -v which="$3" '$1 == store && (which == "any" ||
        (which == "needs-cqlsim") == ($3 != "")) { print $2 }' "$1" | sort -u
}
count() { [ -z "$1" ] && echo 0 || echo "$1" | wc -l; }
suite() { # store, tally file, libtest arguments...
    local store="$1" tally="$2"
    shift 2
    rm -f "$tally"
    (cd "$root" && export COUNTERSINK_TEST_STORE="$store" COUNTERSINK_TEST_STORE_TALLY="$tally" &&
        cargo test --locked --features metrics-facade --test integration -- "$@" &&
        cargo test --locked --features tls --test integration -- tls)
}

# Tests that must run against the node: the guarantees of exact totals (issue tests 1, 3, 6,
# 7 and 8, with the faults the proxy of tests/integration/common/fault_proxy.rs makes, and
# the fault-free ledger), whose twins under cqlsim's own faults stay on cqlsim; and the
# hour and all-time total tables (their DDL as Cassandra takes it, written and read back).
must_run_on_node="cql_exact::the_ledger_and_the_counters_equal_what_was_fed
cql_exact::the_ledger_equals_what_was_fed_when_writes_go_unknown
cql_reconcile::outside_writers::an_outside_writer_is_the_one_unexplained_key_and_fails_the_run
cql_reconcile::repair::repair_makes_a_closed_day_equal_its_ledger
cql_reconcile::unknown_requests::two_equal_unknown_requests_are_ambiguous
cql_reconcile::unknown_requests::distinct_unknown_requests_are_resolved
crash::exact::reconcile_explains_a_kill_with_writes_in_flight_on_any_store
granularities::all_four_granularities_hold_the_exact_sums
granularities::an_hour_and_total_family_writes_only_those
granularities::spilled_hour_and_total_rows_are_replayed_by_the_next_start"

sim="${CQLSIM_TALLY:-}"
if [ -z "$sim" ]; then
    sim="$tallies/cqlsim.tsv"
    echo "==> the integration suite against cqlsim"
    suite cqlsim "$sim"
fi
store_facing="$(tests "$sim" cqlsim any-store)"
needs_cqlsim="$(tests "$sim" cqlsim needs-cqlsim)"
# Tests that ran against cqlsim because they need it would run against cqlsim again: skip them.
skips=()
while read -r name; do [ -n "$name" ] && skips+=(--skip "$name"); done <<<"$needs_cqlsim"
echo "==> the integration suite against Cassandra at $contact, but the $(count "$needs_cqlsim") tests that need cqlsim"
real="$tallies/cassandra.tsv"
suite "cassandra:$contact" "$real" --exact "${skips[@]}"
on_node="$(tests "$real" cassandra any)"
echo
echo "integration tests by store:"
echo "  against Cassandra ($contact): $(count "$on_node")"
echo "  against cqlsim, the same tests: $(count "$store_facing")"
echo "  against cqlsim only, because they need its powers: $(count "$needs_cqlsim")"
awk -F'\t' '$1 == "cqlsim" && $3 != "" { print $3 "\t" $2 }' "$sim" | sort -u | cut -f1 | sort | uniq -c |
    sed 's/^ */      /'
missing="$(comm -23 <(echo "$store_facing") <(echo "$on_node"))"
if [ "$(count "$on_node")" -eq 0 ]; then
    echo "no integration test ran against the Cassandra node"
    exit 1
fi
if [ -n "$missing" ]; then
    echo "ran against cqlsim but not against the node:"
    echo "$missing" | sed 's/^/  /'
    exit 1
fi
absent="$(comm -23 <(echo "$must_run_on_node" | sort) <(echo "$on_node"))"
if [ -n "$absent" ]; then
    echo "did not run against the node, though they must:"
    echo "$absent" | sed 's/^/  /'
    exit 1
fi
