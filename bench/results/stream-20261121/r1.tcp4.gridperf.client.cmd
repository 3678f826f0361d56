/tmp/stream-peers.MigZoO/gridperf stream 127.0.0.1 -p 24140 -t 5 --json -P 4
