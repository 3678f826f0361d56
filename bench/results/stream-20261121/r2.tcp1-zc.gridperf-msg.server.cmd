/tmp/stream-peers.MigZoO/gridperf serve --port 24292 --once
