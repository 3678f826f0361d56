/tmp/stream-peers.MigZoO/gridperf stream 127.0.0.1 -p 24108 -t 5 --json
