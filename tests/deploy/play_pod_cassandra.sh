#!/usr/bin/env bash
# The played pod (play_pod.sh) with a real Apache Cassandra node as its store instead of
# cqlsim: one node from tests/cassandra/cluster.sh (jars fetched once into target/, as the
# real-node step does), up for this check only, down at the end. The spill phase needs a
# store the script can stop, so it runs against cqlsim only (play_pod.sh alone).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jdk-headless maven >/dev/null
fi
tests/cassandra/cluster.sh up 1
trap 'tests/cassandra/cluster.sh down' EXIT
PLAY_POD_STORE="$(tests/cassandra/cluster.sh contact | cut -d, -f1)" bash "$here/play_pod.sh"
