/tmp/stream-peers.MigZoO/gridperf serve --port 24428 --once
