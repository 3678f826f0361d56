/tmp/stream-peers.MigZoO/gridperf stream 127.0.0.1 -p 24196 -t 5 --json -u -b 1G -l 1472
