/tmp/stream-peers.MigZoO/gridperf serve --port 24340 --once
