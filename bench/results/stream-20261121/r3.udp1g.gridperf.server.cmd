/tmp/stream-peers.MigZoO/gridperf serve --port 24452 --once
