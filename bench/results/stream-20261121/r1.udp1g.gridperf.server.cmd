/tmp/stream-peers.MigZoO/gridperf serve --port 24196 --once
