/tmp/stream-peers.MigZoO/gridperf serve --port 24172 --once
