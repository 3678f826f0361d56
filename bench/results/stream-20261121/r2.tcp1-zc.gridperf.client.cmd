/tmp/stream-peers.MigZoO/gridperf stream 127.0.0.1 -p 24308 -t 5 --json --zerocopy sendfile
