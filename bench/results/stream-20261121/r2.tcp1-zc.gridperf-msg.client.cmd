/tmp/stream-peers.MigZoO/gridperf stream 127.0.0.1 -p 24292 -t 5 --json --zerocopy msg
