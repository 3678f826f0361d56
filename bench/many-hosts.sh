#!/usr/bin/env bash
# bench/many-hosts.sh: issue 20's demonstrations, as root, in one run.
#
#  1. The store's write throughput (points a second, each its own
#     transaction, as a survey writes them): SQLite against PostgreSQL
#     (a private cluster of Debian's server on loopback), ROUNDS rounds.
#  2. Two quick surveys at once from two lab hosts (a1, a2) into one
#     PostgreSQL archive (in b1, beside the agent they measure), across the
#     `man` profile; then `runs list` and `report` from a third process.
#  3. Prometheus (in a1) scraping a1's agent and probing b1's through it
#     (/probe, relabeled as for blackbox_exporter) for MINUTES minutes;
#     the median RTT over time, read back through Prometheus' API.
#
# Usage: bench/many-hosts.sh [--rounds N] [--points N] [--minutes M] [--gridperf PATH] [--workdir DIR]
# Everything it starts it stops, by pid or by name (the lab, the cluster).

BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
BENCH=many-hosts
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
GRIDPERF=$REPO/target/release/gridperf
ROUNDS=3 POINTS=2000 MINUTES=3 WORKDIR=""
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --points) POINTS=$2; shift 2 ;;
        --minutes) MINUTES=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --workdir) WORKDIR=$2; shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root: the cluster runs as the postgres user, Prometheus in a lab host"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/initdb" ] || die "no PostgreSQL server: apt install postgresql"
command -v prometheus >/dev/null || die "no prometheus: apt install prometheus"
[ -n "$WORKDIR" ] || WORKDIR=$(mktemp -d /tmp/many-hosts.XXXXXX)
mkdir -p "$WORKDIR"; chmod 755 "$WORKDIR"
log "work directory: $WORKDIR"
run_header "$WORKDIR/run.md"
LAB=mh$$
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    for c in "$WORKDIR/pg-lo" "$WORKDIR/pg-lab"; do
        [ -d "$c/data" ] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$c/data" -m fast -w stop >/dev/null 2>&1 || true
    done
    "$GRIDPERF" lab down --name "$LAB" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# a cluster in DIR, listening on ADDR:PORT (run in the lab host HOST, if given)
cluster() {
    local dir=$1 addr=$2 port=$3 host=${4:-}
    mkdir -p "$dir"; chown postgres:postgres "$dir"
    runuser -u postgres -- "$PGBIN/initdb" -D "$dir/data" -A trust -U gridperf -E UTF8 --no-sync >/dev/null
    # the lab's hosts reach it from their own addresses
    echo "host all all 10.77.0.0/16 trust" >> "$dir/data/pg_hba.conf"
    local start=(runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 30
                 -o "-p $port -k $dir -c listen_addresses=$addr -c max_connections=50" start)
    if [ -n "$host" ]; then "$GRIDPERF" lab exec --name "$LAB" "$host" -- "${start[@]}" >/dev/null
    else "${start[@]}" >/dev/null; fi
}

# ---- 1: write throughput
log "building the store_write bench"
(cd "$REPO" && cargo build --release -q --bench store_write 2>/dev/null) || true
SW=$(ls -t "$REPO"/target/release/deps/store_write-* 2>/dev/null | grep -v '\.d$' | head -1)
[ -x "$SW" ] || die "the store_write bench did not build"
cluster "$WORKDIR/pg-lo" 127.0.0.1 55432
: > "$WORKDIR/write.jsonl"
for r in $(seq "$ROUNDS"); do
    rm -f "$WORKDIR/w.db"*
    "$SW" "$WORKDIR/w.db" "$POINTS" | sed 's/^{/{"store":"sqlite",/' >> "$WORKDIR/write.jsonl"
    runuser -u postgres -- "$PGBIN/psql" -q -h "$WORKDIR/pg-lo" -p 55432 -U gridperf -d postgres \
        -c "DROP TABLE IF EXISTS sweep_points, sweeps, points, runs, surveys, pscheduler_results, gridperf_schema CASCADE" >/dev/null
    "$SW" "postgres://gridperf@127.0.0.1:55432/postgres" "$POINTS" | sed 's/^{/{"store":"postgresql",/' >> "$WORKDIR/write.jsonl"
done
python3 - "$WORKDIR/write.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for s in ("sqlite", "postgresql"):
    v = [r["points_per_s"] for r in rows if r["store"] == s]
    med[s] = statistics.median(v)
    print(f"{s:11s} points/s median {med[s]:8.0f}  (rounds: {', '.join(f'{x:.0f}' for x in v)})")
print(f"postgresql / sqlite: {med['postgresql'] / med['sqlite']:.2f}x")
EOF

# ---- 2: two surveys at once from two lab hosts into one archive
"$GRIDPERF" lab up --name "$LAB" --profile man --hosts 2x1 >/dev/null
cluster "$WORKDIR/pg-lab" 10.77.2.1 5432 b1
DSN=postgres://gridperf@10.77.2.1:5432/postgres
"$GRIDPERF" lab exec --name "$LAB" b1 -- "$GRIDPERF" serve --bind 10.77.2.1 --max-tests 2 2>/dev/null &
PIDS+=($!)
sleep 1
log "two quick surveys at once: a1 and a2 -> b1's agent, both into $DSN"
start=$(date +%s.%N)
for h in a1 a2; do
    "$GRIDPERF" lab exec --name "$LAB" "$h" -- "$GRIDPERF" survey 10.77.2.1 --quick --proto tcp,udp \
        --db "$DSN" -o "$WORKDIR/survey-$h.html" --json > "$WORKDIR/survey-$h.json" 2> "$WORKDIR/survey-$h.err" &
    eval "S_$h=$!"
done
ra1=0; ra2=0
wait "$S_a1" || ra1=$?
wait "$S_a2" || ra2=$?
end=$(date +%s.%N)
log "surveys done: exit $ra1 and $ra2 in $(python3 -c "print(round($end - $start, 1))") s"
"$GRIDPERF" lab exec --name "$LAB" b1 -- "$GRIDPERF" runs list --db "$DSN" > "$WORKDIR/runs.txt"
"$GRIDPERF" lab exec --name "$LAB" b1 -- "$GRIDPERF" runs list --db "$DSN" --json > "$WORKDIR/runs.json"
"$GRIDPERF" lab exec --name "$LAB" b1 -- "$GRIDPERF" report --db "$DSN" -o "$WORKDIR/report.html" \
    > "$WORKDIR/report.txt" 2>&1 || true
cat "$WORKDIR/runs.txt"
python3 - "$WORKDIR/runs.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
for r in v["runs"]:
    print(f"run {r['id']}: survey {r['survey_id']} {r['kind']} {r['points']} points, {r['status']}, "
          f"{r['finished_unix'] - r['started_unix']:.0f} s, from: {r['command_line'][:60]}")
EOF

# ---- 3: Prometheus in a1, scraping a1's agent and probing b1's
cat > "$WORKDIR/probes.json" <<'EOF'
{ "modules": { "rtt": { "test": "rtt", "duration": "1s", "timeout": "250ms" } }, "targets": ["10.77.2.0/24"] }
EOF
"$GRIDPERF" lab exec --name "$LAB" a1 -- "$GRIDPERF" serve --bind 10.77.1.1 --metrics 10.77.1.1:9301 \
    --probe-config "$WORKDIR/probes.json" 2>/dev/null &
PIDS+=($!)
cat > "$WORKDIR/prometheus.yml" <<'EOF'
global: { scrape_interval: 5s, scrape_timeout: 4s }
scrape_configs:
  - job_name: agent
    static_configs: [ { targets: ['10.77.1.1:9301'] } ]
  - job_name: probe
    metrics_path: /probe
    params: { module: [rtt] }
    static_configs: [ { targets: ['10.77.2.1'] } ]
    relabel_configs:
      - { source_labels: [__address__], target_label: __param_target }
      - { source_labels: [__param_target], target_label: instance }
      - { target_label: __address__, replacement: '10.77.1.1:9301' }
EOF
"$GRIDPERF" lab exec --name "$LAB" a1 -- prometheus --config.file="$WORKDIR/prometheus.yml" \
    --storage.tsdb.path="$WORKDIR/tsdb" --web.listen-address=127.0.0.1:9090 > "$WORKDIR/prometheus.log" 2>&1 &
PIDS+=($!)
t0=$(date +%s)
log "Prometheus scrapes for $MINUTES minutes"
sleep $((MINUTES * 60))
t1=$(date +%s)
q() { "$GRIDPERF" lab exec --name "$LAB" a1 -- python3 -c '
import sys, urllib.request, urllib.parse
print(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/" + sys.argv[1] + "?" + urllib.parse.urlencode(dict(a.split("=", 1) for a in sys.argv[2:]))).read().decode())' "$@"; }
q query_range "query=gridperf_probe_rtt_seconds{quantile=\"0.5\"}" start=$t0 end=$t1 step=15 > "$WORKDIR/rtt-range.json"
q query "query=count_over_time(gridperf_probe_success[${MINUTES}m])" > "$WORKDIR/probes-count.json"
q query "query=avg_over_time(gridperf_probe_success[${MINUTES}m])" > "$WORKDIR/probes-ok.json"
q query "query=gridperf_agent_tests_total" > "$WORKDIR/agent-tests.json"
python3 - "$WORKDIR" <<'EOF'
import json, sys, os
d = sys.argv[1]
r = json.load(open(os.path.join(d, "rtt-range.json")))["data"]["result"]
n = json.load(open(os.path.join(d, "probes-count.json")))["data"]["result"]
ok = json.load(open(os.path.join(d, "probes-ok.json")))["data"]["result"]
print(f"probes scraped: {n[0]['value'][1] if n else 0}, success ratio {ok[0]['value'][1] if ok else '?'}")
for s in r:
    vals = s["values"]
    t0 = float(vals[0][0])
    print(f"median RTT over time, instance {s['metric'].get('instance')} (every 15 s):")
    for t, v in vals:
        ms = float(v) * 1e3
        print(f"  +{float(t) - t0:5.0f} s  {ms:7.3f} ms  " + "#" * int(round((ms - 1.5) * 40)))
EOF
log "results in $WORKDIR"
