/tmp/stream-peers.MigZoO/gridperf serve --port 24308 --once
