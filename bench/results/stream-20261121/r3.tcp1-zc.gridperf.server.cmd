/tmp/stream-peers.MigZoO/gridperf serve --port 24420 --once
