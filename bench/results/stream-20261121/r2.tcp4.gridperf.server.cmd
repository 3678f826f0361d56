/tmp/stream-peers.MigZoO/gridperf serve --port 24284 --once
