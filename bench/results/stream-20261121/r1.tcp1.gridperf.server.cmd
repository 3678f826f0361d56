/tmp/stream-peers.MigZoO/gridperf serve --port 24108 --once
