/tmp/stream-peers.MigZoO/gridperf serve --port 24140 --once
