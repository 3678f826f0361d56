/tmp/stream-peers.MigZoO/gridperf serve --port 24396 --once
